// Package gpucheck is the acceptance check an admin runs on a bare GPU node
// before installing Tangram (`make gpu-check-bundle`, then `gpu-check/run
// OUTDIR` on the node; docs/nvml.md#gpu-check-before-installing). It holds
// what can be decided without a GPU: running checks one after another, each
// under its own deadline and none aborting the others; the summary line and
// the Markdown report; comparing what `nvidia-smi -q -x` and `nvidia-smi
// topo -m` say (read by package gpucheck/nvidiasmi) with the plugin's
// inventory; what the enforcement detection may claim on the machine it
// sees; which steps to skip on a machine that lacks what they need; and
// judging what the allocating client reports. Package gpucheck/probe runs the checks against the
// driver, through the plugin's own code.
package gpucheck

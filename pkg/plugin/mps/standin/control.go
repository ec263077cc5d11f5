package standin

import "github.com/tangram-gpu/tangram/pkg/plugin/mps/control"

// Control is control.Binary with the stand-in control program run in this
// process (fake GPUs: the plugin has no control binary), so that the
// plugin's client code is the same as on a GPU node.
func Control(pipeDir string, opts ...control.Option) control.Func {
	return control.Binary(Runner{}, control.BinaryName, pipeDir, opts...)
}

var _ control.Runner = Runner{}

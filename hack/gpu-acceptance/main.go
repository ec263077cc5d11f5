// Command gpu-acceptance holds the judgments of `make gpu-acceptance`
// (hack/gpu-acceptance/run.sh), so that they are unit-tested here rather than
// written in shell:
//
//	gpu-acceptance compare --slices slices.json --smi nvidia-smi.xml
//	gpu-acceptance judge --shape memory-share --try-mib N [--share-mib N] --log pod.log
//
// Each prints report rows and exits 1 when a check failed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/tangram-gpu/tangram/pkg/gpuacceptance"
)

func main() {
	failed, err := run(os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-acceptance:", err)
		os.Exit(2)
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) (int, error) {
	if len(args) == 0 {
		return 0, errors.New("usage: gpu-acceptance compare|judge ...")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	switch args[0] {
	case "compare":
		slicesFile := fs.String("slices", "", "output of dra-kubelet-plugin slices -o json")
		smiFile := fs.String("smi", "", "output of nvidia-smi -q -x")
		if err := fs.Parse(args[1:]); err != nil {
			return 0, err
		}
		return compare(*slicesFile, *smiFile, out)
	case "judge":
		shape := fs.String("shape", "", "whole-card, memory-share or nvlink-pair")
		try := fs.Int64("try-mib", 0, "what cuda-alloc was asked to allocate")
		share := fs.Int64("share-mib", 0, "the share's memory request (memory-share)")
		logFile := fs.String("log", "", "the pod's log")
		if err := fs.Parse(args[1:]); err != nil {
			return 0, err
		}
		log, err := os.ReadFile(*logFile)
		if err != nil {
			return 0, fmt.Errorf("reading the pod log: %w", err)
		}
		e := gpuacceptance.Expectation{Shape: gpuacceptance.Shape(*shape), TryMiB: *try, ShareMiB: *share}
		var check gpuacceptance.Check
		if r, err := gpuacceptance.ParseAllocLog(string(log)); err != nil {
			check = gpuacceptance.Check{Card: *shape, Field: "pod", Plugin: err.Error(), SMI: "want a cuda-alloc result"}
		} else {
			check = gpuacceptance.Judge(e, r)
		}
		return gpuacceptance.WriteReport(out, []gpuacceptance.Check{check}), nil
	default:
		return 0, fmt.Errorf("unknown subcommand %q: want compare or judge", args[0])
	}
}

func compare(slicesFile, smiFile string, out io.Writer) (int, error) {
	sf, err := os.Open(slicesFile)
	if err != nil {
		return 0, err
	}
	defer sf.Close()
	devices, err := gpuacceptance.ParseSlices(sf)
	if err != nil {
		return 0, err
	}
	xf, err := os.Open(smiFile)
	if err != nil {
		return 0, err
	}
	defer xf.Close()
	smi, err := gpuacceptance.ParseSMI(xf)
	if err != nil {
		return 0, err
	}
	return gpuacceptance.WriteReport(out, gpuacceptance.Compare(devices, smi)), nil
}

package packing

import (
	"context"
	"testing"

	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	resourcev1conv "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"github.com/tangram-gpu/tangram/pkg/gpu/fakegpu"
	"github.com/tangram-gpu/tangram/pkg/resourceslices"
)

// TestPublishedSlicesPassTheAPIServersValidation runs kube-apiserver
// 1.37's own ResourceSlice validation (k8s.io/kubernetes, which only this
// module links) on what the kubelet plugin publishes: a node of nine H100s,
// eight in MIG mode (201 devices consuming counters, split 64 a slice, and
// the eight counter sets in a slice of their own), and a DGX H100 sharing
// its cards.
func TestPublishedSlicesPassTheAPIServersValidation(t *testing.T) {
	dgx, err := fakegpu.BuiltinProfile("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, yaml := range []string{
		"defaults: {productName: NVIDIA H100 80GB HBM3, memory: 80Gi, migType: h100-80gb, migMode: enabled}\ngpus:\n" +
			"- {index: 0}\n- {index: 1}\n- {index: 2}\n- {index: 3}\n- {index: 4}\n- {index: 5}\n- {index: 6}\n- {index: 7}\n- {index: 8, migMode: disabled}\n",
		"",
	} {
		p := dgx
		if yaml != "" {
			if p, err = fakegpu.ParseProfile([]byte(yaml)); err != nil {
				t.Fatal(err)
			}
		}
		gpus, err := fakegpu.NewFakeSource("node-1", p).GPUs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res, err := resourceslices.DriverResources(gpus, resourceslices.Options{NodeName: "node-1", Sharing: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resourceslices.ResourceSlices("node-1", res) {
			var out resourceinternal.ResourceSlice
			if err := resourcev1conv.Convert_v1_ResourceSlice_To_resource_ResourceSlice(s, &out, nil); err != nil {
				t.Fatal(err)
			}
			errs := validation.ValidateResourceSlice(&out)
			t.Logf("%s: %d devices, %d counter sets, %d errors", s.Name, len(s.Spec.Devices), len(s.Spec.SharedCounters), len(errs))
			for _, e := range errs {
				t.Errorf("%s: %v", s.Name, e)
			}
		}
	}
}

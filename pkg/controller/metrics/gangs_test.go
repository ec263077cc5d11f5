package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	tangramv1alpha1 "github.com/tangram-gpu/tangram/api/tangram/v1alpha1"
)

func gang(count, placed, running int32, phase tangramv1alpha1.GangPhase) *tangramv1alpha1.GpuGang {
	g := &tangramv1alpha1.GpuGang{}
	g.Spec.Members.Count = count
	g.Status.Phase, g.Status.Placed, g.Status.Running = phase, placed, running
	return g
}

func TestGangCollector(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gangs []*tangramv1alpha1.GpuGang
		err   error
		want  string
	}{{
		name: "no gangs: every phase is reported as zero",
		want: `
tangram_gpugang_members{state="placed"} 0
tangram_gpugang_members{state="running"} 0
tangram_gpugang_members{state="wanted"} 0
tangram_gpugang_scrape_error 0
tangram_gpugangs{phase="Failed"} 0
tangram_gpugangs{phase="Pending"} 0
tangram_gpugangs{phase="Running"} 0
tangram_gpugangs{phase="Scheduled"} 0
`,
	}, {
		name: "phases counted, an unreconciled gang is pending, members summed",
		gangs: []*tangramv1alpha1.GpuGang{
			gang(4, 4, 4, tangramv1alpha1.GangRunning),
			gang(2, 2, 2, tangramv1alpha1.GangRunning),
			gang(8, 3, 0, tangramv1alpha1.GangPending),
			gang(2, 0, 0, ""),
			gang(2, 2, 1, tangramv1alpha1.GangFailed),
		},
		want: `
tangram_gpugang_members{state="placed"} 11
tangram_gpugang_members{state="running"} 7
tangram_gpugang_members{state="wanted"} 18
tangram_gpugang_scrape_error 0
tangram_gpugangs{phase="Failed"} 1
tangram_gpugangs{phase="Pending"} 2
tangram_gpugangs{phase="Running"} 2
tangram_gpugangs{phase="Scheduled"} 0
`,
	}, {
		name: "listing fails: only the error gauge",
		err:  errors.New("cache gone"),
		want: `
tangram_gpugang_scrape_error 1
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			col := &GangCollector{List: func() ([]*tangramv1alpha1.GpuGang, error) { return tc.gangs, tc.err }}
			if err := compare(t, col, tc.want); err != nil {
				t.Error(err)
			}
		})
	}
	if err := prometheus.NewPedanticRegistry().Register(&GangCollector{}); err != nil {
		t.Errorf("registering: %v", err)
	}
}

package usageview_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/pkg/clusterview/usageview"
	"github.com/tangram-gpu/tangram/pkg/gpu"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
)

const gib = int64(1) << 30

// served is what the plugin's collector serves after one round of report
// on node n1's three cards, in the text format, with a series of another
// collector beside it.
func served(t *testing.T, report usage.Report) []byte {
	t.Helper()
	return servedBy(t, "n1", []string{"GPU-1", "GPU-2", "GPU-3"}, report)
}

// servedBy is what the collector of node with cards serves.
func servedBy(t *testing.T, node string, cards []string, report usage.Report) []byte {
	t.Helper()
	reg := prometheus.NewRegistry()
	// No device names: those tests name the cards from ResourceSlices
	// (TestBuildNamesCardsFromTheirSeries names them from the series).
	var named []usage.Card
	for _, uuid := range cards {
		named = append(named, usage.Card{UUID: uuid})
	}
	m, err := usage.NewMetrics(reg, node, named)
	if err != nil {
		t.Fatal(err)
	}
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "tangram_prepare_total", Help: "Another series."})
	reg.MustRegister(other)
	// What Attribute sets on a share: what it was given.
	report.Uses = slices.Clone(report.Uses)
	for i, u := range report.Uses {
		if u.AllowedBytes == 0 && u.Device.Share {
			report.Uses[i].AllowedBytes = u.Device.MemoryBytes
		}
	}
	m.Publish(context.Background(), report)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// aRound has every kind of series: a share over its memory and one under,
// a whole card, a MIG partition, processes no claim accounts for, the
// node's own and an ambiguous one.
func aRound() usage.Report {
	share := func(gibs int64) prepared.Device {
		return prepared.Device{Device: "gpu-0", GPUUUID: "GPU-1", Share: true, MemoryBytes: gibs * gib}
	}
	return usage.Report{
		Uses: []usage.Use{
			{Namespace: "team", Name: "small", Device: share(4), UsedBytes: 5 * gib, UsedKnown: true, Over: true, SMPercent: 35, SMKnown: true},
			{Namespace: "team", Name: "big", Device: share(16), UsedBytes: 4 * gib, UsedKnown: true},
			{Namespace: "lab", Name: "whole", Device: prepared.Device{Device: "gpu-1", GPUUUID: "GPU-2"}, UsedBytes: 30 * gib, UsedKnown: true, SMPercent: 80, SMKnown: true},
			{Namespace: "lab", Name: "part", Device: prepared.Device{Device: "gpu-2-mig-19-3", GPUUUID: "GPU-3", MIG: &prepared.MIG{ParentIndex: 2, ProfileID: 19, Start: 3}}, UsedBytes: gib, UsedKnown: true},
		},
		Strays: []usage.Stray{
			{Process: gpu.Process{Card: "GPU-2", PID: 60, UsedBytes: 2 * gib}},
			{Process: gpu.Process{Card: "GPU-2", PID: 61, UsedBytes: -1}},
		},
		Node:      []gpu.Process{{Card: "GPU-1", PID: 70, UsedBytes: gib / 2}},
		Ambiguous: []gpu.Process{{Card: "GPU-1", PID: 10}},
	}
}

// TestParseWhatThePluginServes: the parser reads what the plugin's real
// collector serves, every series of it, so that a metric renamed or
// relabelled there fails here.
func TestParseWhatThePluginServes(t *testing.T) {
	before := time.Now().Add(-time.Second)
	text := served(t, aRound())
	got, err := usageview.Parse(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got.ReadAt == nil || got.ReadAt.Before(before) || got.ReadAt.After(time.Now()) {
		t.Errorf("ReadAt = %v, want the round's time, about now", got.ReadAt)
	}
	want := usageview.Node{
		Name: "n1",
		Cards: []usageview.Card{
			{UUID: "GPU-1", UsedBytes: 9*gib + gib/2, NodeProcesses: 1, AmbiguousProcesses: 1},
			{UUID: "GPU-2", UsedBytes: 32 * gib, UnaccountedProcesses: 2, UnaccountedBytes: 2 * gib},
			{UUID: "GPU-3", UsedBytes: gib},
		},
		OtherDevices: []usageview.Device{
			{Namespace: "team", Claim: "small", Device: "gpu-0", UsedBytes: 5 * gib, Share: true, AllowedBytes: 4 * gib, Over: true, SMPercent: ptr.To(35)},
			{Namespace: "team", Claim: "big", Device: "gpu-0", UsedBytes: 4 * gib, Share: true, AllowedBytes: 16 * gib},
			{Namespace: "lab", Claim: "whole", Device: "gpu-1", UsedBytes: 30 * gib, SMPercent: ptr.To(80)},
			{Namespace: "lab", Claim: "part", Device: "gpu-2-mig-19-3", UsedBytes: gib},
		},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(usageview.Node{}, "ReadAt")); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

// TestMetricNames: the names usageview reads are exactly those the
// plugin serves.
func TestMetricNames(t *testing.T) {
	text := served(t, aRound())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var servedNames []string
	for name := range families {
		if strings.HasPrefix(name, "tangram_gpu_") {
			servedNames = append(servedNames, name)
		}
	}
	slices.Sort(servedNames)
	read := slices.Sorted(slices.Values(usageview.Metrics))
	if diff := cmp.Diff(servedNames, read); diff != "" {
		t.Errorf("the plugin serves (-) what usageview does not read, or usageview reads (+) what it does not serve:\n%s", diff)
	}
}

// TestParseRejects: what is not one node's usage is an error; a plugin
// that published no round, or serves no usage at all, is no error.
func TestParseRejects(t *testing.T) {
	tests := []struct{ name, text, wantErr string }{
		{name: "not the text format", text: "{\"nodes\": []}\n", wantErr: "reading the metrics"},
		{name: "two nodes", text: "tangram_gpu_node_processes{node=\"a\",uuid=\"GPU-1\"} 0\ntangram_gpu_node_processes{node=\"b\",uuid=\"GPU-1\"} 0\n", wantErr: `two nodes, "a" and "b"`},
		{name: "no node label", text: "tangram_gpu_node_processes{uuid=\"GPU-1\"} 0\n", wantErr: "no node label"},
		{name: "no usage series", text: "# TYPE tangram_prepare_total counter\ntangram_prepare_total 3\n"},
		{name: "nothing served", text: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := usageview.Parse(strings.NewReader(tt.text))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Parse = %+v, %v; want an error with %q", n, err, tt.wantErr)
			}
		})
	}
}

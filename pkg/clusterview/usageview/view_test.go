package usageview_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tangram-gpu/tangram/internal/golden"
	"github.com/tangram-gpu/tangram/pkg/clusterview"
	"github.com/tangram-gpu/tangram/pkg/clusterview/usageview"
	"github.com/tangram-gpu/tangram/pkg/device"
	"github.com/tangram-gpu/tangram/pkg/plugin/prepared"
	"github.com/tangram-gpu/tangram/pkg/plugin/usage"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// roundAt is the round's time the goldens show, now four seconds later.
var (
	roundAt = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now     = roundAt.Add(4 * time.Second)
)

var roundLine = regexp.MustCompile(`(?m)^(tangram_gpu_usage_round_timestamp_seconds\{[^}]*\}) .*$`)

// at sets the round's timestamp of served metrics to roundAt.
func at(text []byte) []byte {
	return roundLine.ReplaceAll(text, []byte("${1} 1.7723664e+09"))
}

var n1Names = usageview.CardNames{"n1": {"GPU-1": "gpu-0", "GPU-2": "gpu-1", "GPU-3": "gpu-2"}}

// TestBuild: each source becomes its node; a pod whose metrics could not
// be read or parsed, or that published no round, is shown so; devices go
// onto their cards where the slices name them.
func TestBuild(t *testing.T) {
	if got := time.Unix(1772366400, 0).UTC(); !got.Equal(roundAt) {
		t.Fatalf("the fixed round timestamp reads %v, want %v", got, roundAt)
	}
	tests := []struct {
		name    string
		sources []usageview.Source
		names   usageview.CardNames
		want    []usageview.Node
	}{{
		name:    "metrics not read",
		sources: []usageview.Source{{Node: "n2", Pod: "plugin-b", Err: errors.New("the server is currently unable to handle the request")}},
		want:    []usageview.Node{{Name: "n2", Pod: "plugin-b", Error: "the server is currently unable to handle the request"}},
	}, {
		name:    "not the text format",
		sources: []usageview.Source{{Node: "n2", Pod: "plugin-b", Metrics: []byte("<html>\n")}},
		want:    []usageview.Node{{Name: "n2", Pod: "plugin-b", Error: "reading the metrics: text format parsing error in line 1: invalid metric name"}},
	}, {
		name:    "no round",
		sources: []usageview.Source{{Node: "n2", Pod: "plugin-b", Metrics: []byte("# TYPE tangram_prepare_total counter\ntangram_prepare_total 3\n")}},
		want: []usageview.Node{{Name: "n2", Pod: "plugin-b",
			Error: "no GPU usage published: the plugin does not watch it (kubeletPlugin.usage), or its first round has not run yet"}},
	}, {
		name:    "idle cards, not named",
		sources: []usageview.Source{{Node: "n3", Pod: "plugin-c", Metrics: at(servedBy(t, "n3", []string{"GPU-b", "GPU-a"}, usage.Report{}))}},
		want: []usageview.Node{{Name: "n3", Pod: "plugin-c", ReadAt: &roundAt, AgeSeconds: 4,
			Cards: []usageview.Card{{UUID: "GPU-a"}, {UUID: "GPU-b"}}}},
	}, {
		name: "a device on a card the slices do not name",
		sources: []usageview.Source{{Node: "n3", Pod: "plugin-c", Metrics: at(servedBy(t, "n3", []string{"GPU-a", "GPU-b"}, usage.Report{
			Uses: []usage.Use{{Namespace: "ns", Name: "c", Device: prepared.Device{Device: "gpu-1", GPUUUID: "GPU-b"}, UsedBytes: gib}}}))}},
		names: usageview.CardNames{"n3": {"GPU-a": "gpu-0"}},
		want: []usageview.Node{{Name: "n3", Pod: "plugin-c", ReadAt: &roundAt, AgeSeconds: 4,
			Cards:        []usageview.Card{{Name: "gpu-0", UUID: "GPU-a"}, {UUID: "GPU-b", UsedBytes: gib}},
			OtherDevices: []usageview.Device{{Namespace: "ns", Claim: "c", Device: "gpu-1", UsedBytes: gib}}}},
	}, {
		name: "one card: its devices are its, named or not",
		sources: []usageview.Source{{Node: "n3", Pod: "plugin-c", Metrics: at(servedBy(t, "n3", []string{"GPU-a"}, usage.Report{
			Uses: []usage.Use{{Namespace: "ns", Name: "c", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-a"}, UsedBytes: gib}}}))}},
		want: []usageview.Node{{Name: "n3", Pod: "plugin-c", ReadAt: &roundAt, AgeSeconds: 4,
			Cards: []usageview.Card{{UUID: "GPU-a", UsedBytes: gib, Devices: []usageview.Device{{Namespace: "ns", Claim: "c", Device: "gpu-0", UsedBytes: gib}}}}}},
	}, {
		name: "two pods on a node (a rolling update): the one with a round",
		sources: []usageview.Source{
			{Node: "n3", Pod: "plugin-new", Metrics: []byte("")},
			{Node: "n3", Pod: "plugin-old", Metrics: at(servedBy(t, "n3", []string{"GPU-a"}, usage.Report{}))},
			{Node: "n3", Pod: "plugin-gone", Err: errors.New("pods \"plugin-gone\" not found")},
		},
		want: []usageview.Node{{Name: "n3", Pod: "plugin-old", ReadAt: &roundAt, AgeSeconds: 4, Cards: []usageview.Card{{UUID: "GPU-a"}}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := usageview.Build(tt.sources, tt.names, now)
			if diff := cmp.Diff(tt.want, got.Nodes); diff != "" {
				t.Errorf("Build (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBusiestFirst: a card's devices, shares over their memory first,
// then shares by the part of their memory they use, then the others by
// memory.
func TestBusiestFirst(t *testing.T) {
	report := usage.Report{Uses: []usage.Use{
		{Namespace: "a", Name: "whole-admin", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-1", AdminAccess: true}, UsedBytes: 20 * gib},
		{Namespace: "a", Name: "quarter", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-1", Share: true, MemoryBytes: 8 * gib}, UsedBytes: 2 * gib},
		{Namespace: "a", Name: "half", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-1", Share: true, MemoryBytes: 4 * gib}, UsedBytes: 2 * gib},
		{Namespace: "a", Name: "over", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-1", Share: true, MemoryBytes: gib}, UsedBytes: 2 * gib, Over: true},
		{Namespace: "a", Name: "idle", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-1", Share: true, MemoryBytes: gib}},
	}}
	v := usageview.Build([]usageview.Source{{Node: "n1", Metrics: served(t, report)}}, n1Names, now)
	var got []string
	for _, d := range v.Nodes[0].Cards[0].Devices {
		got = append(got, d.Claim)
	}
	if want := []string{"over", "half", "quarter", "idle", "whole-admin"}; !cmp.Equal(got, want) {
		t.Errorf("devices %v, want %v", got, want)
	}
}

func TestCardNamesOf(t *testing.T) {
	attrs := func(kv ...string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		m := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
		for i := 0; i < len(kv); i += 2 {
			m[resourceapi.QualifiedName(kv[i])] = resourceapi.DeviceAttribute{StringValue: ptr.To(kv[i+1])}
		}
		return m
	}
	slices := []resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"},
		Spec: resourceapi.ResourceSliceSpec{Driver: device.DriverName, NodeName: ptr.To("n1"), Devices: []resourceapi.Device{
			{Name: "gpu-0", Attributes: attrs(device.AttrUUID, "GPU-1")},
			{Name: "gpu-1-mig-19-0", Attributes: attrs(device.AttrUUID, "MIG-x", device.AttrParentUUID, "GPU-2")},
			{Name: "not-ours", Attributes: attrs(device.AttrUUID, "GPU-9")},
			{Name: "gpu-3"},
		}},
	}, {
		Spec: resourceapi.ResourceSliceSpec{Driver: "other.example.com", NodeName: ptr.To("n1"), Devices: []resourceapi.Device{
			{Name: "gpu-7", Attributes: attrs(device.AttrUUID, "GPU-7")},
		}},
	}}
	want := usageview.CardNames{"n1": {"GPU-1": "gpu-0", "GPU-2": "gpu-1"}}
	if diff := cmp.Diff(want, usageview.CardNamesOf(slices)); diff != "" {
		t.Errorf("CardNamesOf (-want +got):\n%s", diff)
	}
}

// checkGolden compares got with testdata/name (golden.Check).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, name, got, *update)
}

// TestTopGolden: the table, in plain text and in colour, and the data,
// of what the plugin's collector serves for a busy node, a node whose
// metrics could not be read, one whose cards are idle and one whose cards
// its slices do not name.
func TestTopGolden(t *testing.T) {
	v := usageview.Build([]usageview.Source{
		{Node: "n1", Pod: "tangram-kubelet-plugin-x7k2p", Metrics: at(served(t, aRound()))},
		{Node: "n2", Pod: "tangram-kubelet-plugin-b9qzl", Err: errors.New(`reading /metrics through the API server: the server is currently unable to handle the request (get pods tangram-kubelet-plugin-b9qzl:metrics)`)},
		{Node: "n3", Pod: "tangram-kubelet-plugin-m4d8w", Metrics: at(servedBy(t, "n3", []string{"GPU-a", "GPU-b"}, usage.Report{}))},
		{Node: "n4", Pod: "tangram-kubelet-plugin-q2r5t", Metrics: at(servedBy(t, "n4", []string{"GPU-c", "GPU-d"}, usage.Report{
			Uses: []usage.Use{{Namespace: "ns", Name: "c", Device: prepared.Device{Device: "gpu-1", GPUUUID: "GPU-d", Share: true, MemoryBytes: 8 * gib}, UsedBytes: 3 * gib}}}))},
	}, usageview.CardNames{"n1": n1Names["n1"], "n3": {"GPU-a": "gpu-0", "GPU-b": "gpu-1"}}, now)
	tests := []struct {
		golden string
		write  func(*bytes.Buffer) error
	}{
		{"top.golden", func(b *bytes.Buffer) error { return usageview.WriteTop(b, v, clusterview.Style{}) }},
		{"top-colour.golden", func(b *bytes.Buffer) error { return usageview.WriteTop(b, v, clusterview.Style{Colour: true}) }},
		{"top.json.golden", func(b *bytes.Buffer) error { return clusterview.WriteData(b, clusterview.FormatJSON, v) }},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			var out bytes.Buffer
			if err := tc.write(&out); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.Bytes())
		})
	}
}

// TestBuildNamesCardsFromTheirSeries: the card series carry the card's
// device name, so a plugin's metrics alone put each device on its card.
func TestBuildNamesCardsFromTheirSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := usage.NewMetrics(reg, "n4", []usage.Card{{UUID: "GPU-b", Device: "gpu-1"}, {UUID: "GPU-a", Device: "gpu-0"}})
	if err != nil {
		t.Fatal(err)
	}
	m.Publish(context.Background(), usage.Report{Uses: []usage.Use{
		{Namespace: "ns", Name: "part", Device: prepared.Device{Device: "gpu-1-mig-19-3", GPUUUID: "GPU-b"}, UsedBytes: gib},
		{Namespace: "ns", Name: "whole", Device: prepared.Device{Device: "gpu-0", GPUUUID: "GPU-a"}, UsedBytes: 2 * gib},
	}})
	var text bytes.Buffer
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
	}
	v := usageview.Build([]usageview.Source{{Node: "n4", Pod: "plugin-d", Metrics: text.Bytes()}}, nil, now)
	if n := v.Nodes[0]; n.Error != "" || len(n.OtherDevices) != 0 || len(n.Cards) != 2 {
		t.Fatalf("node %+v, want two named cards and no device without its card", n)
	}
	for i, want := range []struct{ name, uuid, claim string }{{"gpu-0", "GPU-a", "whole"}, {"gpu-1", "GPU-b", "part"}} {
		c := v.Nodes[0].Cards[i]
		if c.Name != want.name || c.UUID != want.uuid || len(c.Devices) != 1 || c.Devices[0].Claim != want.claim {
			t.Errorf("card %d: %+v, want %s (%s) with claim %s", i, c, want.name, want.uuid, want.claim)
		}
	}
}

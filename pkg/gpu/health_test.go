package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

func TestHealthEventValidate(t *testing.T) {
	tests := []struct {
		ev      HealthEvent
		wantErr bool
	}{
		{HealthEvent{Index: 0, Kind: HealthEventXID, XID: 79}, false},
		{HealthEvent{Index: 1, Kind: HealthEventGPULost}, false},
		{HealthEvent{Index: 1, Kind: HealthEventRecovered}, false},
		{HealthEvent{Index: 0, Kind: HealthEventXID}, true},
		{HealthEvent{Index: -1, Kind: HealthEventGPULost}, true},
		{HealthEvent{Index: 0, Kind: "melted"}, true},
	}
	for _, tt := range tests {
		if err := tt.ev.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("Validate(%+v) = %v, want error %v", tt.ev, err, tt.wantErr)
		}
	}
}

func TestFileHealthWatcher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	// Lines from before the watch started are not replayed.
	if err := AppendHealthEvent(path, HealthEvent{Index: 0, Kind: HealthEventXID, XID: 13}); err != nil {
		t.Fatal(err)
	}
	var fw HealthWatcher = FileHealthWatcher{Path: path, PollInterval: 5 * time.Millisecond}
	events := make(chan HealthEvent, 10)
	done := make(chan error, 1)
	go func() { done <- fw.WatchHealth(ctx, events) }()
	time.Sleep(50 * time.Millisecond) // let it record where the file ends

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A malformed line, an invalid event, then half a line: none counts yet.
	if _, err := f.WriteString("not json\n{\"index\":0,\"event\":\"melted\"}\n{\"index\":1,\"event\":\"xid\","); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		t.Fatalf("got %+v from a malformed, an invalid and a partial line", ev)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := f.WriteString("\"xid\":79}\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := AppendHealthEvent(path, HealthEvent{Index: 1, Kind: HealthEventRecovered, Message: "reset"}); err != nil {
		t.Fatal(err)
	}
	want := []HealthEvent{{Index: 1, Kind: HealthEventXID, XID: 79}, {Index: 1, Kind: HealthEventRecovered, Message: "reset"}}
	for _, w := range want {
		select {
		case got := <-events:
			if got != w {
				t.Errorf("event = %+v, want %+v", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event, want %+v", w)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealth returned %v after cancel", err)
	}
}

func TestAppendHealthEventRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := AppendHealthEvent(path, HealthEvent{Index: 0, Kind: HealthEventXID}); err == nil {
		t.Error("an XID event without an XID was written")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the file was created for an invalid event: %v", err)
	}
}

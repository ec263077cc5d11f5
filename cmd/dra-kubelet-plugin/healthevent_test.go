package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHealthEventCommand(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args     []string
		wantLine string
		wantErr  string
	}{
		{[]string{"--gpu", "1", "--xid", "79"}, `{"index":1,"event":"xid","xid":79}`, ""},
		{[]string{"--gpu", "0", "--lost"}, `{"index":0,"event":"gpu-lost"}`, ""},
		{[]string{"--gpu", "1", "--recovered", "--message", "reset"}, `{"index":1,"event":"recovered","message":"reset"}`, ""},
		{[]string{"--gpu", "1"}, "", "exactly one of"},
		{[]string{"--gpu", "1", "--xid", "79", "--lost"}, "", "exactly one of"},
		{[]string{"--xid", "79"}, "", "--gpu"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			path := filepath.Join(dir, "events.jsonl")
			_ = os.Remove(path)
			cmd := newHealthEventCommand()
			cmd.SetArgs(append(tt.args, "--state-dir", dir, "--fake-health-events-file", path))
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			err := cmd.Execute()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
					t.Errorf("a refused event was written")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(got)) != tt.wantLine {
				t.Errorf("file = %q, want %q", got, tt.wantLine)
			}
		})
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSourceDateEpoch(t *testing.T) {
	tests := []struct {
		value   string
		want    time.Time
		wantErr bool
	}{
		{value: "", want: time.Unix(0, 0)},
		{value: "1700000000", want: time.Unix(1700000000, 0)},
		{value: "yesterday", wantErr: true},
		{value: "-5", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			got, err := sourceDateEpoch(tc.value)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && !got.Equal(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.tar")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no layer", args: []string{"--ref", "a/b:c", "--out", out, "--entrypoint", "/x"}, wantErr: "at least one --layer"},
		{name: "label without value", args: []string{"--ref", "a/b:c", "--out", out, "--entrypoint", "/x", "--layer", dir, "--label", "k"}, wantErr: "KEY=VALUE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
			}
			if _, statErr := os.Stat(out); statErr == nil {
				t.Errorf("%s was written despite the error", out)
			}
		})
	}
}

package main

import (
	"bytes"
	"testing"
)

func TestReport(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		devices []string
		want    string
	}{
		{
			name:    "only GPU variables, sorted",
			environ: []string{"PATH=/bin", "TANGRAM_CLAIM=abc", "NVIDIA_VISIBLE_DEVICES=GPU-1", "CUDA_MPS_PIPE_DIRECTORY=/mps", "HOME=/"},
			devices: []string{"/dev/nvidia0", "/dev/nvidiactl"},
			want: "gpu-info: begin\nCUDA_MPS_PIPE_DIRECTORY=/mps\nNVIDIA_VISIBLE_DEVICES=GPU-1\nTANGRAM_CLAIM=abc\n" +
				"DEVICE_NODES=/dev/nvidia0,/dev/nvidiactl\ngpu-info: end\n",
		},
		{
			name:    "nothing injected",
			environ: []string{"PATH=/bin"},
			want:    "gpu-info: begin\nDEVICE_NODES=\ngpu-info: end\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			report(&buf, tc.environ, tc.devices)
			if got := buf.String(); got != tc.want {
				t.Errorf("report() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

package device

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestExactInt64(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "1Gi", want: 1 << 30},
		{in: "0.5", want: 1},
		{in: "-1Gi", want: -(1 << 30)},
		{in: "9223372036854775807", want: 1<<63 - 1},
		{in: "-19807040628566084399459729408", wantErr: true},
		{in: "-0.5", wantErr: true},
		{in: "9223372036854775808", wantErr: true},
		// (2^64+1) Gi in bytes, which Quantity.Value() reads as 1 Gi.
		{in: "19807040628566084399459729408", wantErr: true},
		{in: "1e30", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ExactInt64(resource.MustParse(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ExactInt64(%s) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

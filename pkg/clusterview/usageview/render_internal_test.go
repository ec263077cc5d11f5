package usageview

import (
	"testing"
	"time"
)

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                    "0s",
		4*time.Second + 400*time.Millisecond: "4s",
		2*time.Minute + 5*time.Second:        "2m5s",
		3*time.Hour + 20*time.Minute + 40*time.Second: "3h21m",
		5 * time.Hour:   "5h0m",
		100 * time.Hour: "4d",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}

package consumable

import "testing"

func TestCapacityConsume(t *testing.T) {
	mem := Capacity{Value: 16384, Default: 16384, Min: 256, Max: 16384, Step: 256, HasPolicy: true}
	tests := []struct {
		name   string
		c      Capacity
		amount *int64
		want   int64
		wantOK bool
	}{
		{"nothing named takes the default", mem, nil, 16384, true},
		{"below min rounds to min", mem, ptr64(10), 256, true},
		{"rounds up to the step", mem, ptr64(7474), 7680, true},
		{"aligned stays", mem, ptr64(7680), 7680, true},
		{"above max is refused", mem, ptr64(20000), 0, false},
		{"no policy: exactly what is asked", Capacity{Value: 100}, ptr64(37), 37, true},
		{"no policy, nothing named: everything", Capacity{Value: 100}, nil, 100, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.c.Consume(tc.amount)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("consume = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func ptr64(v int64) *int64 { return &v }

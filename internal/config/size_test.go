package config

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"256MiB", 256 << 20, true},
		{"1GiB", 1 << 30, true},
		{"64M", 64 << 20, true},
		{"64mib", 64 << 20, true},
		{"1.5GiB", 3 << 29, true},
		{"4096", 4096, true},
		{"10KB", 10000, true},
		{"512B", 512, true},
		{"", 0, false},
		{"abc", 0, false},
		{"-1MiB", 0, false},
		{"0", 0, false},
		{"MiB", 0, false},
		{"1e30GiB", 0, false},
		{"NaN", 0, false},
		{"12XB", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseDuration(t *testing.T) {
	for _, bad := range []string{"", "10", "-1s", "0s", "forever"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
	if d, err := ParseDuration("1m30s"); err != nil || d.Seconds() != 90 {
		t.Errorf("ParseDuration(1m30s) = %v, %v", d, err)
	}
}

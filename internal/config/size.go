package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseSize parses a byte size such as "256MiB", "1GiB", "64M", "1.5G" or "4096".
// Binary units (KiB, Ki, K) are powers of 1024; KB, MB, GB are powers of 1000.
// The result is positive.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("size is empty (want e.g. 256MiB)")
	}
	mult := int64(1)
	num := in
	for _, u := range sizeUnits {
		if strings.HasSuffix(strings.ToUpper(in), strings.ToUpper(u.suffix)) && len(in) > len(u.suffix) {
			cand := strings.TrimSpace(in[:len(in)-len(u.suffix)])
			if _, err := strconv.ParseFloat(cand, 64); err == nil {
				mult, num = u.mult, cand
				break
			}
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size %q (want e.g. 256MiB, 1GiB, 4096)", s)
	}
	if f <= 0 {
		return 0, fmt.Errorf("invalid size %q: must be positive", s)
	}
	v := f * float64(mult)
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	if v < 1 {
		return 0, fmt.Errorf("invalid size %q: less than one byte", s)
	}
	return int64(v), nil
}

// ParseDuration parses a positive Go duration ("30s", "1m30s", "500ms").
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 30s, 2m, 500ms)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("invalid duration %q: must be positive", s)
	}
	return d, nil
}

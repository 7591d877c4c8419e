package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseTime reads a query bound: an RFC 3339 time ("2026-11-23T10:00:00Z"), a
// date ("2026-11-23", midnight UTC), or a duration before now ("90m", "24h",
// "7d"), as `moat audit --since` and GET /v1/audit?since= take them.
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days >= 0 && days <= 100*365 {
			return now.Add(-time.Duration(days) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("invalid time %q (want RFC 3339 like 2026-11-23T10:00:00Z, a date like 2026-11-23, or a duration ago like 90m, 24h, 7d)", s)
}

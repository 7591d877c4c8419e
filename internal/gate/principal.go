package gate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
)

// Principal is who is asking: one API key (or the generated token) and what its
// holder may do. The Gate hands out copies; changing one changes nothing.
type Principal struct {
	// Name identifies the principal in audit records, sessions and errors.
	Name string
	// Profile is used when a request names none.
	Profile string
	// Profiles are the other profiles the principal's requests may pick.
	Profiles []string
	// Quotas bound the principal's use of the server.
	Quotas Quotas
	// MaxLimits cap the limits a request may ask for. Every field is set.
	MaxLimits box.Limits
	// Admin: the principal may read every principal's audit records (config
	// api_keys[].admin; the generated token's principal, the only one, is admin).
	Admin bool
}

// Quotas bound one principal.
type Quotas struct {
	Concurrent int     // executions at once
	Sessions   int     // live sessions, enforced by the session store
	Rate       float64 // executions per second, refilling a bucket...
	Burst      int     // ...that holds this many
}

// AllowsProfile reports whether the principal may run code under the named
// profile: its own, or one of Profiles. An empty name means its own.
func (p *Principal) AllowsProfile(name string) bool {
	return name == "" || name == p.Profile || slices.Contains(p.Profiles, name)
}

// PickProfile returns the profile a request runs under: requested if the
// principal may use it, p.Profile when requested is empty. Any other profile is
// an error wrapping ErrForbidden that lists the ones allowed.
func (p *Principal) PickProfile(requested string) (string, error) {
	if requested == "" {
		return p.Profile, nil
	}
	if !p.AllowsProfile(requested) {
		allowed := append([]string{p.Profile}, p.Profiles...)
		return "", fmt.Errorf("%w: principal %q may not use profile %q (allowed: %s)", ErrForbidden, p.Name, requested, strings.Join(allowed, ", "))
	}
	return requested, nil
}

// CheckLimits refuses limits a request asks for that exceed p.MaxLimits or are
// negative, with a *LimitError naming the first such field. Zero fields are
// "not asked" and pass. The caller passes the request's own limits, not the
// profile's or the config's: those are the administrator's.
func (p *Principal) CheckLimits(req box.Limits) error {
	fields := []struct {
		name       string
		asked, max int64
		format     func(int64) string
	}{
		{"timeout", int64(req.Timeout), int64(p.MaxLimits.Timeout), func(v int64) string { return time.Duration(v).String() }},
		{"memory", req.Memory, p.MaxLimits.Memory, formatSize},
		{"disk", req.Disk, p.MaxLimits.Disk, formatSize},
		{"tmp", req.Tmp, p.MaxLimits.Tmp, formatSize},
		{"output_limit", req.Output, p.MaxLimits.Output, formatSize},
		{"pids", req.Pids, p.MaxLimits.Pids, formatInt},
		{"open_files", req.OpenFiles, p.MaxLimits.OpenFiles, formatInt},
	}
	for _, f := range fields {
		if f.asked < 0 || f.asked > f.max {
			return &LimitError{Principal: p.Name, Field: f.name, Asked: f.format(f.asked), Max: f.format(f.max)}
		}
	}
	// Not (asked <= max), so that NaN is refused too.
	if req.CPUs != 0 && !(req.CPUs > 0 && req.CPUs <= p.MaxLimits.CPUs) {
		return &LimitError{Principal: p.Name, Field: "cpus", Asked: formatFloat(req.CPUs), Max: formatFloat(p.MaxLimits.CPUs)}
	}
	return nil
}

func formatInt(v int64) string { return strconv.FormatInt(v, 10) }

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// formatSize spells a byte count in the largest binary unit that divides it.
func formatSize(v int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v != 0 && v%u.size == 0 {
			return strconv.FormatInt(v/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(v, 10) + "B"
}

// principal builds a Principal from the config's key settings. The caps start
// from box.DefaultLimits, so every field is set.
func principal(name, profile string, profiles []string, q config.ResolvedQuotas, max config.ResolvedLimits) (Principal, error) {
	if q.Concurrent < 1 || q.Sessions < 1 || !(q.Rate > 0) || q.Burst < 1 {
		return Principal{}, fmt.Errorf("principal %q: quotas %+v: each must be positive", name, q)
	}
	if profile == "" {
		return Principal{}, fmt.Errorf("principal %q: no profile", name)
	}
	return Principal{
		Name:     name,
		Profile:  profile,
		Profiles: slices.Clone(profiles),
		Quotas:   Quotas{Concurrent: q.Concurrent, Sessions: q.Sessions, Rate: q.Rate, Burst: q.Burst},
		MaxLimits: box.DefaultLimits.Merge(box.Limits{
			Timeout: max.Timeout, Memory: max.Memory, CPUs: max.CPUs, Pids: max.Pids,
			Disk: max.Disk, Tmp: max.Tmp, Output: max.Output,
		}),
	}, nil
}

// clone returns a copy of p that shares no memory with it.
func (p *Principal) clone() *Principal {
	c := *p
	c.Profiles = slices.Clone(p.Profiles)
	return &c
}

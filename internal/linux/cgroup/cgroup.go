package cgroup

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Version is the cgroup version a box uses.
type Version int

const (
	// None means cgroups are unavailable; see [Info.Reason].
	None Version = 0
	// V1 uses one directory per legacy hierarchy (memory, pids, cpu,
	// cpuacct, freezer).
	V1 Version = 1
	// V2 uses one directory in the unified hierarchy.
	V2 Version = 2
)

// String returns "none", "v1" or "v2".
func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	case None:
		return "none"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// Info describes what [Detect] found.
type Info struct {
	// Version is the version New will use, or None.
	Version Version
	// Controllers lists, sorted, the controllers boxes can use: for v2
	// the subset of cpu, memory and pids offered by our cgroup; for v1
	// the hierarchies among cpu, cpuacct, freezer, memory and pids.
	Controllers []string
	// Reason says why cgroups are unavailable, or, when they are
	// available, what is missing (for example no freezer hierarchy or
	// a cgroup v2 mount without controllers). Empty when nothing is.
	Reason string
}

// Limits are the limits New applies to a box. A zero field means "no
// limit" for that resource: the box is still accounted (Stats works) but
// the controller is not listed by [Box.Controllers].
type Limits struct {
	// MemoryBytes is the hard memory limit. Swap is limited to the same
	// amount (the box gets no extra swap) where the kernel exposes it:
	// v1 memory.memsw.limit_in_bytes, v2 memory.swap.max = 0.
	MemoryBytes int64
	// Pids is the maximum number of tasks (processes and threads).
	Pids int64
	// CPUs is the CPU bandwidth in cores, e.g. 1.0 = one core, 0.5 = 50 ms
	// of CPU time per 100 ms period. The minimum non-zero value is 0.01.
	CPUs float64
}

// SparePrefix begins the name of a kept box's directories (Box.Recycle):
// "spare-box-<pid>-...". Sweep removes them as it removes boxes, by the owner
// pid in the name.
const SparePrefix = "spare-"

// cpuPeriod is the CFS period in microseconds (100 ms).
const cpuPeriod = 100000

// minQuota is the smallest CFS quota the kernel accepts, in microseconds.
const minQuota = 1000

// validate rejects limits the kernel would reject or misread.
func (l Limits) validate() error {
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		return fmt.Errorf("%w: %+v", ErrInvalidLimits, l)
	}
	if l.CPUs > 0 && l.quota() < minQuota {
		return fmt.Errorf("%w: cpus %g is below the minimum 0.01", ErrInvalidLimits, l.CPUs)
	}
	if l.CPUs > 1<<20 {
		return fmt.Errorf("%w: cpus %g is too large", ErrInvalidLimits, l.CPUs)
	}
	return nil
}

// quota returns the CFS quota in microseconds per cpuPeriod.
func (l Limits) quota() int64 {
	return int64(math.Round(l.CPUs * cpuPeriod))
}

// Stats are a box's resource counters. A field the kernel does not
// expose is -1 (for example PeakMemoryBytes on cgroup v2 before Linux
// 5.19, which has no memory.peak: the running maximum of memory.current
// cannot be reconstructed after the fact, so it is reported as unknown
// rather than as a misleading number).
type Stats struct {
	// CPUUsage is the total user+system CPU time of every task that ran
	// in the box (v1 cpuacct.usage, v2 cpu.stat usage_usec).
	CPUUsage time.Duration
	// PeakMemoryBytes is the highest memory usage seen (v1
	// memory.max_usage_in_bytes, v2 memory.peak).
	PeakMemoryBytes int64
	// OOMKills counts tasks the OOM killer killed in the box (v1
	// memory.oom_control oom_kill, v2 memory.events oom_kill).
	OOMKills int64
}

// validName reports whether name is 1 to 64 characters from
// [A-Za-z0-9_-]. That rules out "/", ".", ".." and collisions with
// control files such as "cgroup.procs".
func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}

// checkName returns ErrInvalidName (wrapped) unless validName(name).
func checkName(name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q", ErrInvalidName, strings.ToValidUTF8(name, "?"))
	}
	return nil
}

package cgroup

import "errors"

// ErrUnavailable reports that the host has no usable cgroup hierarchy:
// neither a cgroup v2 mount with the memory and pids controllers nor
// cgroup v1 memory and pids hierarchies. The wrapping error carries the
// reason from [Detect].
var ErrUnavailable = errors.New("cgroups unavailable")

// ErrInvalidName reports a box name that New refuses: it must be 1 to 64
// characters from [A-Za-z0-9_-], so it is always a single, harmless path
// component.
var ErrInvalidName = errors.New("invalid cgroup name")

// ErrInvalidLimits reports negative, NaN or infinite limits, or a CPU
// limit below the kernel minimum quota of 1 ms per 100 ms period.
var ErrInvalidLimits = errors.New("invalid cgroup limits")

// ErrNotEmpty reports that processes were still alive in a box when
// Kill or Destroy gave up waiting (for example a task stuck in
// uninterruptible sleep). The box is left in place; call Destroy again.
var ErrNotEmpty = errors.New("cgroup still has processes")

// ErrDestroyed reports a call to AddProc on a destroyed box.
var ErrDestroyed = errors.New("cgroup destroyed")

//go:build linux && (amd64 || arm64)

package seccomp

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install loads the box's syscall filter into the calling process, synchronized
// to all threads (SECCOMP_FILTER_FLAG_TSYNC). Precondition: no_new_privs is
// already set.
//
// PR_SET_NO_NEW_PRIVS is per thread and the Go scheduler may have moved the
// caller's goroutine since it was set, so Install sets it again on the OS
// thread that calls seccomp(2); with the precondition met that changes
// nothing. TSYNC then copies both the filter and no_new_privs to every other
// thread. The filter cannot be removed: call Install only in the process that
// becomes (or execs) the box, and only once, since every call stacks another
// copy of the filter.
//
// If Install fails, for example because another thread runs under a seccomp
// filter that is not an ancestor of the caller's, treat the error as fatal and
// do not run untrusted code in the process (were the policy ever loaded as
// several programs, the process could hold some of them).
func Install() error {
	c, err := compile()
	if err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return installFilters(c.filters)
}

func installFilters(filters [][]unix.SockFilter) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: set no_new_privs: %w", os.NewSyscallError("prctl", err))
	}
	for i, filter := range filters {
		if err := load(filter); err != nil {
			return fmt.Errorf("install seccomp filter %d of %d: %w", i+1, len(filters), err)
		}
	}
	return nil
}

// load installs one BPF program with TSYNC. go-seccomp-bpf's LoadFilter is
// not used: it drops seccomp(2)'s return value, and with TSYNC a positive
// return value is the ID of a thread that could not be synchronized, with no
// errno.
func load(filter []unix.SockFilter) error {
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	switch {
	case errno == unix.ENOSYS || errno == unix.EINVAL:
		return fmt.Errorf("%w: %w", ErrNotSupported, os.NewSyscallError("seccomp", errno))
	case errno != 0:
		return os.NewSyscallError("seccomp", errno)
	case tid != 0:
		return fmt.Errorf("thread %d could not be synchronized", tid)
	}
	return nil
}

// Supported reports whether the kernel supports seccomp filter mode (nil if
// yes). It probes seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
// NULL): a kernel that would accept the call fails it with EFAULT when it reads
// the NULL program, before installing anything. A non-nil error wraps
// ErrNotSupported. Supported also checks that the box's policy assembles for
// this architecture.
//
// Kernel minimum: 3.17 for TSYNC (seccomp filter mode itself is 3.5); the
// ENOSYS answer for clone3 matters from 5.3 on.
func Supported() error {
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, 0)
	switch errno {
	case unix.EFAULT:
	case 0:
		// The kernel cannot have loaded a NULL program.
		return fmt.Errorf("probe seccomp filter mode: %w: unexpected success", ErrNotSupported)
	default:
		return fmt.Errorf("probe seccomp filter mode: %w: %w", ErrNotSupported, os.NewSyscallError("seccomp", errno))
	}
	if _, err := compile(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return nil
}

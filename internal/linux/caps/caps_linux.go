// Package caps drops Linux capabilities. It wraps prctl(2); see capabilities(7).
package caps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// LastCap returns the highest capability number the kernel knows. Where
// /proc/sys/kernel/cap_last_cap does not exist (gVisor's kernel has none) it asks
// prctl(PR_CAPBSET_READ), which fails with EINVAL past the last capability.
func LastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if errors.Is(err, fs.ErrNotExist) {
		return probeLastCap()
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap: %w", err)
	}
	return n, nil
}

// probeLastCap is LastCap without /proc: the last capability PR_CAPBSET_READ knows.
func probeLastCap() (int, error) {
	for c := 0; c < 64; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			if c == 0 || !errors.Is(err, unix.EINVAL) {
				return 0, os.NewSyscallError(fmt.Sprintf("prctl(PR_CAPBSET_READ, %d)", c), err)
			}
			return c - 1, nil
		}
	}
	return 63, nil
}

// DropBounding removes every capability but keep from the bounding set and clears the
// ambient set of the calling thread, so no process it forks and no later execve can
// gain another capability (file capabilities or setuid binaries included). The caller
// keeps its current permitted set. Capability sets are per thread; a child inherits the
// sets of the thread that forked it, so the caller must fork from this same thread.
// Preconditions: must be called with the OS thread locked; CAP_SETPCAP in the caller's
// user namespace.
func DropBounding(keep ...int) error {
	last, err := LastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return os.NewSyscallError(fmt.Sprintf("prctl(PR_CAPBSET_DROP, %d)", c), err)
		}
	}
	// EINVAL: a kernel without ambient capabilities (before Linux 4.3; gVisor's of
	// 2022), where there are none to clear.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return os.NewSyscallError("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", err)
	}
	return nil
}

// NoNewPrivs sets no_new_privs on every thread: execve can never grant privileges again.
func NoNewPrivs() error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", e)
	}
	return nil
}

// ClearAll empties the effective, permitted and inheritable sets of the calling thread
// (capset(2)), for a process that holds capabilities without being uid 0: the creator of
// a user namespace. Call DropBounding first; it needs CAP_SETPCAP.
// Preconditions: must be called with the OS thread locked.
func ClearAll() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	return nil
}

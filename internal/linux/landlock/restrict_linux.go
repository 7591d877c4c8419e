package landlock

import (
	"errors"
	"fmt"
	"os"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// erratumSignalScope is the Landlock erratum bit for the signal scoping
// fix. go-landlock treats a V6+ kernel without it as V5.
const erratumSignalScope = 0x2

// ABI returns the Landlock ABI version the running kernel supports, 0 if
// none. Like go-landlock, it reports a kernel that claims V6 or later
// but lacks the fix for the signal scoping erratum as V5, because
// Restrict does not enforce scoping there.
func ABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	if v >= 6 {
		errata, err := ll.LandlockGetErrata()
		if err != nil || errata&erratumSignalScope == 0 {
			v = 5
		}
	}
	return v
}

// Restrict confines the calling process (all threads) so that:
//   - everything under "/" may be read and executed (read-only),
//   - only the directories in rw (e.g. "/tmp", "/workspace", "/dev/shm") may be written (create, remove, write, truncate...),
//   - the device files in devRW (e.g. "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom") may be opened for writing,
//   - where ABI >= 4: all TCP bind is denied, and connect too but to the ports in connect,
//   - where ABI >= 6: abstract unix sockets and signals are scoped to the domain (no signalling or connecting outside it),
//
// in best-effort mode (features the kernel lacks are skipped). It returns the ABI it enforced
// (0 when the kernel has no Landlock: then err is nil and nothing was restricted).
//
// Paths must be absolute; rw entries must be existing directories and
// devRW entries existing character devices, otherwise Restrict returns
// an error wrapping [ErrInvalidPath] or [io/fs.ErrNotExist] before
// restricting anything. Symbolic links are followed.
//
// Restrict is [Ruleset] with the caller's own "/" as root, then
// no_new_privs and landlock_restrict_self(2) on every thread (see
// restrictAllThreads). The restriction is irreversible and inherited by
// every child. no_new_privs is set whether or not the caller had set it,
// so set-user-ID binaries no longer gain privileges. The caller must
// close file descriptors the sandbox must not use before calling
// Restrict: Landlock checks access when a file is opened, so descriptors
// opened earlier keep their rights.
//
// The returned ABI is at most 7 (see the package documentation).
func Restrict(rw, devRW []string, connect ...uint16) (abi int, err error) {
	if ABI() == 0 {
		// No ruleset to build, and openat2(2), which Ruleset
		// needs, may be missing too (gVisor has neither).
		return 0, checkPaths(rw, devRW)
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	defer unix.Close(root)
	ruleset, abi, err := Ruleset(root, rw, devRW, connect...)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ruleset)
	if err := restrictAllThreads(ruleset); err != nil {
		return 0, fmt.Errorf("landlock restrict (abi %d): %w", abi, err)
	}
	return abi, nil
}

// restrictAllThreads sets no_new_privs and enforces ruleset on every
// thread of the process, as go-landlock does below ABI 8 (which has no
// LANDLOCK_RESTRICT_SELF_TSYNC). Restricting one thread would not do:
// goroutines move between threads, and a thread left unconfined would
// let any of them escape.
//
// The go-landlock AllThreads wrappers run each system call on all
// threads at once. Built with CGO_ENABLED=0, as moat is, they are
// syscall.AllThreadsSyscall: the runtime stops the world, runs the call
// on every thread it has and fails the process if the threads' results
// differ, so no thread is left behind; threads created later are clones
// of a confined one. With cgo, libpsx does the same.
func restrictAllThreads(ruleset int) error {
	// landlock_restrict_self(2) requires no_new_privs (or
	// CAP_SYS_ADMIN); setting it on every thread keeps them alike.
	if err := ll.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", err)
	}
	if err := ll.AllThreadsLandlockRestrictSelf(ruleset, 0); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("too many stacked Landlock rulesets (the kernel allows 16): %w", os.NewSyscallError("landlock_restrict_self", err))
		}
		return os.NewSyscallError("landlock_restrict_self", err)
	}
	return nil
}

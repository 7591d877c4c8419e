package native

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Who owns a box's user namespace.
//
// The kernel counts some per-user resources along the chain of user namespaces:
// inotify instances and watches (fs.inotify.max_user_*), queued signals
// (RLIMIT_SIGPENDING), POSIX message queue bytes, processes (RLIMIT_NPROC). A charge
// made in a box is also made, in the namespace above, to the user that owns the box's
// namespace: the effective uid of the process that created it. Created by moat running
// as root, every box would spend host root's quotas: a box holding 128 inotify
// instances left host root's daemons without any, a box queuing real-time signals
// left host root unable to create POSIX timers.
//
// So the box's namespace is created by a thread whose effective uid is, for that
// moment only, an owner uid of its own: unused on the host (like HostRootUID), and
// different for each box, so that one box's charges fall neither on host root nor
// on another box. The owner is made of the creating moat's pid and a counter of its
// boxes (nextOwner): two live moat processes never share one (each `moat run` is a
// process of its own, and its first box once had the same owner as every other's),
// and within one process 128 boxes in a row have different owners. The boxes of a
// zygote share their zygote's. The thread keeps its capabilities
// meanwhile (SECBIT_NO_SETUID_FIXUP), as writing the namespace's id maps needs
// CAP_SETUID here, and gets root back before it runs anything else. init, which
// inherits the securebit, clears it first thing (clearSecurebits).
const (
	// OwnerUIDBase is the first host uid that owns a box's user namespace; boxes use
	// 2^(ownerPidBits+ownerSeqBits) of them from here, up to 1,636,870,911 (below
	// 2^31). Like HostRootUID, no host file or process has them.
	OwnerUIDBase = 1_100_000_000
	// ownerPidBits hold the creating process's pid (the kernel's pid_max is at most
	// 2^22), ownerSeqBits its count of boxes.
	ownerPidBits = 22
	ownerSeqBits = 7
)

// secbitNoSetuidFixup keeps a thread's capabilities when its uids change (capabilities(7)).
const secbitNoSetuidFixup = 1 << 2

var ownerSeq atomic.Uint32

// nextOwner returns the owner uid for the next box of this process.
func nextOwner() int { return ownerFor(os.Getpid(), ownerSeq.Add(1)) }

// ownerFor is the owner uid of the box numbered seq of the process pid.
func ownerFor(pid int, seq uint32) int {
	pidPart := (pid & (1<<ownerPidBits - 1)) << ownerSeqBits
	seqPart := int(seq & (1<<ownerSeqBits - 1))
	return OwnerUIDBase + pidPart + seqPart
}

// startAs runs cmd.Start, whose SysProcAttr makes a new user namespace, on the
// calling locked thread with effective uid owner while it creates the namespace, so
// that owner, not host root, owns the namespace (startThread). The calling process
// must be root (with CAP_SETPCAP and CAP_SETUID). restored says whether the thread is
// root again with its securebits and dumpability as before; a thread that is not must
// never be given back to the Go runtime.
func startAs(cmd *exec.Cmd, owner int) (err error, restored bool) {
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("prctl(PR_GET_SECUREBITS): %w", err), true
	}
	dumpable, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", err), true
	}
	// Raw syscalls: they change this thread only (the syscall package's setters
	// change every thread of the process).
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(bits|secbitNoSetuidFixup), 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_SECUREBITS): %w", e), true
	}
	keep := ^uintptr(0) // -1: unchanged
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(owner), keep); e != 0 {
		err = fmt.Errorf("setresuid to the namespace owner %d: %w", owner, e)
	} else {
		err = cmd.Start()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
			return err, false
		}
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0, 0); e != 0 {
		return err, false
	}
	// Changing the effective uid made the whole process not dumpable.
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, uintptr(dumpable), 0, 0, 0, 0); e != 0 {
		return err, false
	}
	return err, true
}

// clearSecurebits is a native init's first step once it has its spec: it drops the securebit the namespace's
// creator held (startAs), so that changing uid drops capabilities as it normally
// does. Other bits are the runtime's (a container's may be locked) and stay.
func clearSecurebits() error {
	bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	if err != nil || bits&secbitNoSetuidFixup == 0 {
		return err
	}
	return unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits&^secbitNoSetuidFixup), 0, 0, 0)
}

// quotaShares: a box that shares an owner with others (the boxes of one zygote) or
// with the user who runs moat (a rootless box) may hold 1/quotaShares of the per-user
// quotas the kernel counts along the user namespaces: userLimitShares and
// sigPendingShare.
const quotaShares = 8

// userQuotas are those quotas that are sysctls: the host's, and the name of the
// same limit in a user namespace's /proc/sys/user.
var userQuotas = [][2]string{
	{"/proc/sys/fs/inotify/max_user_instances", "max_inotify_instances"},
	{"/proc/sys/fs/inotify/max_user_watches", "max_inotify_watches"},
}

// userLimitShares is a box's share of userQuotas: the values to write to the box's
// own user namespace's /proc/sys/user, so that the box cannot take all of a quota it
// shares. Quotas the host does not show are left out.
func userLimitShares() map[string]int64 {
	limits := map[string]int64{}
	for _, q := range userQuotas {
		b, err := os.ReadFile(q[0])
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 {
			continue
		}
		limits[q[1]] = max(v/quotaShares, 1)
	}
	return limits
}

// sigPendingShare is a box's share of the queued signals (RLIMIT_SIGPENDING, counted
// along the user namespaces too): of this process's limit, which the boxes it makes
// draw from. 0 when that is unlimited or unknown.
func sigPendingShare() int64 {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_SIGPENDING, &r) != nil || r.Cur == unix.RLIM_INFINITY || r.Cur == 0 {
		return 0
	}
	return int64(max(r.Cur/quotaShares, 1))
}

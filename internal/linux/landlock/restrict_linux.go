package landlock

import (
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// pinnedABI is the highest Landlock ABI whose rights Restrict handles.
// Raising it changes what sandboxed programs may do (V9 restricts
// pathname UNIX socket connects, V10 restricts UDP), so it is a
// deliberate change together with config, the docs and the tests.
const pinnedABI = 7

// config is the go-landlock preset matching pinnedABI.
var config = landlock.V7

// erratumSignalScope is the Landlock erratum bit for the signal scoping
// fix. go-landlock treats a V6+ kernel without it as V5.
const erratumSignalScope = 0x2

// rwDirAccess is what Restrict grants beneath each rw directory: the
// read and execute rights of "/" plus every write and create right
// except creating device nodes. With CAP_MKNOD a sandboxed process
// could otherwise mknod the host's disk (or /dev/mem) inside /tmp and
// open it for writing, since a Landlock grant on a directory covers
// every file beneath it regardless of its type. The ioctl-on-devices
// right (V5) is not granted either.
const rwDirAccess landlock.AccessFSSet = ll.AccessFSExecute |
	ll.AccessFSReadFile |
	ll.AccessFSReadDir |
	ll.AccessFSWriteFile |
	ll.AccessFSTruncate |
	ll.AccessFSRemoveDir |
	ll.AccessFSRemoveFile |
	ll.AccessFSMakeDir |
	ll.AccessFSMakeReg |
	ll.AccessFSMakeSock |
	ll.AccessFSMakeFifo |
	ll.AccessFSMakeSym

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
// Precondition: no_new_privs is set (or the caller has CAP_SYS_ADMIN).
//
// Paths must be absolute; rw entries must be existing directories and
// devRW entries existing character devices, otherwise Restrict returns
// an error wrapping [ErrInvalidPath] or [io/fs.ErrNotExist] before
// restricting anything. Symbolic links are followed.
//
// The restriction is irreversible and inherited by every child. On
// success go-landlock has also set no_new_privs on all threads, whether
// or not the caller did, so set-user-ID binaries no longer gain
// privileges. The caller must close file descriptors the sandbox must
// not use before calling Restrict: Landlock checks access when a file
// is opened, so descriptors opened earlier keep their rights.
//
// The returned ABI is at most 7 (see the package documentation).
func Restrict(rw, devRW []string, connect ...uint16) (abi int, err error) {
	if err := checkPaths(rw, devRW); err != nil {
		return 0, err
	}
	abi = min(ABI(), pinnedABI)
	if abi == 0 {
		return 0, nil
	}

	rwAccess := rwDirAccess
	if abi >= 2 {
		// Refer lets files move between rw directories (rename(2)
		// across directories, link(2)). Requesting it on a V1 kernel
		// would make go-landlock drop the whole ruleset, so it is only
		// asked for where the kernel knows it.
		rwAccess |= ll.AccessFSRefer
	}
	// Handling the TCP rights (V4) without any BindTCP/ConnectTCP rule
	// denies every TCP bind and connect. The preset's scopes (V6) need
	// no rules.
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.PathAccess(rwAccess, rw...),
		landlock.RWFiles(devRW...),
	}
	for _, port := range connect {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	err = config.BestEffort().Restrict(rules...)
	if err != nil {
		return 0, fmt.Errorf("landlock restrict (abi %d): %w", abi, err)
	}
	return abi, nil
}

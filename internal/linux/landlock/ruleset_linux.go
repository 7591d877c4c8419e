package landlock

import (
	"errors"
	"fmt"
	"os"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// resolveInRoot is how Ruleset resolves rule paths beneath its root: as
// if root were "/", so that absolute symbolic links and ".." stay inside
// it, and refusing /proc magic links (such as /proc/PID/root), which
// jump to a file without walking a path and could leave root. The kernel
// already refuses them with RESOLVE_IN_ROOT but documents that this may
// change.
const resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openRetries bounds how often openPath retries openat2(2) when it fails
// with EAGAIN: the kernel returns it when a rename or mount elsewhere
// raced a ".." step, because it can then not vouch that the walk stayed
// beneath root.
const openRetries = 32

// Ruleset builds the ruleset Restrict enforces and returns it as a
// Landlock ruleset file descriptor, without restricting anyone. A
// privileged process (the moat server) builds it for a sandbox whose
// root it reaches through a directory fd and passes the descriptor
// (SCM_RIGHTS) to a process inside, which confines itself: it sets
// no_new_privs and calls landlock_restrict_self(fd, 0).
//
// root is a directory fd standing for the sandbox's "/" (O_PATH is
// enough), for example an O_PATH fd of /proc/PID/root. rw and devRW are
// as for Restrict: absolute paths of the sandbox ("/tmp", "/dev/null").
// Ruleset opens each of them and "/" beneath root with openat2(2),
// RESOLVE_IN_ROOT and RESOLVE_NO_MAGICLINKS: a symbolic link, absolute
// or made of "..", resolves as if root were "/" and cannot leave it. It
// checks the files it opened, whatever the ABI: rw entries must be
// directories and devRW entries character devices, otherwise it returns
// an error wrapping [ErrInvalidPath] or [io/fs.ErrNotExist].
//
// It returns the ruleset fd (close-on-exec; the caller must close it)
// and the ABI whose rights it handles, at most 7: what Restrict would
// enforce on this kernel, connect ports included. Without Landlock it
// returns fd -1, ABI 0 and no error. On error fd is -1 and Ruleset
// leaves nothing open.
//
// Rules attach to the files root leads to when Ruleset runs, not to
// names: if the sandbox later renames /tmp, the rule follows the
// directory, and if it had replaced /tmp by a symbolic link to /etc,
// /etc (beneath root) is what the rule grants. Build the ruleset before
// untrusted code runs in the sandbox, or accept that code which can
// already write there chooses the files the rules name.
//
// landlock_restrict_self(2) confines the calling thread only (and the
// threads and processes it starts afterwards): the receiving process must
// call it before starting other threads. It requires no_new_privs, or
// CAP_SYS_ADMIN in the caller's user namespace.
//
// Ruleset needs openat2(2) (Linux 5.6), which every kernel with Landlock
// has.
func Ruleset(root int, rw, devRW []string, connect ...uint16) (fd int, abi int, err error) {
	paths, err := openPaths(root, rw, devRW)
	if err != nil {
		return -1, 0, err
	}
	defer closePaths(paths)
	abi = min(ABI(), pinnedABI)
	if abi == 0 {
		return -1, 0, nil
	}
	fd, err = build(policyFor(abi), paths, connect)
	if err != nil {
		return -1, 0, fmt.Errorf("landlock ruleset (abi %d): %w", abi, err)
	}
	return fd, abi, nil
}

// rulePath is the file of a rule, opened with O_PATH beneath the root.
type rulePath struct {
	kind pathKind
	path string // as the caller named it, for errors
	fd   int
}

// openPaths opens "/", rw and devRW beneath root and checks what each
// names. On error it closes what it opened.
func openPaths(root int, rw, devRW []string) ([]rulePath, error) {
	paths := make([]rulePath, 0, 1+len(rw)+len(devRW))
	paths = append(paths, rulePath{kind: rootPath, path: "/"})
	for _, p := range rw {
		paths = append(paths, rulePath{kind: rwPath, path: p})
	}
	for _, p := range devRW {
		paths = append(paths, rulePath{kind: devRWPath, path: p})
	}
	for i := range paths {
		fd, err := openPath(root, paths[i].kind, paths[i].path)
		if err != nil {
			closePaths(paths[:i])
			return nil, err
		}
		paths[i].fd = fd
	}
	return paths, nil
}

func closePaths(paths []rulePath) {
	for _, p := range paths {
		unix.Close(p.fd)
	}
}

// openPath opens p beneath root and checks that it names what k
// requires. O_PATH neither reads the file nor runs a device's open
// method, and opening a FIFO does not block.
func openPath(root int, k pathKind, p string) (int, error) {
	if err := k.checkAbs(p); err != nil {
		return -1, err
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveInRoot}
	fd, err := unix.Openat2(root, p, &how)
	for i := 0; errors.Is(err, unix.EAGAIN) && i < openRetries; i++ {
		fd, err = unix.Openat2(root, p, &how)
	}
	if err != nil {
		return -1, fmt.Errorf("%s path: %w", k, &os.PathError{Op: "openat2", Path: p, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s path: %w", k, &os.PathError{Op: "fstat", Path: p, Err: err})
	}
	typ := st.Mode & unix.S_IFMT
	if err := k.checkType(p, typ == unix.S_IFDIR, typ == unix.S_IFCHR); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// build creates a ruleset handling what p handles and adds its rules: one
// per path, granting what p grants to the path's kind, and one per
// connect port where TCP is handled. It returns the ruleset fd, or
// closes it on error.
func build(p policy, paths []rulePath, connect []uint16) (int, error) {
	fd, err := ll.LandlockCreateRuleset(&p.handled, 0)
	if err != nil {
		return -1, os.NewSyscallError("landlock_create_ruleset", err)
	}
	for _, r := range paths {
		attr := ll.PathBeneathAttr{AllowedAccess: p.grant(r.kind), ParentFd: r.fd}
		if err := ll.LandlockAddPathBeneathRule(fd, &attr, 0); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("rule for %s path %q: %w", r.kind, r.path, os.NewSyscallError("landlock_add_rule", err))
		}
	}
	if p.connect == 0 {
		return fd, nil
	}
	for _, port := range connect {
		attr := ll.NetPortAttr{AllowedAccess: p.connect, Port: uint64(port)}
		if err := ll.LandlockAddNetPortRule(fd, &attr, 0); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("rule for connect port %d: %w", port, os.NewSyscallError("landlock_add_rule", err))
		}
	}
	return fd, nil
}

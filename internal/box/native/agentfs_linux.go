package native

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// Workspace file operations: put, get, list and remove a file below a box's
// /workspace. The same code serves them in two places (workspace names which):
//
//   - inside the box, by a session's init (agent_linux.go), which opens /workspace
//     for each operation and owns what it creates to the box's user (boxUID, 65534);
//   - outside the box, by the server itself, for boxes whose in-box agent serves no
//     files, through an O_PATH fd of the box's /workspace that it opened below
//     /proc/<pid>/root (workspaceAt) and holds for the box's life; it creates files
//     as the box's user as the host sees it (HostBoxUID).
//
// # Why they are safe
//
// A path is resolved by the kernel below the fd of the workspace with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): "..", absolute
// symlinks and symlinks that lead out of the workspace fail with EXDEV, atomically (no
// check-then-use race with code that swaps a directory for a symlink). Directories are
// created one component at a time relative to the fd of their parent, never through a
// symlink. An upload is written to a fresh temporary file (O_EXCL) and renamed over
// the target, so it never writes through a link the code planted. Reads accept regular
// files only, checked through an O_PATH fd before the file is opened (O_NONBLOCK), so a
// FIFO cannot stall the server or init nor a socket or device be opened.
//
// Inside the box, they run after pivot_root, in the box's mount namespace: the host's
// filesystem is not mounted there at all. As root, init additionally runs under the
// box's Landlock rules, which let it write to /tmp, /workspace and /dev/shm only.
//
// Outside the box, the server runs as host root with neither, so the argument rests
// on the workspace being a mount of its own (a tmpfs, MS_NODEV, that workspaceAt
// checks is a mount root): RESOLVE_NO_XDEV keeps every lookup on that filesystem, and
// a hard link cannot cross filesystems, so no name below the fd reaches a host file;
// MS_NODEV and the regular-file check leave no device to open. The fd was opened
// without following any symlink the box could plant (RESOLVE_NO_SYMLINKS below
// /proc/<pid>/root), and it pins that mount: it cannot be swapped for another while
// held.

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// workspace is where workspace file operations resolve paths: an fd of a box's
// /workspace, held or opened for each operation, and who owns what they create.
type workspace struct {
	// dir is a held O_PATH fd of the workspace (the server), or -1: then path is
	// opened for each operation (init, inside the box).
	dir  int
	path string
	// uid and gid own the files and directories an operation creates; -1 leaves them
	// to their creator (rootless, where the box's user is not mapped).
	uid, gid int
	// fsids creates them as uid and gid (the thread's fsuid and fsgid, see asOwner)
	// rather than creating them, then changing their owner. The server needs it: host
	// root is not mapped in the box's user namespace, and the box's tmpfs refuses to
	// create an inode whose owner it cannot represent (EOVERFLOW).
	fsids bool
}

// workspaceAt opens name below the directory fd root (the server: "workspace" below
// a box's /proc/<pid>/root) as a held workspace whose operations create files as uid
// and gid (HostBoxUID as root; -1 rootless, where the server's own ids are the box's).
// No symlink is followed on the way (the box could plant one), and the directory must
// be a mount of its own (see "Why they are safe"). The caller must call close once
// done.
func workspaceAt(root int, name string, uid, gid int) (*workspace, error) {
	fd, err := unix.Openat2(root, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, 0, &stx); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "statx", Path: name, Err: err}
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a mount of its own", name)
	}
	return &workspace{dir: fd, uid: uid, gid: gid, fsids: uid >= 0 && gid >= 0}, nil
}

// close closes the held fd, if any. The workspace cannot be used afterwards.
func (w *workspace) close() {
	if w.dir >= 0 {
		unix.Close(w.dir)
		w.dir = -1
	}
}

// root returns a new fd of the workspace; the caller closes it.
func (w *workspace) root() (int, error) {
	if w.dir >= 0 {
		fd, err := unix.FcntlInt(uintptr(w.dir), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, os.NewSyscallError("dup workspace", err)
		}
		return fd, nil
	}
	if w.path == "" {
		return -1, errors.New("the workspace is closed")
	}
	fd, err := unix.Open(w.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: w.path, Err: err}
	}
	return fd, nil
}

// chown reports whether created files and directories get their owner afterwards.
func (w *workspace) chown() bool { return w.uid >= 0 && w.gid >= 0 && !w.fsids }

// asOwner runs fn, which creates files, as the workspace's owner when it creates as
// its owner (fsids), else as the caller. The owner's ids are set on the caller's
// thread, locked to it for the while, and restored before it is unlocked, so no
// other goroutine runs with them. (A thread must not simply be left to end with its
// goroutine: it may be the one that cloned a box, whose Pdeathsig would then kill it.)
// A nonzero fsuid also drops CAP_DAC_OVERRIDE and the other file capabilities: fn has
// the box's user's rights in the workspace (and the caller's supplementary groups,
// which own nothing there), no more.
func (w *workspace) asOwner(fn func() error) error {
	if !w.fsids {
		return fn()
	}
	runtime.LockOSThread()
	// setfsuid and setfsgid answer the previous id, never an error: read them back to
	// know they were set. Setting the fsuid back to 0 restores the capabilities.
	oldGID, _ := unix.SetfsgidRetGid(w.gid)
	oldUID, _ := unix.SetfsuidRetUid(w.uid)
	defer func() {
		_, _ = unix.SetfsuidRetUid(oldUID)
		_, _ = unix.SetfsgidRetGid(oldGID)
		if fsids() == [2]int{oldUID, oldGID} {
			runtime.UnlockOSThread()
		} // else the thread stays locked, and ends with the goroutine: can't happen
	}()
	if ids := fsids(); ids != [2]int{w.uid, w.gid} {
		return fmt.Errorf("act as the box's user: fsuid and fsgid are %v", ids)
	}
	return fn()
}

// fsids returns the calling thread's fsuid and fsgid.
func fsids() [2]int {
	uid, _ := unix.SetfsuidRetUid(-1)
	gid, _ := unix.SetfsgidRetGid(-1)
	return [2]int{uid, gid}
}

// cleanPath checks a request path and returns it relative to the workspace ("." for
// the workspace itself when allowRoot).
func cleanPath(p string, allowRoot bool) (string, error) {
	if p == "" || p == "." || p == "/" {
		if allowRoot {
			return ".", nil
		}
		return "", fmt.Errorf("%w: empty path", box.ErrBadPath)
	}
	if _, err := box.CleanDest(p); err != nil {
		return "", fmt.Errorf("%w: %v", box.ErrBadPath, err)
	}
	return path.Clean(p), nil
}

// openBeneath opens rel below the workspace.
func (w *workspace) openBeneath(rel string, flags uint64, mode uint64) (int, error) {
	root, err := w.root()
	if err != nil {
		return -1, err
	}
	defer unix.Close(root)
	return openat2(root, rel, flags, mode)
}

func openat2(dir int, rel string, flags uint64, mode uint64) (int, error) {
	for {
		fd, err := unix.Openat2(dir, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolveFlags})
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a concurrent rename raced the lookup: the kernel asks to retry
		}
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			// No openat2: gVisor (runsc) before 2023, where Docker's seccomp profile
			// also answers EPERM for it. Walk without following any symlink.
			return openNoFollow(dir, rel, flags, mode)
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		return fd, nil
	}
}

// openNoFollow opens rel below dir one component at a time, each with O_NOFOLLOW:
// a symlink anywhere on the path fails (ENOTDIR or ELOOP), where openat2 would
// follow one that stays below dir. rel is clean and has no ".." (cleanPath), and the
// code cannot mount anything below the workspace, so this stays beneath dir too.
func openNoFollow(dir int, rel string, flags uint64, mode uint64) (int, error) {
	parts := strings.Split(rel, "/")
	cur := dir
	for i, name := range parts {
		last := i == len(parts)-1
		fl, m := uint64(unix.O_PATH|unix.O_DIRECTORY), uint64(0)
		if last {
			fl, m = flags, mode
		}
		fd, err := unix.Openat(cur, name, int(fl)|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(m))
		if cur != dir {
			unix.Close(cur)
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		cur = fd
	}
	return cur, nil
}

// mkdirs opens (creating as needed) the directory rel below the workspace, one
// component at a time, refusing symlinks and other mounts, and returns its fd.
func (w *workspace) mkdirs(rel string) (int, error) {
	cur, err := w.root()
	if err != nil {
		return -1, err
	}
	if rel == "." {
		return cur, nil
	}
	for _, name := range strings.Split(rel, "/") {
		err := unix.Mkdirat(cur, name, 0o755)
		created := err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, &os.PathError{Op: "mkdir", Path: rel, Err: err}
		}
		next, err := openat2(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		if created && w.chown() {
			// Through the fd just opened: whatever now has the name, never a
			// symlink's target.
			_ = unix.Fchownat(next, "", w.uid, w.gid, unix.AT_EMPTY_PATH)
		}
		cur = next
	}
	return cur, nil
}

// put writes what r yields (exactly size bytes, then io.EOF) to the file p, creating
// the directories above it, and replaces p atomically; if r yields fewer or more
// bytes or fails, p is unchanged. It stops reading at its first error: a caller
// whose r is a stream it shares must bring the stream back in step. r is read with
// the ids put creates files with (asOwner).
func (w *workspace) put(p string, r io.Reader, size int64) error {
	rel, err := cleanPath(p, false)
	if err != nil {
		return err
	}
	return w.asOwner(func() error { return w.putAt(rel, r, size) })
}

// putAt is put of the clean path rel.
func (w *workspace) putAt(rel string, r io.Reader, size int64) error {
	dir, err := w.mkdirs(path.Dir(rel))
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".moat-upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("upload of %s ended after %d of %d bytes", rel, n, size)
	}
	if err == nil && w.chown() {
		err = f.Chown(w.uid, w.gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if rerr := unix.Renameat(dir, tmp, dir, path.Base(rel)); rerr != nil {
			err = &os.PathError{Op: "rename", Path: rel, Err: rerr}
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
	}
	return err
}

// openFile opens the regular file p below the workspace for reading and returns it
// with its size; anything else, or a file over max bytes, is refused. The caller
// closes the file and sends it with copyOut (init announces the size first).
//
// Anything but a regular file (a directory, FIFO, socket or device) is refused with
// ErrNotRegular before it is opened for reading: p is first opened with O_PATH, which
// never blocks nor reaches a driver, and fstat'd. (Opening a socket fails with ENXIO,
// a device could do anything.) Should the file be swapped for another between that
// check and the open for reading, the open is O_NONBLOCK, an ENXIO still means
// ErrNotRegular, and the opened file is checked again.
func (w *workspace) openFile(p string, max int64) (*os.File, int64, error) {
	rel, err := cleanPath(p, false)
	if err != nil {
		return nil, 0, err
	}
	if err := w.checkRegular(rel); err != nil {
		return nil, 0, err
	}
	fd, err := w.openBeneath(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ENXIO) {
		return nil, 0, fmt.Errorf("%w: %s", box.ErrNotRegular, rel)
	}
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), rel)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s", box.ErrNotRegular, rel)
	}
	if st.Size > max {
		f.Close()
		return nil, 0, fmt.Errorf("%w: %s is %d bytes, over the limit of %d", box.ErrFileTooLarge, rel, st.Size, max)
	}
	return f, st.Size, nil
}

// checkRegular returns ErrNotRegular unless rel, below the workspace, is a regular
// file, without opening it for I/O (O_PATH).
func (w *workspace) checkRegular(rel string) error {
	fd, err := w.openBeneath(rel, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFLNK:
		// Only without openat2 (openNoFollow, which opens the last component with
		// O_NOFOLLOW: O_PATH then opens the symlink itself); an open for reading
		// would fail there with ELOOP, so answer that.
		return &os.PathError{Op: "open", Path: rel, Err: unix.ELOOP}
	default:
		return fmt.Errorf("%w: %s", box.ErrNotRegular, rel)
	}
}

// copyOut copies f to w, at most max bytes, and returns how many it copied. The file
// may change meanwhile (a process of the code still runs): what is there is sent, and
// the receiver compares the count with the size openFile announced. A read error ends
// the copy early without an error; only w's error is returned.
func copyOut(w io.Writer, f *os.File, max int64) (int64, error) {
	buf := make([]byte, maxChunk)
	var sent int64
	for sent < max {
		n, rerr := f.Read(buf[:min(int64(len(buf)), max-sent)])
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return sent, err
			}
			sent += int64(n)
		}
		if rerr != nil {
			break
		}
	}
	return sent, nil
}

// list lists the workspace below dir, recursively, without following symlinks, at
// most box.MaxListEntries entries and box.MaxListBytes of paths (box.ListCost).
//
// Entries come depth first, each directory's in the order the kernel yields them
// (unsorted), a directory before its contents. Once a bound is reached the walk
// stops: a truncated listing is the first entries in that order, returned with
// box.ErrListTruncated. Directories are read in batches of at most listBatch names
// and no further than needed, so the memory a listing takes is bounded by the caps
// (plus a batch per directory level), not by the size of a directory: the code can
// fill one with millions of names, and the server lists for boxes whose init serves
// no files.
func (w *workspace) list(dir string) ([]box.FileInfo, error) {
	rel, err := cleanPath(dir, true)
	if err != nil {
		return nil, err
	}
	fd, err := w.openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	l := &listing{out: []box.FileInfo{}}
	prefix := ""
	if rel != "." {
		prefix = rel + "/"
	}
	if err := l.walk(fd, prefix, 0); err != nil {
		return nil, err
	}
	if l.truncated {
		return l.out, box.ErrListTruncated
	}
	return l.out, nil
}

const (
	maxListDepth = 64
	// listBatch is how many names walk reads from a directory at a time.
	listBatch = 256
)

// listing is a listing being made: its entries, the bytes they count
// (box.ListCost), and whether a bound cut it.
type listing struct {
	out       []box.FileInfo
	bytes     int
	truncated bool
}

// full reports whether the listing can take no entry costing cost (box.ListCost),
// and marks it cut.
func (l *listing) full(cost int) bool {
	if len(l.out) >= box.MaxListEntries || l.bytes+cost > box.MaxListBytes {
		l.truncated = true
	}
	return l.truncated
}

// walk appends the entries of the directory fd (which it closes) to the listing,
// until it is full.
func (l *listing) walk(fd int, prefix string, depth int) error {
	d := os.NewFile(uintptr(fd), prefix)
	defer d.Close()
	for !l.truncated {
		// Never read more names than could still be listed (and one more, to know
		// whether the listing is cut).
		names, rerr := d.Readdirnames(min(listBatch, box.MaxListEntries-len(l.out)+1))
		for _, name := range names {
			path := prefix + name
			cost := box.ListCost(path)
			if l.full(cost) {
				return nil
			}
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // removed meanwhile
			}
			mode := fileMode(st.Mode)
			fi := box.FileInfo{
				Path:    path,
				Size:    st.Size,
				Dir:     mode.IsDir(),
				Mode:    mode.String(),
				ModTime: time.Unix(st.Mtim.Unix()).UTC(),
			}
			if fi.Dir {
				fi.Size = 0
			}
			l.out = append(l.out, fi)
			l.bytes += cost
			if fi.Dir && depth < maxListDepth {
				sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil {
					if err := l.walk(sub, fi.Path+"/", depth+1); err != nil {
						return err
					}
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
	return nil
}

func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	return mode
}

// remove removes a file, symlink or empty directory below the workspace.
func (w *workspace) remove(p string) error {
	rel, err := cleanPath(p, false)
	if err != nil {
		return err
	}
	dir, err := w.openBeneath(path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	name := path.Base(rel)
	err = unix.Unlinkat(dir, name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &os.PathError{Op: "remove", Path: rel, Err: err}
	}
	return nil
}

// failCode classifies an operation's error for the parent.
func failCode(err error) string {
	switch {
	case errors.Is(err, box.ErrBadPath), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP),
		errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENAMETOOLONG):
		return failBadPath
	case errors.Is(err, unix.ENOENT):
		return failNotFound
	case errors.Is(err, box.ErrNotRegular):
		return failNotRegular
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return failConflict
	case errors.Is(err, box.ErrFileTooLarge), errors.Is(err, unix.EFBIG):
		return failTooLarge
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return failNoSpace
	default:
		return failOther
	}
}

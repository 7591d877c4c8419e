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
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// Workspace file operations, served by a session's init inside the box.
//
// # Why they are safe
//
// They run after pivot_root, in the box's mount namespace: the host's filesystem is
// not mounted there at all. Within the box, a path is resolved by the kernel below an
// fd of /workspace with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV): "..", absolute symlinks and symlinks that lead out of the
// workspace fail with EXDEV, atomically (no check-then-use race with code that swaps
// a directory for a symlink). Directories are created one component at a time
// relative to the fd of their parent, never through a symlink. An upload is written
// to a fresh temporary file (O_EXCL) and renamed over the target, so it never writes
// through a link the code planted. Reads open with O_NONBLOCK and accept regular files
// only, so a FIFO cannot stall init. As root, init additionally runs under the box's
// Landlock rules, which let it write to /tmp, /workspace and /dev/shm only.

const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

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
func openBeneath(rel string, flags uint64, mode uint64) (int, error) {
	ws, err := unix.Open(box.WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: box.WorkspaceDir, Err: err}
	}
	defer unix.Close(ws)
	return openat2(ws, rel, flags, mode)
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
// component at a time, refusing symlinks, and returns its fd.
func mkdirs(rel string, chown bool) (int, error) {
	cur, err := unix.Open(box.WorkspaceDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: box.WorkspaceDir, Err: err}
	}
	if rel == "." {
		return cur, nil
	}
	for _, name := range strings.Split(rel, "/") {
		err := unix.Mkdirat(cur, name, 0o755)
		switch {
		case err == nil:
			if chown {
				_ = unix.Fchownat(cur, name, boxUID, boxGID, unix.AT_SYMLINK_NOFOLLOW)
			}
		case errors.Is(err, unix.EEXIST):
		default:
			unix.Close(cur)
			return -1, &os.PathError{Op: "mkdir", Path: rel, Err: err}
		}
		next, err := unix.Openat(cur, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		cur = next
	}
	return cur, nil
}

// putFile writes the data chunks that follow on r (exactly size bytes, passed as max)
// to rel, replacing it atomically; a short upload changes nothing.
// A *protocolError means the stream from the parent is broken; other errors are the
// operation's and the stream is in step.
func putFile(r io.Reader, p string, max int64, chown bool) error {
	rel, err := cleanPath(p, false)
	if err != nil {
		_, derr := readChunks(r, io.Discard, max)
		return errors.Join(err, derr)
	}
	dir, err := mkdirs(path.Dir(rel), chown)
	if err != nil {
		_, derr := readChunks(r, io.Discard, max)
		return errors.Join(err, derr)
	}
	defer unix.Close(dir)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".moat-upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		_, derr := readChunks(r, io.Discard, max)
		return errors.Join(&os.PathError{Op: "create", Path: rel, Err: err}, derr)
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := readChunks(r, f, max)
	if err == nil && n != max {
		err = fmt.Errorf("upload of %s ended after %d of %d bytes", rel, n, max)
	}
	if err == nil && chown {
		err = f.Chown(boxUID, boxGID)
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

// getFile answers "file" with the size and sends rel's content as data chunks, or
// answers "fail".
func getFile(a *agent, p string, max int64) error {
	rel, err := cleanPath(p, false)
	if err != nil {
		return a.send(answer(agentMsg{}, err))
	}
	fd, err := openBeneath(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return a.send(answer(agentMsg{}, err))
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return a.send(answer(agentMsg{}, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return a.send(answer(agentMsg{}, fmt.Errorf("%w: %s", box.ErrNotRegular, rel)))
	}
	if st.Size > max {
		return a.send(answer(agentMsg{}, fmt.Errorf("%w: %s is %d bytes, over the limit of %d", box.ErrFileTooLarge, rel, st.Size, max)))
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if err := writeFrame(a.sock, agentMsg{Kind: "file", Size: st.Size}); err != nil {
		return err
	}
	// The file may change while it is sent (a process of the code still runs): send
	// what is there, at most max bytes; the parent counts what arrives.
	buf := make([]byte, maxChunk)
	var sent int64
	for sent < max {
		n, rerr := f.Read(buf[:min(int64(len(buf)), max-sent)])
		if n > 0 {
			if err := writeChunk(a.sock, buf[:n]); err != nil {
				return err
			}
			sent += int64(n)
		}
		if rerr != nil {
			break
		}
	}
	return writeChunk(a.sock, nil)
}

// listFiles lists the workspace below dir, recursively, without following symlinks.
func listFiles(dir string) ([]box.FileInfo, error) {
	rel, err := cleanPath(dir, true)
	if err != nil {
		return nil, err
	}
	fd, err := openBeneath(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	out := []box.FileInfo{}
	prefix := ""
	if rel != "." {
		prefix = rel + "/"
	}
	err = walk(fd, prefix, 0, &out)
	return out, err
}

const maxListDepth = 64

// walk appends the entries of the directory fd (which it closes) to out.
func walk(fd int, prefix string, depth int, out *[]box.FileInfo) error {
	d := os.NewFile(uintptr(fd), prefix)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if len(*out) >= box.MaxListEntries {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		mode := fileMode(st.Mode)
		fi := box.FileInfo{
			Path:    prefix + name,
			Size:    st.Size,
			Dir:     mode.IsDir(),
			Mode:    mode.String(),
			ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		}
		if fi.Dir {
			fi.Size = 0
		}
		*out = append(*out, fi)
		if fi.Dir && depth < maxListDepth {
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				if err := walk(sub, fi.Path+"/", depth+1, out); err != nil {
					return err
				}
			}
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

// removeFile removes a file, symlink or empty directory below the workspace.
func removeFile(p string) error {
	rel, err := cleanPath(p, false)
	if err != nil {
		return err
	}
	dir, err := openBeneath(path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0)
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

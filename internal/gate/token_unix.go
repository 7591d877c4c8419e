//go:build unix

package gate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow opens path for reading without following a final symbolic link:
// a link planted in the data directory cannot point the server at another file.
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link, not a regular file", path)
	}
	return f, err
}

// checkPrivate refuses a token file that others may read or write, or that
// another user owns (and so could replace or read at will).
func checkPrivate(path string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("token file %s is accessible to group or others (mode %04o): run chmod 600 %s, or delete it to generate a new token", path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("token file %s is owned by uid %d, not by you (uid %d)", path, st.Uid, os.Geteuid())
	}
	return nil
}

// checkDir refuses a data directory that others may write to (they could
// replace the token file) or that another user owns; root's directories are
// trusted.
func checkDir(dir string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("data directory %s is writable by group or others (mode %04o): run chmod go-w %s", dir, perm, dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("data directory %s is owned by uid %d, not by you (uid %d) or root", dir, st.Uid, os.Geteuid())
	}
	return nil
}

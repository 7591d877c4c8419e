//go:build unix

package session

import (
	"io/fs"
	"log/slog"
	"os"
	"syscall"
)

const (
	// oNoFollow makes an open fail (ELOOP) if the last path element is a symbolic
	// link.
	oNoFollow = syscall.O_NOFOLLOW
	// oNonBlock keeps an open of a FIFO from blocking until a writer comes (one put
	// in place of a record after ReadDir saw a regular file); the Stat that follows
	// refuses it.
	oNonBlock = syscall.O_NONBLOCK
)

// restrictDir makes the record dir 0700 if it is more open: records name the owners
// of live sessions.
func restrictDir(dir string, fi fs.FileInfo, log *slog.Logger) error {
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	log.Warn("session dir: was open to other users, now 0700", "dir", dir, "mode", fi.Mode().Perm().String())
	return os.Chmod(dir, 0o700)
}

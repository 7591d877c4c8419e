//go:build unix

package config

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkOwner refuses a config file owned by someone other than the current user or
// root.
func checkOwner(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); st.Uid != 0 && int(st.Uid) != uid {
		return fmt.Errorf("config %s is owned by uid %d, not by you (uid %d) or root (pass --config to use it anyway)", path, st.Uid, uid)
	}
	return nil
}

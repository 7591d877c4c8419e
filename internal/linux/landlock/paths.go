package landlock

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkPaths validates the arguments of Restrict before anything is
// restricted, so that a typo fails loudly instead of leaving the sandbox
// without its writable workspace.
//
// rw entries must be existing directories. devRW entries must be
// existing character devices: granting write access to a directory
// there (for example "/dev") would make every device node beneath it,
// including raw disks and /dev/mem, writable.
func checkPaths(rw, devRW []string) error {
	for _, p := range rw {
		fi, err := stat("rw", p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("rw path %q is not a directory: %w", p, ErrInvalidPath)
		}
	}
	for _, p := range devRW {
		fi, err := stat("devRW", p)
		if err != nil {
			return err
		}
		if fi.Mode().Type() != os.ModeDevice|os.ModeCharDevice {
			return fmt.Errorf("devRW path %q is not a character device: %w", p, ErrInvalidPath)
		}
	}
	return nil
}

// stat requires p to be absolute and returns its (symlink-followed)
// file info, as Landlock will open it with O_PATH and follow links too.
func stat(kind, p string) (os.FileInfo, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%s path %q is not absolute: %w", kind, p, ErrInvalidPath)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s path: %w", kind, err)
	}
	return fi, nil
}

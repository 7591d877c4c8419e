package landlock

import (
	"fmt"
	"os"
	"path/filepath"
)

// pathKind is the role of a path in a ruleset: it decides what the file
// the path names must be and what the rule on it grants.
type pathKind int

const (
	// rootPath is "/": everything beneath it may be read and executed.
	rootPath pathKind = iota
	// rwPath is an rw entry: a directory beneath which everything may
	// also be written.
	rwPath
	// devRWPath is a devRW entry: a character device that may also be
	// opened for writing.
	devRWPath
)

// String returns the name errors give the kind, that of the argument
// of Restrict and Ruleset it comes from.
func (k pathKind) String() string {
	switch k {
	case rootPath:
		return "root"
	case rwPath:
		return "rw"
	default:
		return "devRW"
	}
}

// checkAbs returns an error wrapping [ErrInvalidPath] if p is relative.
func (k pathKind) checkAbs(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%s path %q is not absolute: %w", k, p, ErrInvalidPath)
	}
	return nil
}

// checkType returns an error wrapping [ErrInvalidPath] unless the file p
// names, a directory if dir and a character device if charDev, is what
// k requires: a directory for "/" and rw, a character device for devRW.
// A devRW directory is refused because granting write access to it (for
// example to "/dev") would make every device node beneath it, including
// raw disks and /dev/mem, writable.
func (k pathKind) checkType(p string, dir, charDev bool) error {
	if k == devRWPath {
		if !charDev {
			return fmt.Errorf("%s path %q is not a character device: %w", k, p, ErrInvalidPath)
		}
		return nil
	}
	if !dir {
		return fmt.Errorf("%s path %q is not a directory: %w", k, p, ErrInvalidPath)
	}
	return nil
}

// checkPaths validates rw and devRW in the caller's own filesystem with
// stat(2), following symbolic links, so that a typo fails loudly instead
// of leaving the sandbox without its writable workspace. Restrict uses
// it where there is no ruleset to build (Ruleset checks the files it
// opens instead): on other systems, and on Linux without Landlock,
// where openat2(2) may be missing too (gVisor has neither).
//
// rw entries must be existing directories and devRW entries existing
// character devices (see pathKind.checkType).
func checkPaths(rw, devRW []string) error {
	for _, p := range rw {
		if err := check(rwPath, p); err != nil {
			return err
		}
	}
	for _, p := range devRW {
		if err := check(devRWPath, p); err != nil {
			return err
		}
	}
	return nil
}

// check validates one path of checkPaths.
func check(k pathKind, p string) error {
	if err := k.checkAbs(p); err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s path: %w", k, err)
	}
	return k.checkType(p, fi.IsDir(), fi.Mode().Type() == os.ModeDevice|os.ModeCharDevice)
}

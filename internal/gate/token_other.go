//go:build !unix

package gate

import (
	"io/fs"
	"os"
)

// openNoFollow opens path for reading. Outside unix there is no O_NOFOLLOW.
func openNoFollow(path string) (*os.File, error) { return os.Open(path) }

// checkPrivate has no mode bits or owner to check outside unix.
func checkPrivate(string, fs.FileInfo) error { return nil }

// checkDir has no mode bits or owner to check outside unix.
func checkDir(string, fs.FileInfo) error { return nil }

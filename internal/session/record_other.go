//go:build !unix

package session

import (
	"io/fs"
	"log/slog"
)

// oNoFollow and oNonBlock are not available outside unix; loadRecords' type checks
// on the directory entry and the open file stand in for them.
const (
	oNoFollow = 0
	oNonBlock = 0
)

// restrictDir has no unix permissions to restrict outside unix.
func restrictDir(string, fs.FileInfo, *slog.Logger) error { return nil }

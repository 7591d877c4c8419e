package landlock

import "errors"

// ErrInvalidPath reports a path in rw or devRW that Restrict and Ruleset
// refuse to grant: a relative path, an rw entry that is not a directory,
// or a devRW entry that is not a character device. Missing paths are
// reported with an error wrapping [io/fs.ErrNotExist] instead.
var ErrInvalidPath = errors.New("invalid landlock path")

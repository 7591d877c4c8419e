package seccomp

import "errors"

// ErrNotSupported reports that the box's filter cannot be loaded here: the
// kernel lacks seccomp filter mode (or SECCOMP_FILTER_FLAG_TSYNC), an outer
// sandbox forbids seccomp(2), or the package was built for an operating system
// or architecture it has no policy for. Check it with errors.Is.
var ErrNotSupported = errors.New("seccomp filter not supported")

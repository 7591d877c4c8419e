package audit

import "errors"

// ErrUnavailable: the audit trail cannot take a record now (the store is failing,
// the buffer is full, or the log is closed). Fail closed, executions are refused
// with an error wrapping it; check it with errors.Is.
var ErrUnavailable = errors.New("audit unavailable")

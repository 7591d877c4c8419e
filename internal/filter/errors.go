package filter

import "errors"

// Errors returned by this package. Check them with errors.Is.
var (
	// ErrClosed is returned by Stream.Write after Close.
	ErrClosed = errors.New("write to closed filter stream")
	// ErrRuleName is returned by NewRule for an empty or malformed rule name.
	ErrRuleName = errors.New("invalid rule name")
	// ErrRulePattern is returned by NewRule for a pattern that does not compile, can
	// match the empty string, or anchors to the start or end of the whole text.
	ErrRulePattern = errors.New("invalid rule pattern")
	// ErrRuleMaxLen is returned by NewRule for a MaxLen out of range.
	ErrRuleMaxLen = errors.New("invalid rule max_len")
)

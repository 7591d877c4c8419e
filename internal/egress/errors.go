package egress

import "errors"

// Errors returned by this package. Check them with errors.Is.
var (
	// ErrBadRule is wrapped by every error ParseRules returns; the message names
	// the item and says what is wrong with it.
	ErrBadRule = errors.New("bad allowlist item")
	// ErrBadPolicy is wrapped by every error Policy.Validate returns.
	ErrBadPolicy = errors.New("bad egress policy")
)

// Internal errors of the request reader; they become 400 and 431 answers.
var (
	errHeaderTooLarge = errors.New("request header too large")
	errNotTLS         = errors.New("not a TLS ClientHello")
)

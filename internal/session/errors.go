package session

import (
	"errors"
	"fmt"
)

// Errors returned by this package. Check them with errors.Is (and errors.As for the
// typed ones).
var (
	// ErrNotFound: no such session for this owner. Another owner's session is
	// ErrNotFound too, so a caller cannot learn that an id exists.
	ErrNotFound = errors.New("session not found")
	// ErrBusy: the session is already running a call or a file operation; a session
	// serves one at a time.
	ErrBusy = errors.New("session busy")
	// ErrClosed: the store is closed and takes no more work.
	ErrClosed = errors.New("session store closed")
	// ErrLimit: too many sessions. The error is a *LimitError that says which limit.
	ErrLimit = errors.New("too many sessions")
	// ErrLost: the session existed but its state is gone (expired, its box died, or
	// the server restarted). The error is a *LostError that says why.
	ErrLost = errors.New("session lost")
)

// Caller bugs, returned by Slot.Commit.
var (
	errSlotUsed = errors.New("session slot already committed or cancelled")
	errNilBox   = errors.New("session commit of a nil box")
)

// LimitError reports which session limit a Reserve hit. errors.Is(err, ErrLimit)
// holds for it.
type LimitError struct {
	// Scope is "total" (the store's MaxTotal) or "owner" (the owner's quota).
	Scope string
	// Limit is the number of sessions allowed in that scope.
	Limit int
}

func (e *LimitError) Error() string {
	if e.Scope == ScopeOwner {
		return fmt.Sprintf("too many sessions: at most %d per owner", e.Limit)
	}
	return fmt.Sprintf("too many sessions: at most %d on this server", e.Limit)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// Scopes of a LimitError.
const (
	ScopeTotal = "total"
	ScopeOwner = "owner"
)

// LostError reports a session whose state is gone, and why. errors.Is(err, ErrLost)
// holds for it.
type LostError struct {
	ID string
	// Reason is human text for the client, for example "expired after 10m0s idle",
	// "reached its maximum lifetime of 1h0m0s", "the box died: ..." or "the server
	// restarted; the session's state is gone".
	Reason string
}

func (e *LostError) Error() string {
	return fmt.Sprintf("session %s lost: %s", e.ID, e.Reason)
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

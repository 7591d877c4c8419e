package engine

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
)

// SessionRequest opens a session: one box kept alive with a persistent interpreter.
type SessionRequest struct {
	// Owner is the principal the session belongs to; only it can see or use it.
	Owner    string
	Language string
	// Profile names the policy profile; empty means the config's default.
	Profile string
	// Limits bound the box; Limits.Timeout is the default per-call timeout.
	Limits box.Limits
	Env    []string
	// IdleTTL and MaxLifetime, when non-zero, override the server's defaults (and
	// may not exceed them).
	IdleTTL, MaxLifetime time.Duration
}

// CallRequest is one execution in a session.
type CallRequest struct {
	Code []byte
	// Timeout, when non-zero, bounds this call instead of the session's default.
	Timeout time.Duration
	// Stdout and Stderr, when set, receive the filtered output live.
	Stdout, Stderr io.Writer
}

// SessionInfo describes a session to its owner.
type SessionInfo struct {
	ID        string    `json:"id"`
	Language  string    `json:"language"`
	Profile   string    `json:"profile"`
	State     string    `json:"state"` // "idle" or "busy"
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used"`
	// ExpiresAt is when the session ends if left idle (the earlier of the idle TTL
	// and the maximum lifetime).
	ExpiresAt time.Time `json:"expires_at"`
	Calls     int       `json:"calls"`
	// Isolation and Warnings are those of the session's box.
	Isolation []string `json:"isolation"`
	Warnings  []string `json:"warnings"`
}

// errNotYet marks the session methods not wired yet.
var errNotYet = errors.New("sessions are not available yet")

// CreateSession starts a session for req.Owner and returns its description. It fails
// with ErrBadRequest (wrapped) for a bad language, profile or limit, and with
// session.ErrLimit when the owner or the server has too many sessions.
func (e *Engine) CreateSession(ctx context.Context, req *SessionRequest) (SessionInfo, error) {
	return SessionInfo{}, errNotYet
}

// Sessions lists owner's live sessions, oldest first.
func (e *Engine) Sessions(owner string) []SessionInfo { return nil }

// Session describes one of owner's sessions: session.ErrNotFound if it does not exist
// or is another owner's, session.ErrLost if it existed and its state is gone.
func (e *Engine) Session(owner, id string) (SessionInfo, error) { return SessionInfo{}, errNotYet }

// DeleteSession destroys one of owner's sessions and its box.
func (e *Engine) DeleteSession(owner, id string) error { return errNotYet }

// SessionExecute runs one call in a session through policy, the box and the filter.
// A session serves one call at a time: session.ErrBusy while another runs.
func (e *Engine) SessionExecute(ctx context.Context, owner, id string, req *CallRequest) (*box.Result, error) {
	return nil, errNotYet
}

// PutFile writes size bytes from r to path in the session's workspace.
func (e *Engine) PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) error {
	return errNotYet
}

// GetFile copies the workspace file at path to w and returns its size.
func (e *Engine) GetFile(ctx context.Context, owner, id, path string, w io.Writer) (int64, error) {
	return 0, errNotYet
}

// ListFiles lists the session's workspace below dir ("" for all of it).
func (e *Engine) ListFiles(ctx context.Context, owner, id, dir string) ([]box.FileInfo, error) {
	return nil, errNotYet
}

// RemoveFile removes a file (or an empty directory) from the session's workspace.
func (e *Engine) RemoveFile(ctx context.Context, owner, id, path string) error {
	return errNotYet
}

// Close destroys every session's box. The engine serves no session afterwards.
func (e *Engine) Close() error { return nil }

// MaxOutputFile bounds each file a one-shot execution returns (Request.OutputFiles).
const MaxOutputFile = 16 << 20

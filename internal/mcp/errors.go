package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/filter"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/session"
)

// errNoSession is what a client hears for a session id it does not own: the same
// words whether the id never existed, ended, or is another client's.
var errNoSession = errors.New("no such session")

// toolError is an error a handler returns with a message written for the model; it
// is shown as is.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

func errorf(format string, args ...any) error {
	return &toolError{msg: fmt.Sprintf(format, args...)}
}

// message maps any error a tool met to the text the model reads, with a hint of what
// to do next. It is the one place where errors become tool results. internal says
// the error is moat's own failure: the caller logs it in full and the model gets an
// id to quote, never the error's text (it may hold host paths).
func message(err error, sessionID string) (msg string, internal bool) {
	var (
		te    *toolError
		lost  *session.LostError
		limit *session.LimitError
	)
	sid := "the session"
	if sessionID != "" {
		sid = "session " + sessionID
	}
	if errors.As(err, &te) {
		return te.msg, false
	}
	if status, _, _ := gate.Status(err); status != 0 {
		return clientMessage(err, nil), false
	}
	switch {
	case errors.Is(err, engine.ErrBadRequest):
		return clientMessage(err, engine.ErrBadRequest), false
	case errors.As(err, &lost):
		return fmt.Sprintf("session %s is lost: %s. Its variables and files are gone; start a new one with session_create.", lost.ID, filter.SanitizeError(lost.Reason)), false
	case errors.Is(err, session.ErrLost), errors.Is(err, box.ErrSessionLost):
		return fmt.Sprintf("%s is lost: %s. Start a new one with session_create.", sid, clientMessage(err, nil)), false
	case errors.Is(err, errNoSession), errors.Is(err, session.ErrNotFound), errors.Is(err, box.ErrSessionClosed):
		return fmt.Sprintf("no such session: %s is not one of this connection's live sessions (session_list shows them; session_create starts one).", sid), false
	case errors.As(err, &limit):
		return limit.Error() + "; destroy a session you no longer need with session_destroy.", false
	case errors.Is(err, session.ErrLimit):
		return "too many sessions; destroy a session you no longer need with session_destroy.", false
	case errors.Is(err, session.ErrBusy):
		return fmt.Sprintf("%s is running another call or file operation; a session serves one at a time. Wait for it to finish, or use another session.", sid), false
	case errors.Is(err, session.ErrClosed):
		return "the server is shutting down; try again later.", false
	case errors.Is(err, box.ErrFileNotFound):
		return clientMessage(err, nil) + " (file_list shows the workspace)", false
	case errors.Is(err, box.ErrFileTooLarge), errors.Is(err, box.ErrBadPath), errors.Is(err, box.ErrNotRegular):
		return clientMessage(err, nil), false
	case errors.Is(err, context.Canceled):
		return "the call was cancelled.", false
	case errors.Is(err, context.DeadlineExceeded):
		return "the call ran out of time.", false
	}
	return "", true
}

// clientMessage is err's text for a model: without the sentinel's own prefix and
// sanitized of host paths and Go internals.
func clientMessage(err error, sentinel error) string {
	msg := err.Error()
	if sentinel != nil {
		msg = strings.TrimPrefix(msg, sentinel.Error()+": ")
	}
	return filter.SanitizeError(msg)
}

// describe maps err to the text a client sees (message). An internal error is
// logged in full with an id, and the client is given the id.
func describe(log *slog.Logger, op string, err error, sessionID string) string {
	msg, internal := message(err, sessionID)
	if internal {
		id := newErrorID()
		log.Error("mcp: internal error", "op", op, "error_id", id, "session_id", sessionID, "err", err)
		msg = "internal error in moat (error id " + id + "); the server's log has the details. Retrying may help."
	}
	return msg
}

// errorResult turns err into a tool result with isError set.
func errorResult(log *slog.Logger, tool string, err error, sessionID string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "Error: " + describe(log, tool, err, sessionID)}}}
}

func newErrorID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

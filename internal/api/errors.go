package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/filter"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/session"
)

// Error codes: the "code" of every error body. They are part of the API contract;
// doc.go lists them with their statuses.
const (
	CodeBadRequest       = "bad_request"
	CodeBadPath          = "bad_path"
	CodeNotRegular       = "not_regular"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeLimitExceeded    = "limit_exceeded"
	CodeNotFound         = "not_found"
	CodeFileNotFound     = "file_not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeBusy             = "busy"
	CodeSessionLost      = "session_lost"
	CodeTooLarge         = "too_large"
	CodeFileTooLarge     = "file_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeSessionLimit     = "session_limit"
	CodeRateLimited      = "rate_limited"
	CodeQuotaExceeded    = "quota_exceeded"
	CodeInternal         = "internal_error"
	CodeUnavailable      = "unavailable"
)

// codeStatus is the HTTP status of each error code.
var codeStatus = map[string]int{
	CodeBadRequest: 400, CodeBadPath: 400, CodeNotRegular: 400, CodeUnauthenticated: 401,
	CodeForbidden: 403, CodeLimitExceeded: 403, CodeNotFound: 404, CodeFileNotFound: 404,
	CodeMethodNotAllowed: 405, CodeBusy: 409, CodeSessionLost: 410, CodeTooLarge: 413,
	CodeFileTooLarge: 413, CodeUnsupportedMedia: 415, CodeSessionLimit: 429, CodeRateLimited: 429,
	CodeQuotaExceeded: 429, CodeInternal: 500, CodeUnavailable: 503,
}

// StatusOf returns the HTTP status of an error code (500 for an unknown one): for
// clients that meet an error in an event stream, whose status was already 200.
func StatusOf(code string) int {
	if s, ok := codeStatus[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is an API error: an HTTP status, a stable code and a message for the caller.
// Handlers return it (or any error, which apiError maps); the message must never hold
// host paths or Go internals.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when positive, is sent as the Retry-After header (whole seconds,
	// rounded up).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID identifies the request in the server's log; set on internal errors.
	RequestID string `json:"request_id,omitempty"`
}

func errorf(code, format string, args ...any) *Error {
	return &Error{Status: StatusOf(code), Code: code, Message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *Error {
	return errorf(CodeBadRequest, format, args...)
}

// apiError maps any error a handler met to the API error the caller sees. It is the
// one place where errors become statuses; internal says the error is moat's own
// failure, to be logged in full and hidden from the caller.
func apiError(err error) (e *Error, internal bool) {
	var ae *Error
	if errors.As(err, &ae) {
		return ae, false
	}
	if status, code, after := gate.Status(err); status != 0 {
		msg := clientMessage(err, nil)
		if status == http.StatusUnauthorized {
			msg = strings.TrimPrefix(msg, CodeUnauthenticated+": ")
		}
		return &Error{Status: status, Code: code, Message: msg, RetryAfter: after}, false
	}
	var lost *session.LostError
	var limit *session.LimitError
	switch {
	case errors.Is(err, engine.ErrBadRequest):
		return badRequest("%s", clientMessage(err, engine.ErrBadRequest)), false
	case errors.As(err, &lost):
		return errorf(CodeSessionLost, "session %s is lost: %s", lost.ID, filter.SanitizeError(lost.Reason)), false
	case errors.Is(err, session.ErrLost), errors.Is(err, box.ErrSessionLost):
		return errorf(CodeSessionLost, "%s", clientMessage(err, nil)), false
	case errors.As(err, &limit):
		return errorf(CodeSessionLimit, "%s", limit.Error()), false
	case errors.Is(err, session.ErrLimit):
		return errorf(CodeSessionLimit, "too many sessions"), false
	case errors.Is(err, session.ErrNotFound), errors.Is(err, box.ErrSessionClosed):
		return errorf(CodeNotFound, "no such session"), false
	case errors.Is(err, session.ErrBusy):
		return errorf(CodeBusy, "the session is running another call or file operation; a session serves one at a time"), false
	case errors.Is(err, session.ErrClosed):
		return errorf(CodeUnavailable, "the server is shutting down"), false
	case errors.Is(err, audit.ErrUnavailable):
		return errorf(CodeUnavailable, "%s", clientMessage(err, nil)), false
	case errors.Is(err, box.ErrFileNotFound):
		return errorf(CodeFileNotFound, "%s", clientMessage(err, nil)), false
	case errors.Is(err, box.ErrFileTooLarge):
		return errorf(CodeFileTooLarge, "%s", clientMessage(err, nil)), false
	case errors.Is(err, box.ErrBadPath):
		return errorf(CodeBadPath, "%s", clientMessage(err, nil)), false
	case errors.Is(err, box.ErrNotRegular):
		return errorf(CodeNotRegular, "%s", clientMessage(err, nil)), false
	}
	return errorf(CodeInternal, "internal error"), true
}

// clientMessage is err's text for a caller: without the sentinel's own prefix and
// sanitized of host paths and Go internals.
func clientMessage(err error, sentinel error) string {
	msg := err.Error()
	if sentinel != nil {
		msg = strings.TrimPrefix(msg, sentinel.Error()+": ")
	}
	return filter.SanitizeError(msg)
}

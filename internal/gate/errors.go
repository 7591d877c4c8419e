package gate

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

var (
	// ErrUnauthenticated means the request carries no valid token. It never says
	// whether the header was missing, malformed or held an unknown token: that
	// would help someone guessing. HTTP 401, kind "unauthenticated".
	ErrUnauthenticated = errors.New("unauthenticated: send a valid API token as Authorization: Bearer <token>")
	// ErrForbidden means the principal may not do what it asked: use a profile it
	// was not given, or touch another principal's session. Wrapped with the
	// detail. HTTP 403, kind "forbidden".
	ErrForbidden = errors.New("forbidden")
)

// Quota kinds (QuotaError.Kind).
const (
	QuotaConcurrent = "concurrent" // executions at once
	QuotaRate       = "rate"       // executions per unit of time
	QuotaSessions   = "sessions"   // live sessions; refused by the session store
)

// QuotaError means a principal is over a quota. HTTP 429 with a Retry-After
// header when RetryAfter is not zero; kind "rate_limited" for QuotaRate, else
// "quota_exceeded".
type QuotaError struct {
	Principal string
	// Kind is QuotaConcurrent, QuotaRate or QuotaSessions.
	Kind string
	// Limit is the quota: executions at once, the rate's burst, or live sessions.
	Limit int
	// Rate is the rate quota in tokens per second (QuotaRate only).
	Rate float64
	// RetryAfter is when trying again may succeed, in whole seconds: for QuotaRate
	// the time until the bucket holds a token; for QuotaConcurrent a hint (an
	// execution's end cannot be predicted); zero for QuotaSessions (a session
	// has to end first).
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	switch e.Kind {
	case QuotaRate:
		return fmt.Sprintf("rate limited: principal %q may start %s executions; retry in %v", e.Principal, formatRate(e.Rate, e.Limit), e.RetryAfter)
	case QuotaConcurrent:
		return fmt.Sprintf("quota exceeded: principal %q already runs %d executions at once, its concurrent quota", e.Principal, e.Limit)
	case QuotaSessions:
		return fmt.Sprintf("quota exceeded: principal %q already has %d live sessions, its sessions quota (end one first)", e.Principal, e.Limit)
	}
	return fmt.Sprintf("quota exceeded: principal %q: %s quota of %d", e.Principal, e.Kind, e.Limit)
}

// formatRate spells a rate as the config does: "60/m".
func formatRate(perSecond float64, burst int) string {
	for _, u := range []struct {
		name string
		secs float64
	}{{"s", 1}, {"m", 60}, {"h", 3600}} {
		if float64(burst)/perSecond == u.secs {
			return strconv.Itoa(burst) + "/" + u.name
		}
	}
	return strconv.FormatFloat(perSecond, 'g', 4, 64) + "/s"
}

// LimitError means a request asked for more than its principal may: a limit above
// the principal's MaxLimits, or a negative one. HTTP 403, kind "limit_exceeded".
type LimitError struct {
	Principal string
	// Field is the limit's config key: timeout, memory, cpus, pids, disk, tmp,
	// output_limit or open_files.
	Field string
	// Asked and Max are the request's value and the principal's cap, formatted as
	// in the config ("1GiB", "30s").
	Asked, Max string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("limit exceeded: %s: asked for %s, want a positive value of at most %s (the cap of principal %q)", e.Field, e.Asked, e.Max, e.Principal)
}

// Status maps an error of this package to its HTTP status code, the API's error
// kind and the Retry-After delay (zero for none):
//
//	ErrUnauthenticated          401 unauthenticated
//	ErrForbidden                403 forbidden
//	*LimitError                 403 limit_exceeded
//	*QuotaError, Kind rate      429 rate_limited    (RetryAfter)
//	*QuotaError, other kinds    429 quota_exceeded  (RetryAfter for concurrent)
//
// Wrapped errors are recognized. For any other error, code is 0: the caller maps
// it. A 401 response should carry `WWW-Authenticate: Bearer`.
func Status(err error) (code int, kind string, retryAfter time.Duration) {
	if qe, ok := errors.AsType[*QuotaError](err); ok {
		if qe.Kind == QuotaRate {
			return http.StatusTooManyRequests, "rate_limited", qe.RetryAfter
		}
		return http.StatusTooManyRequests, "quota_exceeded", qe.RetryAfter
	}
	if _, ok := errors.AsType[*LimitError](err); ok {
		return http.StatusForbidden, "limit_exceeded", 0
	}
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized, "unauthenticated", 0
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "forbidden", 0
	}
	return 0, "", 0
}

package api

import (
	"net/http"

	"github.com/moat-sandbox/moat/internal/gate"
)

// Gate decides who a request is from and whether it may run now; *gate.Gate
// implements it.
type Gate interface {
	// Authenticate returns the principal of r, or gate.ErrUnauthenticated.
	Authenticate(r *http.Request) (*gate.Principal, error)
	// Begin takes one execution slot of p's concurrency and rate quotas, or fails
	// with a *gate.QuotaError; the caller must call release when the execution
	// ends.
	Begin(p *gate.Principal) (release func(), err error)
}

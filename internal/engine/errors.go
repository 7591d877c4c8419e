package engine

import "errors"

// ErrBadRequest marks errors in what the caller asked for (unknown profile, bad limits):
// front ends map it to a usage error (CLI exit 2, HTTP 400), never to internal_error.
var ErrBadRequest = errors.New("bad request")

// Package gate is the first stage of the pipeline: who is asking, may they, and
// how much. It authenticates API requests, knows each principal's profiles and
// caps, and meters executions with quotas. It does no routing: the API layer
// calls it and maps its errors with Status.
//
//	g, err := gate.New(srv, log) // srv from config.Config.ResolveServer
//	...
//	p, err := g.Authenticate(r)              // 401
//	profile, err := p.PickProfile(req.Profile) // 403
//	err = p.CheckLimits(req.Limits)          // 403
//	release, err := g.Begin(p)               // 429
//	defer release()
//
// # Principals and keys
//
// A principal is a name with a key, a profile (used when a request names none),
// further profiles it may pick, quotas, and caps on the limits a request may ask
// for. With server.api_keys in the config, each entry is a principal; its key
// comes from an environment variable or is given as its SHA-256, and the Gate
// keeps only hashes. Without api_keys there is one principal, "default", with
// the config's profile (and no other), the default quotas, and the config's
// limits as caps: a request may ask for less than the defaults, not more; it is
// an admin (Principal.Admin: it reads every audit record), as the operator's own.
//
// # The generated token
//
// Without api_keys, New reads the token from DATA_DIR/token, or generates it on
// first start: "moat_" and 32 random bytes in base64url. The file is written
// with mode 0600 to a temporary name and hard-linked into place, so it appears
// complete or not at all and two servers starting at once end up with one token.
// The data directory is created with mode 0700.
//
// A token file is refused, with an error saying how to fix it, when it is a
// symbolic link (opened with O_NOFOLLOW, so a link planted in the directory
// cannot point moat at another file), not a regular file, readable or writable
// by group or others, or owned by another user; so is a data directory writable
// by group or others. `moat serve` prints TokenPath when Generated. Clients get
// the token with ReadToken: $MOAT_TOKEN, else the file, with the same checks.
//
// # Authentication
//
// A request carries `Authorization: Bearer <token>`. Authenticate hashes the
// token with SHA-256 and compares the hash with every key's using
// crypto/subtle, going through all keys every time; comparing hashes rather than
// tokens also makes the time independent of the token's length. Every failure
// (no header, two headers, another scheme, an unknown token) is the same
// ErrUnauthenticated, so a caller learns nothing about why. Tokens have 256 bits
// (configured keys at least 16 characters), so the Gate does not slow down
// guessing.
//
// # Quotas
//
// Begin takes one of the principal's concurrent slots and one token from its
// rate bucket before an execution, and the returned release gives the slot
// back. The bucket holds Quotas.Burst tokens, starts full, and refills at
// Quotas.Rate per second; when empty, the *QuotaError's RetryAfter is the time
// until the next token, rounded up to whole seconds. Sessions are counted by the
// session store against Quotas.Sessions, refusing with a *QuotaError of kind
// QuotaSessions.
//
// # Errors
//
// Status maps the errors to HTTP: ErrUnauthenticated 401, ErrForbidden and
// *LimitError 403, *QuotaError 429 (with Retry-After). For another principal's
// session, prefer answering 404 as for a session that does not exist, so that
// session ids cannot be probed.
package gate

package gate

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/config"
)

// DefaultPrincipal names the principal of the generated token.
const DefaultPrincipal = "default"

// Gate authenticates requests and meters principals. It is safe for concurrent
// use.
type Gate struct {
	log       *slog.Logger
	now       func() time.Time
	keys      []key // in config order; every hash distinct
	tokenPath string
	generated bool

	mu sync.Mutex
	// +checklocks:mu
	use map[string]*usage // by principal name
}

// key is one accepted token: the SHA-256 of the token and its principal.
type key struct {
	sum [sha256.Size]byte
	p   Principal
}

// usage is what one principal is using now.
type usage struct {
	running int       // executions begun and not released
	tokens  float64   // in the rate bucket, up to Quotas.Burst
	last    time.Time // when tokens was computed; zero: the bucket is full
}

// Option configures a Gate.
type Option func(*Gate)

// WithClock makes the Gate read the time from now instead of time.Now (for tests
// of the rate quota).
func WithClock(now func() time.Time) Option {
	return func(g *Gate) { g.now = now }
}

// New returns a Gate for the server settings srv. With srv.Keys, the principals
// are those keys. Without, New reads the token file in srv.DataDir, or generates
// one there on first start (see the package doc), for the principal "default"
// with srv.Profile, srv.Quotas and srv.Limits as its caps. New logs the
// principals and where the token file is, never a token.
func New(srv config.ResolvedServer, log *slog.Logger, opts ...Option) (*Gate, error) {
	g := &Gate{log: log, now: time.Now, use: map[string]*usage{}}
	for _, o := range opts {
		o(g)
	}
	if len(srv.Keys) > 0 {
		for _, k := range srv.Keys {
			if k.SHA256 == ([sha256.Size]byte{}) {
				return nil, fmt.Errorf("gate: principal %q has no key", k.Principal)
			}
			for _, o := range g.keys {
				if o.p.Name == k.Principal || o.sum == k.SHA256 {
					return nil, fmt.Errorf("gate: principals %q and %q share a name or a key", o.p.Name, k.Principal)
				}
			}
			p, err := principal(k.Principal, k.Profile, k.Profiles, k.Quotas, k.MaxLimits)
			if err != nil {
				return nil, fmt.Errorf("gate: %w", err)
			}
			p.Admin = k.Admin
			g.keys = append(g.keys, key{sum: k.SHA256, p: p})
			g.use[p.Name] = &usage{}
			log.Info("gate: principal", "name", p.Name, "profile", p.Profile, "profiles", p.Profiles, "admin", p.Admin)
		}
		return g, nil
	}

	if srv.DataDir == "" {
		return nil, errors.New("gate: no data directory for the API token")
	}
	token, path, generated, err := loadOrCreateToken(srv.DataDir)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	p, err := principal(DefaultPrincipal, srv.Profile, nil, srv.Quotas, srv.Limits)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	p.Admin = true // the only principal: the operator's own token
	g.keys = []key{{sum: sha256.Sum256([]byte(token)), p: p}}
	g.use[p.Name] = &usage{}
	g.tokenPath, g.generated = path, generated
	if generated {
		log.Info("gate: generated an API token", "path", path, "principal", p.Name, "profile", p.Profile)
	} else {
		log.Info("gate: using the API token", "path", path, "principal", p.Name, "profile", p.Profile)
	}
	return g, nil
}

// TokenPath returns the path of the token file, or "" when the config has API
// keys.
func (g *Gate) TokenPath() string { return g.tokenPath }

// Generated reports whether New generated the token (this is the first start
// with this data directory), so that `moat serve` can say where it is.
func (g *Gate) Generated() bool { return g.generated }

// Lookup returns the principal named name, for front ends that authenticate
// their caller by other means (a local stdio client).
func (g *Gate) Lookup(name string) (*Principal, bool) {
	for i := range g.keys {
		if g.keys[i].p.Name == name {
			return g.keys[i].p.clone(), true
		}
	}
	return nil, false
}

// Authenticate returns the principal whose token r carries in its Authorization
// header ("Bearer <token>", the scheme in any case). Anything else, a missing or
// repeated header included, is ErrUnauthenticated, whatever the reason.
//
// The token is hashed and the hash compared with every key's in constant time,
// all of them every time, so the time taken does not depend on which key
// matched, or on how much of one did.
func (g *Gate) Authenticate(r *http.Request) (*Principal, error) {
	token, ok := bearer(r.Header.Values("Authorization"))
	if !ok {
		g.log.Debug("gate: no bearer token", "remote", r.RemoteAddr)
		return nil, ErrUnauthenticated
	}
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range g.keys {
		eq := subtle.ConstantTimeCompare(sum[:], g.keys[i].sum[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		g.log.Debug("gate: unknown token", "remote", r.RemoteAddr)
		return nil, ErrUnauthenticated
	}
	return g.keys[match].p.clone(), nil
}

// bearer extracts the token from the values of the Authorization header.
func bearer(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !validToken(token) {
		return "", false
	}
	return token, true
}

// validToken reports whether s can be a token: printable ASCII without spaces.
func validToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f })
}

// Begin takes one of p's concurrent execution slots and one token of its rate
// bucket, or neither: a *QuotaError says which quota is exhausted (the
// concurrent one is checked first, and its refusal spends no rate token). The
// caller must call release when the execution ends; calling it again does
// nothing.
func (g *Gate) Begin(p *Principal) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	u, q, ok := g.usage(p.Name)
	if !ok {
		return nil, fmt.Errorf("gate: unknown principal %q", p.Name)
	}
	if u.running >= q.Concurrent {
		return nil, &QuotaError{Principal: p.Name, Kind: QuotaConcurrent, Limit: q.Concurrent, RetryAfter: time.Second}
	}
	now := g.now()
	u.refill(now, q)
	if u.tokens < 1-tokenSlack {
		wait := time.Duration(math.Ceil((1-tokenSlack-u.tokens)/q.Rate)) * time.Second
		return nil, &QuotaError{Principal: p.Name, Kind: QuotaRate, Limit: q.Burst, Rate: q.Rate, RetryAfter: max(wait, time.Second)}
	}
	u.tokens--
	u.running++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			u.running--
		})
	}, nil
}

// usage returns the usage and quotas of the principal name. The quotas are the
// Gate's, not those of a Principal a caller may have changed.
//
// Preconditions: g.mu is held.
func (g *Gate) usage(name string) (*usage, Quotas, bool) {
	u, ok := g.use[name]
	if !ok {
		return nil, Quotas{}, false
	}
	for i := range g.keys {
		if g.keys[i].p.Name == name {
			return u, g.keys[i].p.Quotas, true
		}
	}
	return nil, Quotas{}, false
}

// tokenSlack absorbs float rounding, so that a client that waits exactly
// RetryAfter finds its token.
const tokenSlack = 1e-9

// refill adds the tokens earned since u.last, up to the burst.
func (u *usage) refill(now time.Time, q Quotas) {
	if u.last.IsZero() {
		u.tokens, u.last = float64(q.Burst), now
		return
	}
	if elapsed := now.Sub(u.last); elapsed > 0 {
		u.tokens = min(float64(q.Burst), u.tokens+elapsed.Seconds()*q.Rate)
		u.last = now
	}
}

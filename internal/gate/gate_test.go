package gate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
)

// request returns a request with the Authorization header values given.
func request(auth ...string) *http.Request {
	r := httptest.NewRequest("POST", "/v1/run", nil)
	for _, a := range auth {
		r.Header.Add("Authorization", a)
	}
	return r
}

const (
	keyAlice = "alice-secret-key-0123456789"
	keyBob   = "bob-secret-key-0123456789"
)

// keyed returns a Gate over a config with two principals, alice (key from the
// environment) and bob (key as SHA-256), and the given clock.
func keyed(t *testing.T, now func() time.Time) *Gate {
	t.Helper()
	sum := sha256.Sum256([]byte(keyBob))
	c, err := config.Parse("m.yaml", []byte(`
limits:
  memory: 128MiB
profile: strict
server:
  api_keys:
    - principal: alice
      key_env: KEY_ALICE
      profile: default
      profiles: [open]
      quotas: {concurrent: 2, sessions: 3, rate: 2/s}
      max_limits: {timeout: 1m, cpus: 2}
      admin: true
    - principal: bob
      key_sha256: `+hex.EncodeToString(sum[:])+`
`))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.ResolveServer(func(name string) (string, bool) {
		if name == "KEY_ALICE" {
			return keyAlice, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	var opts []Option
	if now != nil {
		opts = append(opts, WithClock(now))
	}
	g, err := New(srv, discard, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestConfiguredKeys(t *testing.T) {
	g := keyed(t, nil)
	if g.TokenPath() != "" || g.Generated() {
		t.Errorf("TokenPath() = %q, Generated() = %v with keys configured", g.TokenPath(), g.Generated())
	}
	alice, err := g.Authenticate(request("Bearer " + keyAlice))
	if err != nil {
		t.Fatal(err)
	}
	want := &Principal{
		Name: "alice", Profile: "default", Profiles: []string{"open"},
		Quotas:    Quotas{Concurrent: 2, Sessions: 3, Rate: 2, Burst: 2},
		MaxLimits: box.DefaultLimits.Merge(box.Limits{Timeout: time.Minute, CPUs: 2, Memory: 128 << 20}),
		Admin:     true,
	}
	if !reflect.DeepEqual(alice, want) {
		t.Errorf("alice =\n%+v\nwant\n%+v", alice, want)
	}
	bob, err := g.Authenticate(request("Bearer " + keyBob))
	if err != nil {
		t.Fatal(err)
	}
	want = &Principal{
		Name: "bob", Profile: "strict", // the config's profile
		Quotas:    Quotas{Concurrent: 4, Sessions: 8, Rate: 1, Burst: 60},
		MaxLimits: box.DefaultLimits.Merge(box.Limits{Memory: 128 << 20}),
	}
	if !reflect.DeepEqual(bob, want) {
		t.Errorf("bob =\n%+v\nwant\n%+v", bob, want)
	}
	// Principals are copies.
	alice.Profiles[0] = "strict"
	alice.Quotas.Concurrent = 100
	if again, _ := g.Lookup("alice"); again.Profiles[0] != "open" || again.Quotas.Concurrent != 2 {
		t.Error("changing a returned Principal changed the gate's")
	}
	if _, ok := g.Lookup("carol"); ok {
		t.Error("Lookup found an unknown principal")
	}
}

func TestAuthenticate(t *testing.T) {
	g := keyed(t, nil)
	tests := []struct {
		name    string
		headers []string
		want    string // principal, or "" for ErrUnauthenticated
	}{
		{"alice", []string{"Bearer " + keyAlice}, "alice"},
		{"bob", []string{"Bearer " + keyBob}, "bob"},
		{"scheme in lower case", []string{"bearer " + keyBob}, "bob"},
		{"scheme in upper case", []string{"BEARER " + keyAlice}, "alice"},
		{"missing header", nil, ""},
		{"empty header", []string{""}, ""},
		{"wrong token", []string{"Bearer " + keyAlice + "x"}, ""},
		{"prefix of a token", []string{"Bearer " + keyAlice[:10]}, ""},
		{"hash of a token", []string{"Bearer " + hexSum(keyBob)}, ""},
		{"no token", []string{"Bearer"}, ""},
		{"empty token", []string{"Bearer "}, ""},
		{"two spaces", []string{"Bearer  " + keyAlice}, ""},
		{"trailing space", []string{"Bearer " + keyAlice + " "}, ""},
		{"basic scheme", []string{"Basic " + keyAlice}, ""},
		{"token without scheme", []string{keyAlice}, ""},
		{"two headers", []string{"Bearer " + keyAlice, "Bearer " + keyAlice}, ""},
		{"two tokens", []string{"Bearer " + keyAlice + "," + keyBob}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := g.Authenticate(request(tc.headers...))
			if tc.want == "" {
				if err != ErrUnauthenticated || p != nil {
					t.Fatalf("Authenticate = %+v, %v; want ErrUnauthenticated itself", p, err)
				}
				return
			}
			if err != nil || p.Name != tc.want {
				t.Fatalf("Authenticate = %+v, %v; want %s", p, err, tc.want)
			}
		})
	}
}

func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestNewErrors(t *testing.T) {
	quotas := config.ResolvedQuotas{Concurrent: 1, Sessions: 1, Rate: 1, Burst: 1}
	k := func(name, key string) config.ResolvedKey {
		return config.ResolvedKey{Principal: name, SHA256: sha256.Sum256([]byte(key)), Profile: "default", Quotas: quotas}
	}
	noHash := k("a", "x")
	noHash.SHA256 = [32]byte{}
	noQuota := k("a", "x")
	noQuota.Quotas.Rate = 0
	noProfile := k("a", "x")
	noProfile.Profile = ""
	tests := []struct {
		name string
		srv  config.ResolvedServer
		want string
	}{
		{"key without hash", config.ResolvedServer{Keys: []config.ResolvedKey{noHash}}, `principal "a" has no key`},
		{"same name", config.ResolvedServer{Keys: []config.ResolvedKey{k("a", "x"), k("a", "y")}}, `principals "a" and "a" share a name or a key`},
		{"same key", config.ResolvedServer{Keys: []config.ResolvedKey{k("a", "x"), k("b", "x")}}, `principals "a" and "b" share a name or a key`},
		{"zero rate", config.ResolvedServer{Keys: []config.ResolvedKey{noQuota}}, `principal "a": quotas`},
		{"no profile", config.ResolvedServer{Keys: []config.ResolvedKey{noProfile}}, `principal "a": no profile`},
		{"no data directory", config.ResolvedServer{Profile: "default", Quotas: quotas}, "no data directory for the API token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(tc.srv, discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error containing %q", g, err, tc.want)
			}
		})
	}
}

// clock is a fake clock for the rate quota.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// quotaGate returns a Gate with one principal "p" with the given quotas.
func quotaGate(t *testing.T, q config.ResolvedQuotas, now func() time.Time) (*Gate, *Principal) {
	t.Helper()
	srv := config.ResolvedServer{Keys: []config.ResolvedKey{{Principal: "p", SHA256: sha256.Sum256([]byte("k")), Profile: "default", Quotas: q}}}
	g, err := New(srv, discard, WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := g.Lookup("p")
	return g, p
}

func TestConcurrentQuota(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	g, p := quotaGate(t, config.ResolvedQuotas{Concurrent: 3, Sessions: 1, Rate: 1000, Burst: 1000}, c.now)
	var releases []func()
	for i := range 3 {
		release, err := g.Begin(p)
		if err != nil {
			t.Fatalf("Begin %d: %v", i, err)
		}
		releases = append(releases, release)
	}
	_, err := g.Begin(p)
	qe, ok := errors.AsType[*QuotaError](err)
	if !ok || qe.Kind != QuotaConcurrent || qe.Limit != 3 || qe.Principal != "p" || qe.RetryAfter != time.Second {
		t.Fatalf("Begin over the quota = %v, want a concurrent *QuotaError", err)
	}
	if code, kind, ra := Status(err); code != 429 || kind != "quota_exceeded" || ra != time.Second {
		t.Errorf("Status = %d, %s, %v", code, kind, ra)
	}
	if want := `quota exceeded: principal "p" already runs 3 executions at once, its concurrent quota`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	// Releasing twice frees one slot, not two.
	releases[0]()
	releases[0]()
	release, err := g.Begin(p)
	if err != nil {
		t.Fatalf("Begin after a release: %v", err)
	}
	if _, err := g.Begin(p); err == nil {
		t.Fatal("a double release freed two slots")
	}
	release()
	releases[1]()
	releases[2]()
	for i := range 3 {
		if _, err := g.Begin(p); err != nil {
			t.Fatalf("Begin %d after releasing all: %v", i, err)
		}
	}

	// Quotas are the gate's: a caller cannot raise them on its copy.
	p.Quotas.Concurrent = 100
	if _, err := g.Begin(p); err == nil {
		t.Error("a changed Principal raised its own quota")
	}
	if _, err := g.Begin(&Principal{Name: "nobody"}); err == nil || errors.As(err, new(*QuotaError)) {
		t.Errorf("Begin for an unknown principal = %v, want a plain error", err)
	}
}

func TestRateQuota(t *testing.T) {
	type step struct {
		advance time.Duration
		ok      bool
		retry   time.Duration // when refused
	}
	tests := []struct {
		name  string
		rate  string
		steps []step
	}{
		{"burst then refusal then refill", "3/s", []step{
			{0, true, 0}, {0, true, 0}, {0, true, 0}, // the burst
			{0, false, time.Second}, // ceil(1/3 s)
			{time.Second / 3, true, 0},
			{0, false, time.Second},
		}},
		{"60/m", "60/m", append(repeat(step{0, true, 0}, 60),
			step{0, false, time.Second},
			step{999 * time.Millisecond, false, time.Second}, // at least 1s
			step{time.Millisecond, true, 0},
			step{0, false, time.Second},
		)},
		{"slow rate rounds up", "2/m", []step{
			{0, true, 0}, {0, true, 0},
			{0, false, 30 * time.Second},
			{10 * time.Second, false, 20 * time.Second},
			{19500 * time.Millisecond, false, time.Second}, // 0.5s left, rounded up
			{500 * time.Millisecond, true, 0},
		}},
		{"waiting RetryAfter suffices", "30/h", append(repeat(step{0, true, 0}, 30),
			step{0, false, 120 * time.Second},
			step{120 * time.Second, true, 0},
		)},
		{"refill stops at the burst", "2/s", []step{
			{time.Hour, true, 0}, {0, true, 0},
			{0, false, time.Second},
		}},
		{"a clock going back earns nothing", "1/s", []step{
			{0, true, 0},
			{-time.Hour, false, time.Second},
			{time.Hour, false, time.Second},
			{time.Second, true, 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rate, burst, err := config.ParseRate(tc.rate)
			if err != nil {
				t.Fatal(err)
			}
			c := &clock{t: time.Unix(1e9, 0)}
			g, p := quotaGate(t, config.ResolvedQuotas{Concurrent: 1000, Sessions: 1, Rate: rate, Burst: burst}, c.now)
			for i, s := range tc.steps {
				c.advance(s.advance)
				release, err := g.Begin(p)
				if s.ok {
					if err != nil {
						t.Fatalf("step %d: Begin = %v, want success", i, err)
					}
					release()
					continue
				}
				qe, ok := errors.AsType[*QuotaError](err)
				if !ok || qe.Kind != QuotaRate || qe.RetryAfter != s.retry || qe.Limit != burst {
					t.Fatalf("step %d: Begin = %v (%+v), want a rate *QuotaError with RetryAfter %v", i, err, qe, s.retry)
				}
				if code, kind, ra := Status(err); code != 429 || kind != "rate_limited" || ra != s.retry {
					t.Errorf("step %d: Status = %d, %s, %v", i, code, kind, ra)
				}
				if !strings.Contains(err.Error(), "may start "+tc.rate+" executions") {
					t.Errorf("step %d: error %q does not name the rate %s", i, err, tc.rate)
				}
			}
		})
	}
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestConcurrentRefusalSpendsNoRateToken(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	g, p := quotaGate(t, config.ResolvedQuotas{Concurrent: 1, Sessions: 1, Rate: 1.0 / 60, Burst: 2}, c.now)
	release, err := g.Begin(p)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := g.Begin(p); !strings.Contains(fmt.Sprint(err), "concurrent quota") {
			t.Fatalf("Begin = %v, want the concurrent quota", err)
		}
	}
	release()
	if _, err := g.Begin(p); err != nil {
		t.Errorf("the second token was spent by refusals: %v", err)
	}
}

func TestProfiles(t *testing.T) {
	p := &Principal{Name: "alice", Profile: "default", Profiles: []string{"strict", "web"}}
	tests := []struct {
		requested string
		allowed   bool
		picked    string
	}{
		{"", true, "default"},
		{"default", true, "default"},
		{"strict", true, "strict"},
		{"web", true, "web"},
		{"open", false, ""},
		{"Strict", false, ""},
	}
	for _, tc := range tests {
		t.Run("profile "+tc.requested, func(t *testing.T) {
			if got := p.AllowsProfile(tc.requested); got != tc.allowed {
				t.Errorf("AllowsProfile(%q) = %v, want %v", tc.requested, got, tc.allowed)
			}
			got, err := p.PickProfile(tc.requested)
			if tc.allowed {
				if err != nil || got != tc.picked {
					t.Errorf("PickProfile(%q) = %q, %v; want %q", tc.requested, got, err, tc.picked)
				}
				return
			}
			want := fmt.Sprintf(`forbidden: principal "alice" may not use profile %q (allowed: default, strict, web)`, tc.requested)
			if !errors.Is(err, ErrForbidden) || err.Error() != want {
				t.Errorf("PickProfile(%q) = %q, %v; want %s", tc.requested, got, err, want)
			}
		})
	}
	// The principal of a generated token has only its own profile.
	only := &Principal{Name: "default", Profile: "strict"}
	if !only.AllowsProfile("strict") || only.AllowsProfile("default") || only.AllowsProfile("open") {
		t.Error("a principal without Profiles may use another profile")
	}
}

func TestCheckLimits(t *testing.T) {
	p := &Principal{Name: "alice", MaxLimits: box.DefaultLimits.Merge(box.Limits{Timeout: time.Minute, Memory: 512 << 20, CPUs: 2})}
	tests := []struct {
		name              string
		req               box.Limits
		field, asked, max string // the *LimitError, or field "" for none
	}{
		{"nothing asked", box.Limits{}, "", "", ""},
		{"at the caps", box.Limits{Timeout: time.Minute, Memory: 512 << 20, CPUs: 2, Pids: 64, Disk: 100 << 20, Tmp: 64 << 20, Output: 1 << 20, OpenFiles: 1024}, "", "", ""},
		{"less", box.Limits{Timeout: time.Second, Memory: 16 << 20, CPUs: 0.5}, "", "", ""},
		{"timeout", box.Limits{Timeout: time.Minute + 1}, "timeout", "1m0.000000001s", "1m0s"},
		{"memory", box.Limits{Memory: 1 << 30}, "memory", "1GiB", "512MiB"},
		{"odd memory", box.Limits{Memory: 512<<20 + 1}, "memory", "536870913B", "512MiB"},
		{"cpus", box.Limits{CPUs: 2.5}, "cpus", "2.5", "2"},
		{"pids (from the defaults)", box.Limits{Pids: 65}, "pids", "65", "64"},
		{"disk", box.Limits{Disk: 1 << 30}, "disk", "1GiB", "100MiB"},
		{"tmp", box.Limits{Tmp: 65 << 20}, "tmp", "65MiB", "64MiB"},
		{"output", box.Limits{Output: 2 << 20}, "output_limit", "2MiB", "1MiB"},
		{"open files", box.Limits{OpenFiles: 1 << 20}, "open_files", "1048576", "1024"},
		{"negative memory", box.Limits{Memory: -1}, "memory", "-1B", "512MiB"},
		{"negative timeout", box.Limits{Timeout: -time.Second}, "timeout", "-1s", "1m0s"},
		{"negative cpus", box.Limits{CPUs: -1}, "cpus", "-1", "2"},
		{"first field wins", box.Limits{Timeout: time.Hour, Memory: 1 << 40}, "timeout", "1h0m0s", "1m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.CheckLimits(tc.req)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("CheckLimits = %v, want nil", err)
				}
				return
			}
			le, ok := errors.AsType[*LimitError](err)
			if !ok {
				t.Fatalf("CheckLimits = %v, want a *LimitError", err)
			}
			if le.Field != tc.field || le.Asked != tc.asked || le.Max != tc.max || le.Principal != "alice" {
				t.Errorf("LimitError %+v, want field %s, asked %s, max %s", le, tc.field, tc.asked, tc.max)
			}
			want := fmt.Sprintf(`limit exceeded: %s: asked for %s, want a positive value of at most %s (the cap of principal "alice")`, tc.field, tc.asked, tc.max)
			if err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
	// NaN is never within a cap.
	nan := 0.0
	nan /= nan
	if err := p.CheckLimits(box.Limits{CPUs: nan}); err == nil {
		t.Error("CheckLimits accepted NaN cpus")
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		code  int
		kind  string
		retry time.Duration
	}{
		{"unauthenticated", ErrUnauthenticated, 401, "unauthenticated", 0},
		{"forbidden, wrapped", fmt.Errorf("%w: not yours", ErrForbidden), 403, "forbidden", 0},
		{"limit", &LimitError{Field: "memory"}, 403, "limit_exceeded", 0},
		{"rate, wrapped", fmt.Errorf("run: %w", &QuotaError{Kind: QuotaRate, RetryAfter: 3 * time.Second}), 429, "rate_limited", 3 * time.Second},
		{"concurrent", &QuotaError{Kind: QuotaConcurrent, RetryAfter: time.Second}, 429, "quota_exceeded", time.Second},
		{"sessions", &QuotaError{Kind: QuotaSessions, Limit: 8}, 429, "quota_exceeded", 0},
		{"other error", errors.New("disk full"), 0, "", 0},
		{"nil", nil, 0, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, kind, retry := Status(tc.err)
			if code != tc.code || kind != tc.kind || retry != tc.retry {
				t.Errorf("Status = %d, %q, %v; want %d, %q, %v", code, kind, retry, tc.code, tc.kind, tc.retry)
			}
		})
	}
}

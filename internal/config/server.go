package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server defaults, used for every setting the file leaves out.
const (
	DefaultListen             = "127.0.0.1:7420"
	DefaultMaxBody            = 16 << 20
	DefaultMaxFile            = 64 << 20
	DefaultShutdownGrace      = 30 * time.Second
	DefaultSessionIdleTTL     = 10 * time.Minute
	DefaultSessionMaxLifetime = time.Hour
	DefaultMaxSessions        = 64
	DefaultConcurrent         = 4
	DefaultSessionsQuota      = 8
	DefaultRate               = "60/m"
	// SystemDataDir is the data directory when moat runs as root.
	SystemDataDir = "/var/lib/moat"
	// MinKeyLength is the shortest API key accepted from key_env.
	MinKeyLength = 16
	// MaxQuota bounds the quotas and server.sessions.max_total.
	MaxQuota = 1 << 20
)

// Server configures `moat serve`: where it listens, where it keeps its state, how
// large requests may be, how long sessions live, and who may call it. The zero
// value listens on DefaultListen, and without APIKeys the gate generates one token
// (see package gate).
type Server struct {
	// Listen is the TCP address to listen on, host:port; DefaultListen when empty.
	// A non-loopback address is a warning: moat serves plain HTTP.
	Listen string `yaml:"listen"`
	// DataDir holds moat's state (the generated token, sessions); an absolute path.
	// Empty means DefaultDataDir().
	DataDir string `yaml:"data_dir"`
	// MaxBody caps a request body, a size; DefaultMaxBody when empty.
	MaxBody string `yaml:"max_body"`
	// MaxFile caps one uploaded or downloaded file, a size; DefaultMaxFile when empty.
	MaxFile string `yaml:"max_file"`
	// ShutdownGrace is how long in-flight executions may run on after SIGTERM, a
	// duration; DefaultShutdownGrace when empty.
	ShutdownGrace string `yaml:"shutdown_grace"`
	// Sessions bounds the lifetime and number of sessions.
	Sessions Sessions `yaml:"sessions"`
	// APIKeys are the principals allowed to call the server, one key each. Without
	// any, the gate generates one token for the principal "default".
	APIKeys []APIKey `yaml:"api_keys"`
	// Pool keeps Python boxes ready for one-shot executions (the warm pool).
	Pool Pool `yaml:"pool"`
	// MetricsPublic serves /metrics without authentication (for a Prometheus that
	// holds no key). A warning when listen is not a loopback address. Otherwise any
	// principal's key may read them; they name no principal.
	MetricsPublic bool `yaml:"metrics_public"`
}

// Pool configures the warm pool: boxes made ahead of time, each serving exactly one
// one-shot execution.
type Pool struct {
	// Size is how many ready boxes are kept per (language, profile, limits), at most
	// MaxPoolSize; DefaultPoolSize when unset. "size: 0" turns the pool off: every
	// execution then starts its box when it arrives.
	Size int `yaml:"size"`
	// MaxKeys bounds the (language, profile, limits) combinations kept warm;
	// DefaultPoolKeys when 0.
	MaxKeys int `yaml:"max_keys"`
	// Refills bounds the boxes made at once in the background; DefaultPoolRefills
	// when 0.
	Refills int `yaml:"refills"`
	// IdleTTL drains a combination unused for this long, a duration;
	// DefaultPoolIdleTTL when empty.
	IdleTTL string `yaml:"idle_ttl"`
	// Warm names the profiles whose boxes are made at start; the config's profile
	// when empty.
	Warm []string `yaml:"warm"`
	// Zygote, true when unset, forks the pool's Python boxes from a preloaded
	// interpreter per profile (the native backend as root); false starts each box's
	// interpreter, as boxes without a pool do.
	Zygote bool `yaml:"zygote"`
}

// Warm pool defaults and bounds.
const (
	DefaultPoolSize    = 2
	DefaultPoolKeys    = 4
	DefaultPoolRefills = 2
	DefaultPoolIdleTTL = 5 * time.Minute
	MaxPoolSize        = 64
)

// ResolvedPool is Pool parsed, with its defaults applied.
type ResolvedPool struct {
	Enabled               bool
	Size, MaxKeys, Refill int
	IdleTTL               time.Duration
	Warm                  []string
	Zygote                bool
}

// Sessions bounds sessions server-wide.
type Sessions struct {
	// IdleTTL ends a session unused for this long, a duration; DefaultSessionIdleTTL
	// when empty. It may not exceed MaxLifetime.
	IdleTTL string `yaml:"idle_ttl"`
	// MaxLifetime ends a session this long after it began, however busy; a duration,
	// DefaultSessionMaxLifetime when empty.
	MaxLifetime string `yaml:"max_lifetime"`
	// MaxTotal caps the live sessions of all principals together; DefaultMaxSessions
	// when 0.
	MaxTotal int `yaml:"max_total"`
}

// APIKey is one principal: a name, its key, and what it may do.
type APIKey struct {
	// Principal names who holds the key, in audit records and errors; [a-z0-9_-]+,
	// unique.
	Principal string `yaml:"principal"`
	// KeyEnv names the environment variable that holds the key. It is read by
	// ResolveServer, never logged, and must hold at least MinKeyLength printable
	// characters without spaces. Exactly one of KeyEnv and KeySHA256 is set.
	KeyEnv string `yaml:"key_env"`
	// KeySHA256 is the hex SHA-256 of the key, for keys moat should not see at rest.
	KeySHA256 string `yaml:"key_sha256"`
	// Profile is the principal's profile, used when a request names none; empty
	// means the config's profile. It must exist.
	Profile string `yaml:"profile"`
	// Profiles are further profiles the principal's requests may pick.
	Profiles []string `yaml:"profiles"`
	// Quotas bound the principal's use of the server.
	Quotas Quotas `yaml:"quotas"`
	// Admin lets the principal read every principal's audit records (GET
	// /v1/audit); others read only their own.
	Admin bool `yaml:"admin"`
	// MaxLimits cap the limits a request of this principal may ask for (the keys of
	// Limits). An unset key caps at the config's limits, and below that at the
	// engine's defaults: a request may ask for less than the defaults, not more.
	MaxLimits Limits `yaml:"max_limits"`
}

// Quotas bound one principal.
type Quotas struct {
	// Concurrent is how many executions may run at once; DefaultConcurrent when 0.
	Concurrent int `yaml:"concurrent"`
	// Sessions is how many sessions may be live at once; DefaultSessionsQuota when 0.
	Sessions int `yaml:"sessions"`
	// Rate is a token bucket for executions, "N/s", "N/m" or "N/h": N executions
	// per second, minute or hour, in bursts of up to N; DefaultRate when empty.
	Rate string `yaml:"rate"`
}

// ResolvedServer is Server parsed, with its defaults applied and its keys read.
type ResolvedServer struct {
	Listen        string
	DataDir       string // absolute
	MaxBody       int64  // bytes
	MaxFile       int64  // bytes
	ShutdownGrace time.Duration
	Sessions      ResolvedSessions
	Pool          ResolvedPool
	// Keys are the configured principals; empty when the gate is to generate a token.
	Keys []ResolvedKey
	// Profile, Quotas and Limits are the principal "default" of a generated token:
	// the config's profile, the default quotas, and the config's limits as caps.
	Profile string
	Quotas  ResolvedQuotas
	Limits  ResolvedLimits
}

// ResolvedSessions is Sessions parsed, with its defaults applied.
type ResolvedSessions struct {
	IdleTTL     time.Duration
	MaxLifetime time.Duration
	MaxTotal    int
}

// ResolvedKey is an APIKey ready for the gate. It holds the key's SHA-256, never
// the key.
type ResolvedKey struct {
	Principal string
	SHA256    [sha256.Size]byte
	Profile   string   // never empty
	Profiles  []string // further profiles the principal may pick
	Quotas    ResolvedQuotas
	// Admin: the principal reads every principal's audit records.
	Admin bool
	// MaxLimits are max_limits laid over the config's limits; a zero field is
	// unset in both, and the gate caps it at the engine's defaults.
	MaxLimits ResolvedLimits
}

// ResolvedQuotas are Quotas parsed, with their defaults applied.
type ResolvedQuotas struct {
	Concurrent int
	Sessions   int
	Rate       float64 // tokens per second
	Burst      int
}

// DefaultDataDir returns where moat keeps its state when server.data_dir is unset:
// SystemDataDir for root; otherwise $XDG_DATA_HOME/moat when XDG_DATA_HOME is an
// absolute path, else ~/.local/share/moat. It returns "" when none can be found
// (no home directory).
func DefaultDataDir() string {
	home, _ := os.UserHomeDir()
	return dataDirFor(os.Geteuid(), os.Getenv("XDG_DATA_HOME"), home)
}

// dataDirFor is DefaultDataDir for the given user id, XDG_DATA_HOME and home.
func dataDirFor(euid int, xdgDataHome, home string) string {
	switch {
	case euid == 0:
		return SystemDataDir
	case filepath.IsAbs(xdgDataHome):
		return filepath.Join(xdgDataHome, "moat")
	case filepath.IsAbs(home):
		return filepath.Join(home, ".local", "share", "moat")
	}
	return ""
}

// ResolveServer returns the server settings ready for use. It reads each key_env
// variable with lookupEnv (os.LookupEnv when nil) and keeps only the key's hash.
// Besides the problems Validate reports, it is an error for a key_env variable
// to be unset or to hold a short or malformed key, for two principals to have the
// same key, and for data_dir to be unset with no DefaultDataDir.
func (c *Config) ResolveServer(lookupEnv func(string) (string, bool)) (ResolvedServer, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	ps := &problems{file: c.file, lines: c.lines}
	r := c.checkServer(ps, func(p string) bool { return c.set[p] }, lookupEnv)
	if r.DataDir == "" {
		r.DataDir = DefaultDataDir()
		if r.DataDir == "" {
			ps.add("server.data_dir", "no default data directory: no home directory (set server.data_dir or XDG_DATA_HOME)")
		}
	}
	if err := ps.err(); err != nil {
		return ResolvedServer{}, err
	}
	return r, nil
}

var (
	principalRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_-]{1,64}$`) })
	envNameRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	hostRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`) })
	rateRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9]+)/([smh])$`) })
)

// checkServer checks c.Server and returns it resolved. With lookupEnv nil it
// leaves the key_env variables unread (and those keys' hashes zero), as Validate
// must not depend on the environment.
func (c *Config) checkServer(ps *problems, present func(string) bool, lookupEnv func(string) (string, bool)) ResolvedServer {
	s := c.Server
	r := ResolvedServer{
		Listen:        DefaultListen,
		MaxBody:       DefaultMaxBody,
		MaxFile:       DefaultMaxFile,
		ShutdownGrace: DefaultShutdownGrace,
		Sessions:      ResolvedSessions{IdleTTL: DefaultSessionIdleTTL, MaxLifetime: DefaultSessionMaxLifetime, MaxTotal: DefaultMaxSessions},
		Profile:       c.DefaultProfile(),
	}
	given := func(p string, zero bool) bool { return !zero || present(p) }

	if given("server.listen", s.Listen == "") {
		if msg := checkListen(s.Listen); msg != "" {
			ps.add("server.listen", "%s", msg)
		}
		r.Listen = s.Listen
	}
	if given("server.data_dir", s.DataDir == "") {
		if !filepath.IsAbs(s.DataDir) {
			ps.add("server.data_dir", "%q is not an absolute path", s.DataDir)
		}
		r.DataDir = filepath.Clean(s.DataDir)
	}
	size := func(p, v string, dst *int64) {
		if given(p, v == "") {
			n, err := ParseSize(v)
			if err != nil {
				ps.add(p, "%v", err)
			}
			*dst = n
		}
	}
	size("server.max_body", s.MaxBody, &r.MaxBody)
	size("server.max_file", s.MaxFile, &r.MaxFile)
	duration := func(p, v string, dst *time.Duration) bool {
		if !given(p, v == "") {
			return true
		}
		d, err := ParseDuration(v)
		if err != nil {
			ps.add(p, "%v", err)
			return false
		}
		*dst = d
		return true
	}
	duration("server.shutdown_grace", s.ShutdownGrace, &r.ShutdownGrace)
	okIdle := duration("server.sessions.idle_ttl", s.Sessions.IdleTTL, &r.Sessions.IdleTTL)
	okLife := duration("server.sessions.max_lifetime", s.Sessions.MaxLifetime, &r.Sessions.MaxLifetime)
	if okIdle && okLife && r.Sessions.IdleTTL > r.Sessions.MaxLifetime {
		ps.add("server.sessions.idle_ttl", "%v is longer than sessions.max_lifetime (%v), so it never applies", r.Sessions.IdleTTL, r.Sessions.MaxLifetime)
	}
	count("server.sessions.max_total", s.Sessions.MaxTotal, &r.Sessions.MaxTotal, ps, present)
	r.Pool = ResolvedPool{Enabled: true, Size: DefaultPoolSize, MaxKeys: DefaultPoolKeys,
		Refill: DefaultPoolRefills, IdleTTL: DefaultPoolIdleTTL, Warm: []string{c.DefaultProfile()},
		Zygote: s.Pool.Zygote || !present("server.pool.zygote")}
	switch size := s.Pool.Size; {
	case size == 0 && present("server.pool.size"):
		r.Pool.Enabled, r.Pool.Size = false, 0
	case size < 0 || size > MaxPoolSize:
		ps.add("server.pool.size", "invalid value %d (want 0, which turns the pool off, to %d ready boxes per profile)", size, MaxPoolSize)
	case size > 0:
		r.Pool.Size = size
	}
	count("server.pool.max_keys", s.Pool.MaxKeys, &r.Pool.MaxKeys, ps, present)
	count("server.pool.refills", s.Pool.Refills, &r.Pool.Refill, ps, present)
	duration("server.pool.idle_ttl", s.Pool.IdleTTL, &r.Pool.IdleTTL)
	if len(s.Pool.Warm) > 0 {
		r.Pool.Warm = slices.Clone(s.Pool.Warm)
		for i, name := range s.Pool.Warm {
			if _, err := c.ResolveProfile(name); err != nil {
				ps.add(fmt.Sprintf("server.pool.warm[%d]", i), "%v", err)
			}
		}
	}

	r.Quotas = defaultQuotas()
	r.Limits = c.Limits.check(&problems{}, "", nil) // problems are Validate's, under "limits"

	principals := map[string]int{}
	envs := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	for i, k := range s.APIKeys {
		base := fmt.Sprintf("server.api_keys[%d]", i)
		rk := ResolvedKey{Principal: k.Principal, Profile: k.Profile, Profiles: slices.Clone(k.Profiles), Admin: k.Admin}
		switch first, dup := principals[k.Principal]; {
		case k.Principal == "":
			ps.add(base+".principal", "missing principal name")
		case !principalRE().MatchString(k.Principal):
			ps.add(base+".principal", "invalid principal name %q (want 1 to 64 of a-z, 0-9, _ and -)", k.Principal)
		case dup:
			ps.add(base+".principal", "duplicate principal %q (also api_keys[%d])", k.Principal, first)
		default:
			principals[k.Principal] = i
		}

		hasEnv, hasHash := given(base+".key_env", k.KeyEnv == ""), given(base+".key_sha256", k.KeySHA256 == "")
		switch {
		case hasEnv && hasHash:
			ps.add(base, "key_env and key_sha256 are mutually exclusive (give one)")
		case !hasEnv && !hasHash:
			ps.add(base, "missing key (give key_env, the variable holding the key, or key_sha256, its hex SHA-256)")
		case hasEnv:
			p := base + ".key_env"
			if !envNameRE().MatchString(k.KeyEnv) {
				ps.add(p, "invalid variable name %q", k.KeyEnv)
				break
			}
			if first, dup := envs[k.KeyEnv]; dup {
				ps.add(p, "variable %s also holds the key of api_keys[%d]", k.KeyEnv, first)
				break
			}
			envs[k.KeyEnv] = i
			if lookupEnv == nil {
				break
			}
			key, ok := lookupEnv(k.KeyEnv)
			if msg := checkKey(k.KeyEnv, key, ok); msg != "" {
				ps.add(p, "%s", msg)
				break
			}
			rk.SHA256 = sha256.Sum256([]byte(key))
		case hasHash:
			p := base + ".key_sha256"
			b, err := hex.DecodeString(k.KeySHA256)
			if err != nil || len(b) != sha256.Size {
				ps.add(p, "want the 64 hex digits of a SHA-256 (e.g. from: printf %%s \"$KEY\" | sha256sum)")
				break
			}
			rk.SHA256 = [sha256.Size]byte(b)
		}
		if rk.SHA256 != [sha256.Size]byte{} {
			if first, dup := hashes[rk.SHA256]; dup {
				ps.add(base, "same key as api_keys[%d] (each principal needs its own key)", first)
			}
			hashes[rk.SHA256] = i
		}

		if given(base+".profile", k.Profile == "") {
			c.checkProfileName(ps, base+".profile", k.Profile)
		} else {
			rk.Profile = c.DefaultProfile()
		}
		for j, name := range k.Profiles {
			c.checkProfileName(ps, fmt.Sprintf("%s.profiles[%d]", base, j), name)
		}
		rk.Quotas = k.Quotas.check(ps, base+".quotas", present)
		k.MaxLimits.check(ps, base+".max_limits", present)
		rk.MaxLimits = c.Limits.over(k.MaxLimits).check(&problems{}, "", nil)
		r.Keys = append(r.Keys, rk)
	}
	return r
}

// checkProfileName reports a reference to a profile that does not exist.
func (c *Config) checkProfileName(ps *problems, path, name string) {
	if _, ok := c.lookup(name, BuiltinProfiles()); !ok {
		ps.add(path, "unknown profile %q (available: %s)", name, strings.Join(c.profileNames(), ", "))
	}
}

// defaultQuotas returns the quotas of a principal that sets none.
func defaultQuotas() ResolvedQuotas {
	r := ResolvedQuotas{Concurrent: DefaultConcurrent, Sessions: DefaultSessionsQuota}
	r.Rate, r.Burst, _ = ParseRate(DefaultRate)
	return r
}

// check parses the quotas under prefix, with the defaults for what is unset.
func (q Quotas) check(ps *problems, prefix string, present func(string) bool) ResolvedQuotas {
	r := defaultQuotas()
	count(join(prefix, "concurrent"), q.Concurrent, &r.Concurrent, ps, present)
	count(join(prefix, "sessions"), q.Sessions, &r.Sessions, ps, present)
	if p := join(prefix, "rate"); q.Rate != "" || present(p) {
		rate, burst, err := ParseRate(q.Rate)
		if err != nil {
			ps.add(p, "%v", err)
		} else {
			r.Rate, r.Burst = rate, burst
		}
	}
	return r
}

// count checks a whole number setting from 1 to MaxQuota; 0 when absent keeps the
// default in *dst.
func count(p string, v int, dst *int, ps *problems, present func(string) bool) {
	if v == 0 && !present(p) {
		return
	}
	if v < 1 || v > MaxQuota {
		ps.add(p, "invalid value %d (want a whole number from 1 to %d)", v, MaxQuota)
		return
	}
	*dst = v
}

// ParseRate parses a rate quota, "N/s", "N/m" or "N/h", into tokens per second and
// a burst of N.
func ParseRate(s string) (perSecond float64, burst int, err error) {
	m := rateRE().FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, 0, fmt.Errorf("invalid rate %q (want N/s, N/m or N/h, e.g. 60/m)", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n < 1 || n > MaxQuota {
		return 0, 0, fmt.Errorf("invalid rate %q: N must be from 1 to %d", s, MaxQuota)
	}
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[m[2]]
	return float64(n) / per, n, nil
}

// checkListen checks a host:port listen address.
func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("invalid address %q (want host:port, e.g. %s)", addr, DefaultListen)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > math.MaxUint16 {
		return fmt.Sprintf("invalid port %q in %q (want a number from 0 to 65535)", port, addr)
	}
	if host != "" && net.ParseIP(host) == nil && !hostRE().MatchString(host) {
		return fmt.Sprintf("invalid host %q in %q (want an IP address or a host name)", host, addr)
	}
	return ""
}

// checkKey checks the key read from the variable name.
func checkKey(name, key string, ok bool) string {
	switch {
	case !ok || key == "":
		return fmt.Sprintf("variable %s is not set", name)
	case strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }):
		// A stray newline or space would make a key no client can send.
		return fmt.Sprintf("variable %s holds spaces or characters other than printable ascii", name)
	case len(key) < MinKeyLength:
		return fmt.Sprintf("the key in %s is shorter than %d characters", name, MinKeyLength)
	}
	return ""
}

// loopback reports whether the listen address addr accepts only local connections.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

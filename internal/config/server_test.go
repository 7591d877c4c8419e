package config

import (
	"crypto/sha256"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// env returns a lookupEnv over vars.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const (
	keyA = "alice-key-0123456789"
	keyB = "bob-key-0123456789ab"
)

func TestServerDefaults(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/xdg") // a default data directory even without HOME
	for _, c := range []*Config{Default(), {}, mustParse(t, "server: {}\n")} {
		r, err := c.ResolveServer(env(nil))
		if err != nil {
			t.Fatalf("ResolveServer(%+v): %v", c, err)
		}
		want := ResolvedServer{
			Listen:        "127.0.0.1:7420",
			DataDir:       DefaultDataDir(),
			MaxBody:       16 << 20,
			MaxFile:       64 << 20,
			ShutdownGrace: 30 * time.Second,
			Sessions:      ResolvedSessions{IdleTTL: 10 * time.Minute, MaxLifetime: time.Hour, MaxTotal: 64},
			Pool:          ResolvedPool{Enabled: true, Size: 2, MaxKeys: 4, Refill: 2, IdleTTL: 5 * time.Minute, Warm: []string{ProfileDefault}, Zygote: true},
			Profile:       ProfileDefault,
			Quotas:        ResolvedQuotas{Concurrent: 4, Sessions: 8, Rate: 1, Burst: 60},
		}
		if !reflect.DeepEqual(r, want) {
			t.Errorf("ResolveServer =\n%+v\nwant\n%+v", r, want)
		}
		if r.DataDir == "" {
			t.Error("no data directory")
		}
	}
}

func TestDataDirFor(t *testing.T) {
	tests := []struct {
		name      string
		euid      int
		xdg, home string
		want      string
	}{
		{"root", 0, "/xdg", "/root", "/var/lib/moat"},
		{"xdg", 1000, "/xdg", "/home/u", "/xdg/moat"},
		{"home", 1000, "", "/home/u", "/home/u/.local/share/moat"},
		{"relative xdg is ignored", 1000, "xdg", "/home/u", "/home/u/.local/share/moat"},
		{"nothing", 1000, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dataDirFor(tc.euid, tc.xdg, tc.home); got != tc.want {
				t.Errorf("dataDirFor = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolveServer(t *testing.T) {
	hashB := sha256.Sum256([]byte(keyB))
	c := mustParse(t, `
limits:
  timeout: 20s
  memory: 128MiB
profile: strict
profiles:
  web: {}
server:
  listen: "[::1]:9000"
  data_dir: /srv/moat/
  max_body: 1MiB
  max_file: 2MiB
  shutdown_grace: 5s
  sessions:
    idle_ttl: 1m
    max_lifetime: 2m
    max_total: 3
  pool:
    size: 3
    max_keys: 2
    refills: 1
    idle_ttl: 1m
    warm: [web, strict]
    zygote: false
  api_keys:
    - principal: alice
      key_env: KEY_A
      profile: web
      profiles: [open, strict]
      quotas:
        concurrent: 2
        sessions: 1
        rate: 10/s
      max_limits:
        timeout: 1m
        cpus: 2
    - principal: bob
      key_sha256: `+strings.ToUpper(hexOf(hashB))+`
      quotas:
        rate: 30/h
`)
	r, err := c.ResolveServer(env(map[string]string{"KEY_A": keyA}))
	if err != nil {
		t.Fatal(err)
	}
	want := ResolvedServer{
		Listen:        "[::1]:9000",
		DataDir:       "/srv/moat",
		MaxBody:       1 << 20,
		MaxFile:       2 << 20,
		ShutdownGrace: 5 * time.Second,
		Sessions:      ResolvedSessions{IdleTTL: time.Minute, MaxLifetime: 2 * time.Minute, MaxTotal: 3},
		Pool:          ResolvedPool{Enabled: true, Size: 3, MaxKeys: 2, Refill: 1, IdleTTL: time.Minute, Warm: []string{"web", "strict"}},
		Keys: []ResolvedKey{
			{
				Principal: "alice", SHA256: sha256.Sum256([]byte(keyA)), Profile: "web", Profiles: []string{"open", "strict"},
				Quotas:    ResolvedQuotas{Concurrent: 2, Sessions: 1, Rate: 10, Burst: 10},
				MaxLimits: ResolvedLimits{Timeout: time.Minute, Memory: 128 << 20, CPUs: 2}, // over the config's limits
			},
			{
				Principal: "bob", SHA256: hashB, Profile: "strict", // the config's profile
				Quotas:    ResolvedQuotas{Concurrent: 4, Sessions: 8, Rate: 30.0 / 3600, Burst: 30},
				MaxLimits: ResolvedLimits{Timeout: 20 * time.Second, Memory: 128 << 20},
			},
		},
		Profile: "strict",
		Quotas:  ResolvedQuotas{Concurrent: 4, Sessions: 8, Rate: 1, Burst: 60},
		Limits:  ResolvedLimits{Timeout: 20 * time.Second, Memory: 128 << 20},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("ResolveServer =\n%+v\nwant\n%+v", r, want)
	}
}

func hexOf(b [32]byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 64)
	for _, x := range b {
		out = append(out, digits[x>>4], digits[x&15])
	}
	return string(out)
}

func TestServerErrors(t *testing.T) {
	key := func(extra string) string {
		return "server:\n  api_keys:\n    - principal: a\n      key_env: K\n" + extra
	}
	tests := []parseErrCase{
		{"pool size negative", "server:\n  pool: {size: -1}\n", `m.yaml:2: server.pool.size: invalid value -1`},
		{"pool too big", "server:\n  pool: {size: 65}\n", `m.yaml:2: server.pool.size: invalid value 65`},
		{"pool unknown profile", "server:\n  pool:\n    warm: [nope]\n", `m.yaml:3: server.pool.warm[0]: `},
		{"pool bad ttl", "server:\n  pool: {idle_ttl: soon}\n", `m.yaml:2: server.pool.idle_ttl: `},
		{"unknown server key", "server:\n  port: 80\n", `m.yaml:2: server.port: unknown key (want api_keys, data_dir, listen, max_body, max_file, metrics_public, pool, sessions or shutdown_grace)`},
		{"listen without port", "server:\n  listen: localhost\n", `m.yaml:2: server.listen: invalid address "localhost" (want host:port, e.g. 127.0.0.1:7420)`},
		{"listen bad port", "server:\n  listen: 'localhost:http'\n", `m.yaml:2: server.listen: invalid port "http" in "localhost:http" (want a number from 0 to 65535)`},
		{"listen port too large", "server:\n  listen: '127.0.0.1:70000'\n", `m.yaml:2: server.listen: invalid port "70000"`},
		{"listen bad host", "server:\n  listen: 'a b:80'\n", `m.yaml:2: server.listen: invalid host "a b" in "a b:80"`},
		{"listen empty", "server:\n  listen: ''\n", `m.yaml:2: server.listen: invalid address ""`},
		{"relative data_dir", "server:\n  data_dir: var/moat\n", `m.yaml:2: server.data_dir: "var/moat" is not an absolute path`},
		{"bad max_body", "server:\n  max_body: huge\n", `m.yaml:2: server.max_body: invalid size "huge" (want e.g. 256MiB, 1GiB, 4096)`},
		{"negative max_file", "server:\n  max_file: -1MiB\n", `m.yaml:2: server.max_file: invalid size "-1MiB": must be positive`},
		{"bad shutdown_grace", "server:\n  shutdown_grace: 30\n", `m.yaml:2: server.shutdown_grace: invalid duration "30" (want e.g. 30s, 2m, 500ms)`},
		{"zero idle_ttl", "server:\n  sessions:\n    idle_ttl: 0s\n", `m.yaml:3: server.sessions.idle_ttl: invalid duration "0s": must be positive`},
		{"idle_ttl beyond max_lifetime", "server:\n  sessions:\n    idle_ttl: 2h\n", `m.yaml:3: server.sessions.idle_ttl: 2h0m0s is longer than sessions.max_lifetime (1h0m0s), so it never applies`},
		{"zero max_total", "server:\n  sessions:\n    max_total: 0\n", `m.yaml:3: server.sessions.max_total: invalid value 0 (want a whole number from 1 to 1048576)`},
		{"api_keys not a list", "server:\n  api_keys: {a: b}\n", `m.yaml:2: server.api_keys: want a list, got a mapping`},
		{"missing principal", "server:\n  api_keys:\n    - key_env: K\n", `m.yaml:3: server.api_keys[0].principal: missing principal name`},
		{"bad principal", "server:\n  api_keys:\n    - principal: Alice\n      key_env: K\n", `m.yaml:3: server.api_keys[0].principal: invalid principal name "Alice" (want 1 to 64 of a-z, 0-9, _ and -)`},
		{"duplicate principal", key("    - principal: a\n      key_env: L\n"), `m.yaml:5: server.api_keys[1].principal: duplicate principal "a" (also api_keys[0])`},
		{"both keys", key("      key_sha256: " + strings.Repeat("ab", 32) + "\n"), `m.yaml:3: server.api_keys[0]: key_env and key_sha256 are mutually exclusive (give one)`},
		{"neither key", "server:\n  api_keys:\n    - principal: a\n", `m.yaml:3: server.api_keys[0]: missing key (give key_env, the variable holding the key, or key_sha256, its hex SHA-256)`},
		{"empty key_env", "server:\n  api_keys:\n    - principal: a\n      key_env: ''\n", `m.yaml:4: server.api_keys[0].key_env: invalid variable name ""`},
		{"bad key_env", "server:\n  api_keys:\n    - principal: a\n      key_env: $KEY\n", `m.yaml:4: server.api_keys[0].key_env: invalid variable name "$KEY"`},
		{"shared key_env", key("    - principal: b\n      key_env: K\n"), `m.yaml:6: server.api_keys[1].key_env: variable K also holds the key of api_keys[0]`},
		{"short key_sha256", "server:\n  api_keys:\n    - principal: a\n      key_sha256: abc123\n", `m.yaml:4: server.api_keys[0].key_sha256: want the 64 hex digits of a SHA-256`},
		{"non-hex key_sha256", "server:\n  api_keys:\n    - principal: a\n      key_sha256: " + strings.Repeat("zz", 32) + "\n", `m.yaml:4: server.api_keys[0].key_sha256: want the 64 hex digits`},
		{"shared key_sha256", "server:\n  api_keys:\n    - {principal: a, key_sha256: " + strings.Repeat("ab", 32) + "}\n    - {principal: b, key_sha256: " + strings.Repeat("AB", 32) + "}\n",
			`m.yaml:4: server.api_keys[1]: same key as api_keys[0] (each principal needs its own key)`},
		{"unknown profile", key("      profile: fast\n"), `m.yaml:5: server.api_keys[0].profile: unknown profile "fast" (available: default, open, strict)`},
		{"empty profile", key("      profile: ''\n"), `m.yaml:5: server.api_keys[0].profile: unknown profile ""`},
		{"unknown extra profile", key("      profiles: [strict, fast]\n"), `m.yaml:5: server.api_keys[0].profiles[1]: unknown profile "fast"`},
		{"bad rate", key("      quotas:\n        rate: 60/min\n"), `m.yaml:6: server.api_keys[0].quotas.rate: invalid rate "60/min" (want N/s, N/m or N/h, e.g. 60/m)`},
		{"zero rate", key("      quotas:\n        rate: 0/m\n"), `m.yaml:6: server.api_keys[0].quotas.rate: invalid rate "0/m": N must be from 1 to 1048576`},
		{"empty rate", key("      quotas:\n        rate: ''\n"), `m.yaml:6: server.api_keys[0].quotas.rate: invalid rate ""`},
		{"zero concurrent", key("      quotas:\n        concurrent: 0\n"), `m.yaml:6: server.api_keys[0].quotas.concurrent: invalid value 0 (want a whole number from 1 to 1048576)`},
		{"negative sessions", key("      quotas:\n        sessions: -2\n"), `m.yaml:6: server.api_keys[0].quotas.sessions: invalid value -2`},
		{"unknown quota", key("      quotas:\n        burst: 5\n"), `m.yaml:6: server.api_keys[0].quotas.burst: unknown key (want concurrent, rate or sessions)`},
		{"bad max_limits", key("      max_limits:\n        memory: 1MiB\n"), `m.yaml:6: server.api_keys[0].max_limits.memory: 1MiB is below the minimum of 16MiB`},
		{"zero max_limits", key("      max_limits:\n        pids: 0\n"), `m.yaml:6: server.api_keys[0].max_limits.pids: invalid value 0`},
	}
	checkParseErrors(t, tests)
}

func TestServerValidateWithoutFile(t *testing.T) {
	// Built in code: zero is unset, negative is an error, and there are no lines.
	c := &Config{Server: Server{Sessions: Sessions{MaxTotal: -1}, APIKeys: []APIKey{{Principal: "a", KeyEnv: "K", Quotas: Quotas{Concurrent: 0}}}}}
	err := c.Validate()
	if want := "server.sessions.max_total: invalid value -1 (want a whole number from 1 to 1048576)"; err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %s", err, want)
	}
}

func TestResolveServerKeys(t *testing.T) {
	src := "server:\n  api_keys:\n    - principal: a\n      key_env: KEY_A\n    - principal: b\n      key_env: KEY_B\n"
	tests := []struct {
		name string
		env  map[string]string
		want string // the error, or "" for none
	}{
		{"both set", map[string]string{"KEY_A": keyA, "KEY_B": keyB}, ""},
		{"unset", map[string]string{"KEY_A": keyA}, "m.yaml:6: server.api_keys[1].key_env: variable KEY_B is not set"},
		{"empty", map[string]string{"KEY_A": keyA, "KEY_B": ""}, "m.yaml:6: server.api_keys[1].key_env: variable KEY_B is not set"},
		{"short", map[string]string{"KEY_A": "k3y!", "KEY_B": keyB}, "m.yaml:4: server.api_keys[0].key_env: the key in KEY_A is shorter than 16 characters"},
		{"trailing newline", map[string]string{"KEY_A": keyA + "\n", "KEY_B": keyB},
			"m.yaml:4: server.api_keys[0].key_env: variable KEY_A holds spaces or characters other than printable ascii"},
		{"same key twice", map[string]string{"KEY_A": keyA, "KEY_B": keyA}, "m.yaml:5: server.api_keys[1]: same key as api_keys[0] (each principal needs its own key)"},
	}
	c := mustParse(t, src)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.ResolveServer(env(tc.env))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(r.Keys) != 2 || r.Keys[0].SHA256 != sha256.Sum256([]byte(keyA)) || r.Keys[1].SHA256 != sha256.Sum256([]byte(keyB)) {
					t.Errorf("keys = %+v", r.Keys)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("ResolveServer = %v\nwant %s", err, tc.want)
			}
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Errorf("error is %T, want *Error", err)
			}
			for _, v := range tc.env {
				if v != "" && strings.Contains(err.Error(), strings.TrimSpace(v)) {
					t.Errorf("error %q shows a key", err)
				}
			}
		})
	}
	// Validate does not need the environment.
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in    string
		rate  float64
		burst int
		err   bool
	}{
		{"60/m", 1, 60, false},
		{"10/s", 10, 10, false},
		{"36/h", 0.01, 36, false},
		{" 5/s ", 5, 5, false},
		{"0/s", 0, 0, true},
		{"-1/s", 0, 0, true},
		{"1.5/s", 0, 0, true},
		{"60", 0, 0, true},
		{"60/d", 0, 0, true},
		{"60/min", 0, 0, true},
		{"99999999999999999999/s", 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			rate, burst, err := ParseRate(tc.in)
			if (err != nil) != tc.err || rate != tc.rate || burst != tc.burst {
				t.Errorf("ParseRate(%q) = %v, %d, %v; want %v, %d, error %v", tc.in, rate, burst, err, tc.rate, tc.burst, tc.err)
			}
		})
	}
}

func TestServerWarnings(t *testing.T) {
	tests := []struct {
		name   string
		listen string
		keys   bool
		want   string // a substring of the only warning, or "" for none
	}{
		{"default", "", false, ""},
		{"ipv4 loopback", "127.0.0.1:7420", false, ""},
		{"other ipv4 loopback", "127.1.2.3:80", false, ""},
		{"ipv6 loopback", "[::1]:7420", false, ""},
		{"localhost", "localhost:7420", false, ""},
		{"all interfaces", "0.0.0.0:7420", false, "the generated token is the only protection"},
		{"empty host", ":7420", false, "the generated token is the only protection"},
		{"host name", "moat.example.com:7420", false, "the generated token is the only protection"},
		{"all interfaces with keys", "0.0.0.0:7420", true, "API keys, code and output cross the network in clear text"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Server: Server{Listen: tc.listen}}
			if tc.keys {
				c.Server.APIKeys = []APIKey{{Principal: "a", KeyEnv: "K"}}
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			w := c.Warnings()
			switch {
			case tc.want == "" && len(w) != 0:
				t.Errorf("Warnings = %q, want none", w)
			case tc.want != "" && (len(w) != 1 || !strings.Contains(w[0], tc.want) || !strings.Contains(w[0], tc.listen)):
				t.Errorf("Warnings = %q, want one containing %q and the address", w, tc.want)
			}
		})
	}
}

func TestExampleServer(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.ResolveServer(env(map[string]string{"MOAT_KEY_ALICE": keyA}))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, k := range r.Keys {
		names = append(names, k.Principal)
	}
	if !slices.Equal(names, []string{"alice", "ci"}) || r.Keys[0].Profile != "analysis" || r.Keys[1].Quotas.Rate != 10 {
		t.Errorf("example keys = %+v", r.Keys)
	}
	if _, err := c.ResolveServer(env(nil)); err == nil || !strings.Contains(err.Error(), "MOAT_KEY_ALICE is not set") {
		t.Errorf("example without its key variable: %v", err)
	}
}

func TestPoolOff(t *testing.T) {
	r, err := mustParse(t, "server:\n  pool: {size: 0}\n").ResolveServer(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r.Pool.Enabled || r.Pool.Size != 0 {
		t.Fatalf("size 0: %+v, want the pool off", r.Pool)
	}
}

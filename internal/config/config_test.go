package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// parseErr parses src as "m.yaml" and returns the error text, failing if it parsed.
func parseErr(t *testing.T, src string) string {
	t.Helper()
	c, err := Parse("m.yaml", []byte(src))
	if err == nil {
		t.Fatalf("Parse succeeded, want an error; config: %+v", c)
	}
	if _, ok := errors.AsType[*Error](err); !ok {
		t.Fatalf("error is %T, want *Error: %v", err, err)
	}
	return err.Error()
}

// mustParse parses src, failing on error.
func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	for _, src := range []string{"", "# just a comment\n", "~\n", "---\n"} {
		c := mustParse(t, src)
		if c.Isolation != IsolationStrict || c.Profile != ProfileDefault || c.Profiles != nil {
			t.Errorf("Parse(%q) = %+v, want the defaults", src, c)
		}
	}
	for _, c := range []*Config{Default(), {}} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", c, err)
		}
		if w := c.Warnings(); len(w) != 0 {
			t.Errorf("Warnings(%+v) = %q, want none", c, w)
		}
		if c.BestEffort() || c.DefaultProfile() != ProfileDefault {
			t.Errorf("%+v: not strict with the default profile", c)
		}
		p, err := c.ResolveProfile("")
		if err != nil {
			t.Fatal(err)
		}
		if want := BuiltinProfiles()[ProfileDefault]; !reflect.DeepEqual(p, want) {
			t.Errorf("ResolveProfile(\"\") = %+v, want the builtin default %+v", p, want)
		}
		r, err := p.Limits.Resolve()
		if err != nil || r != (ResolvedLimits{}) {
			t.Errorf("default limits resolve to %+v, %v; want all unset", r, err)
		}
	}
}

func TestBuiltinProfiles(t *testing.T) {
	b := BuiltinProfiles()
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range b {
			yield(k)
		}
	}); !slices.Equal(got, []string{"default", "open", "strict"}) {
		t.Fatalf("builtin names %v", got)
	}
	// Each builtin passes the checks of a user profile.
	c := &Config{Profiles: map[string]Profile{}}
	for name, p := range b {
		p.Extends = name
		c.Profiles["my-"+name] = p
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("builtins do not validate: %v", err)
	}
	// Policies the rest of moat relies on.
	s, d, o := b["strict"].Python, b["default"].Python, b["open"].Python
	if s.Mode != ModeAllowlist || d.Mode != ModeDenylist || o.Mode != ModeOff {
		t.Errorf("modes: strict %q, default %q, open %q", s.Mode, d.Mode, o.Mode)
	}
	if s.FileAccess != FileAccessSandbox || d.FileAccess != FileAccessAny {
		t.Errorf("file access: strict %q, default %q", s.FileAccess, d.FileAccess)
	}
	for _, m := range []string{"sys", "subprocess", "socket", "ctypes", "importlib", "pickle", "marshal", "shutil", "gc"} {
		if slices.Contains(s.AllowModules, m) {
			t.Errorf("strict allows %s", m)
		}
	}
	// os is allowed in strict only through an allow rule of path and file functions.
	if r := s.Modules["os"]; len(r.Allow) == 0 || slices.Contains(r.Allow, "system") {
		t.Errorf("strict os rule = %+v, want an allow list of file functions", r)
	}
	for _, m := range []string{"subprocess", "socket", "ctypes", "importlib", "multiprocessing", "pty"} {
		if !slices.Contains(d.DenyModules, m) {
			t.Errorf("default does not deny %s", m)
		}
	}
	for _, a := range []string{"system", "popen", "exec*", "spawn*", "fork", "kill"} {
		if !slices.Contains(d.Modules["os"].Deny, a) {
			t.Errorf("default does not deny os.%s", a)
		}
	}
	for _, p := range []PythonPolicy{s, d} {
		for _, f := range []string{"eval", "exec", "compile", "__import__", "breakpoint"} {
			if !slices.Contains(p.DenyBuiltins, f) {
				t.Errorf("%s mode does not deny %s", p.Mode, f)
			}
		}
		for _, a := range []string{"__subclasses__", "__globals__", "__builtins__", "__code__", "f_globals", "gi_frame", "tb_frame"} {
			if !slices.Contains(p.DenyAttributes, a) {
				t.Errorf("%s mode does not deny attribute %s", p.Mode, a)
			}
		}
		if slices.Contains(p.DenyBuiltins, "getattr") || slices.Contains(p.DenyBuiltins, "open") {
			t.Errorf("%s mode denies getattr or open", p.Mode)
		}
	}
	for _, cmd := range []string{"rm", "find", "xargs", "env", "sh", "bash", "python3", "curl"} {
		if slices.Contains(b["strict"].Shell.Allow, cmd) {
			t.Errorf("strict allows the command %s", cmd)
		}
	}
	if !slices.Contains(b["default"].Shell.Deny, "curl") || len(b["default"].Shell.Allow) != 0 {
		t.Errorf("default shell policy %+v", b["default"].Shell)
	}
	// Copies, not shared state.
	b["strict"].Python.AllowModules[0] = "os"
	b["default"].Python.Modules["os"] = ModuleRule{}
	if again := BuiltinProfiles(); again["strict"].Python.AllowModules[0] == "os" || len(again["default"].Python.Modules["os"].Deny) == 0 {
		t.Fatal("BuiltinProfiles shares memory between calls")
	}
}

// parseErrCase is a config source and a line its error must hold.
type parseErrCase struct {
	name string
	src  string
	want string // the start of a line of the error
}

// checkParseErrors parses each case's source and wants a line of its error to start
// with the case's want.
func checkParseErrors(t *testing.T, tests []parseErrCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErr(t, tc.src)
			for _, line := range strings.Split(got, "\n") {
				if strings.HasPrefix(line, tc.want) {
					return
				}
			}
			t.Errorf("error:\n%s\nwant a line starting with:\n%s", got, tc.want)
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []parseErrCase{
		{"unknown top-level key", "isolation: strict\nisolaton: strict\n",
			`m.yaml:2: isolaton: unknown key (want audit, backend, filter, isolation, limits, network, profile, profiles or server)`},
		{"unknown nested key", "profiles:\n  web:\n    python:\n      modes: denylist\n",
			`m.yaml:4: profiles.web.python.modes: unknown key (want allow_modules, deny_attributes, deny_builtins, deny_modules, file_access, mode or modules)`},
		{"unknown limit", "limits:\n  memroy: 1GiB\n", `m.yaml:2: limits.memroy: unknown key`},
		{"wrong type mapping", "limits: 30s\n", `m.yaml:1: limits: want a mapping, got string "30s"`},
		{"wrong type list", "profiles:\n  web:\n    shell:\n      allow: ls\n", `m.yaml:4: profiles.web.shell.allow: want a list, got string "ls"`},
		{"wrong type int", "limits:\n  pids: many\n", `m.yaml:2: limits.pids: want a whole number, got string "many"`},
		{"wrong type float", "limits:\n  cpus: [1]\n", `m.yaml:2: limits.cpus: want a number, got a list`},
		{"fractional pids", "limits:\n  pids: 1.5\n", `m.yaml:2: limits.pids: want a whole number, got float "1.5"`},
		{"bad size", "limits:\n  memory: lots\n", `m.yaml:2: limits.memory: invalid size "lots" (want e.g. 256MiB, 1GiB, 4096)`},
		{"memory below minimum", "\n\nlimits: {memory: 1MiB}\n", `m.yaml:3: limits.memory: 1MiB is below the minimum of 16MiB`},
		{"bad duration", "limits:\n  timeout: 30\n", `m.yaml:2: limits.timeout: invalid duration "30" (want e.g. 30s, 2m, 500ms)`},
		{"empty duration", "limits:\n  timeout: ''\n", `m.yaml:2: limits.timeout: invalid duration ""`},
		{"negative pids", "limits:\n  pids: -1\n", `m.yaml:2: limits.pids: invalid value -1 (want a whole number from 1 to 4194304)`},
		{"zero pids", "limits:\n  pids: 0\n", `m.yaml:2: limits.pids: invalid value 0`},
		{"cpus 0", "limits:\n  cpus: 0\n", `m.yaml:2: limits.cpus: invalid value 0 (want a number of cores from 0.01 to 1024)`},
		{"cpus nan", "limits:\n  cpus: .nan\n", `m.yaml:2: limits.cpus: invalid value NaN`},
		{"profile limit", "profiles:\n  web:\n    limits:\n      disk: -5MiB\n", `m.yaml:4: profiles.web.limits.disk: invalid size "-5MiB": must be positive`},
		{"bad isolation", "isolation: loose\n", `m.yaml:1: isolation: unknown isolation "loose" (want strict or best_effort)`},
		{"bad mode", "profiles:\n  web:\n    python:\n      mode: allow\n",
			`m.yaml:4: profiles.web.python.mode: unknown mode "allow" (want allowlist, denylist or off)`},
		{"bad file_access", "profiles:\n  web:\n    python:\n      file_access: home\n",
			`m.yaml:4: profiles.web.python.file_access: unknown file access "home" (want any or sandbox)`},
		{"allow and deny on a module", "profiles:\n  web:\n    python:\n      modules:\n        os:\n          allow: [path]\n          deny: [system]\n",
			`m.yaml:5: profiles.web.python.modules.os: allow and deny are mutually exclusive`},
		{"extends unknown", "profiles:\n  web:\n    extends: strictest\n",
			`m.yaml:3: profiles.web.extends: unknown profile "strictest" (available: default, open, strict, web)`},
		{"extends cycle", "profiles:\n  a:\n    extends: b\n  b:\n    extends: a\n",
			`m.yaml:3: profiles.a.extends: extends cycle a -> b -> a`},
		{"extends itself", "profiles:\n  a:\n    extends: a\n", `m.yaml:3: profiles.a.extends: extends cycle a -> a`},
		{"redefining a builtin", "profiles:\n  strict:\n    shell: {allow: [ls]}\n",
			`m.yaml:2: profiles.strict: redefines the builtin profile "strict" (choose another name and use extends: strict)`},
		{"duplicate key", "profiles:\n  web: {}\n  web: {}\n", `m.yaml:3: profiles.web: duplicate key (first at line 2)`},
		{"duplicate nested key", "limits:\n  pids: 1\n  pids: 2\n", `m.yaml:3: limits.pids: duplicate key (first at line 2)`},
		{"bad profile name", "profiles:\n  Web Server: {}\n", `m.yaml:2: profiles."Web Server": invalid profile name "Web Server" (want 1 to 64 of a-z, 0-9, _ and -)`},
		{"default profile unknown", "\nprofile: fast\n", `m.yaml:2: profile: unknown profile "fast" (available: default, open, strict)`},
		{"default profile empty", "profile: ''\n", `m.yaml:1: profile: unknown profile ""`},
		{"empty module name", "profiles:\n  web:\n    python:\n      deny_modules: [socket, '']\n",
			`m.yaml:4: profiles.web.python.deny_modules[1]: empty module name`},
		{"bad module name", "profiles:\n  web:\n    python:\n      allow_modules:\n        - math\n        - os/path\n",
			`m.yaml:6: profiles.web.python.allow_modules[1]: invalid module name "os/path" (want a dotted python name such as os.path)`},
		{"bad module key", "profiles:\n  web:\n    python:\n      modules:\n        'os.': {deny: [system]}\n",
			`m.yaml:5: profiles.web.python.modules.os.: invalid module name "os."`},
		{"bad glob", "profiles:\n  web:\n    python:\n      modules:\n        os:\n          deny: ['[']\n",
			`m.yaml:6: profiles.web.python.modules.os.deny[0]: invalid glob "[": syntax error in pattern`},
		{"dotted attribute", "profiles:\n  web:\n    python:\n      modules:\n        os:\n          deny: [path.join]\n",
			`m.yaml:6: profiles.web.python.modules.os.deny[0]: invalid attribute pattern "path.join": one attribute per pattern`},
		{"bad builtin name", "profiles:\n  web:\n    python:\n      deny_builtins: [eval()]\n",
			`m.yaml:4: profiles.web.python.deny_builtins[0]: invalid name "eval()" (want a python identifier)`},
		{"command with path", "profiles:\n  web:\n    shell:\n      deny: [/usr/bin/curl]\n",
			`m.yaml:4: profiles.web.shell.deny[0]: invalid command name "/usr/bin/curl": give the bare name`},
		{"bad preload", "profiles:\n  web:\n    preload: ['']\n", `m.yaml:3: profiles.web.preload[0]: empty module name`},
		{"rules with mode off", "profiles:\n  web:\n    extends: open\n    python:\n      deny_modules: [socket]\n",
			`m.yaml:4: profiles.web.python: python rules have no effect with mode off`},
		{"allow_modules in denylist mode", "profiles:\n  web:\n    python:\n      allow_modules: [math]\n",
			`m.yaml:4: profiles.web.python.allow_modules: has no effect in denylist mode`},
		{"invalid filter regex", "filter:\n  rules:\n    - name: x\n      pattern: 'a(b'\n",
			`m.yaml:4: filter.rules[0].pattern: invalid regular expression "a(b": missing closing )`},
		{"empty-matching filter regex", "filter:\n  rules:\n    - {name: x, pattern: '\\b'}\n",
			`m.yaml:3: filter.rules[0].pattern: regular expression "\\b" can match the empty string`},
		{"filter rule without name", "filter:\n  rules:\n    - pattern: abc\n", `m.yaml:3: filter.rules[0].name: missing rule name`},
		{"duplicate filter rule", "filter:\n  rules:\n    - {name: x, pattern: a}\n    - {name: x, pattern: b}\n",
			`m.yaml:4: filter.rules[1].name: duplicate rule name "x"`},
		{"negative max_len", "filter:\n  rules:\n    - name: x\n      pattern: a\n      max_len: -1\n",
			`m.yaml:5: filter.rules[0].max_len: invalid value -1`},
		{"bad filter rule name", "filter:\n  disable: [API-Keys]\n", `m.yaml:2: filter.disable[0]: invalid rule name "API-Keys"`},
		{"enabled and disabled", "filter:\n  disable: [email]\n  enable: [email]\n", `m.yaml:3: filter.enable[0]: rule "email" is both enabled and disabled`},
		{"bad secret_env", "filter:\n  secret_env: ['MY VAR']\n", `m.yaml:2: filter.secret_env[0]: invalid variable name "MY VAR"`},
		{"tab indentation", "profiles:\n  web:\n\tshell: {}\n", `m.yaml:3: found character that cannot start any token`},
		{"syntax error on line 1", "a: b: c\n", `m.yaml:1: mapping values are not allowed in this context`},
		{"unclosed flow", "limits: {pids: 1\n", `m.yaml:1: did not find expected ',' or '}'`},
		{"not a mapping", "- strict\n", `m.yaml:1: want a mapping of settings (isolation, limits, profile, profiles, filter, server), got a list`},
		{"two documents", "isolation: strict\n---\nisolation: strict\n", `m.yaml:2: more than one yaml document`},
		{"anchor", "limits: &l {pids: 1}\n", `m.yaml:1: limits: yaml anchors and aliases are not supported (use extends to share settings)`},
		{"merge key", "profiles:\n  web:\n    <<: {}\n", `m.yaml:3: profiles.web: yaml merge keys (<<) are not supported`},
		{"invalid utf-8", "isolation: strict\nprofile: \xff\n", `m.yaml:2: file is not valid utf-8`},
		{"control character", "isolation: strict\n\nprofile: a\x00\n", `m.yaml:3: control character U+0000 is not allowed`},
		{"custom tag", "isolation: !secure strict\n", `m.yaml:1: isolation: want a string, got !secure "strict"`},
		{"timestamp", "limits:\n  timeout: 2025-01-01\n", `m.yaml:2: limits.timeout: want a string, got timestamp "2025-01-01"`},
		{"null key", "profiles:\n  ~: {}\n", `m.yaml:2: profiles: want a plain key, got null`},
		{"mapping too large", "\nprofiles:\n" + strings.Repeat("  a: {}\n", MaxMappingKeys+1), `m.yaml:3: profiles: mapping has 1001 keys, more than 1000`},
		{"extends chain too long", longChain(MaxExtends + 1), `m.yaml:2: profiles.p0.extends: extends chain is longer than 16 profiles`},
		{"newline in a value stays quoted", "isolation: \"a\\nb\"\n", `m.yaml:1: isolation: unknown isolation "a\nb"`},
	}
	checkParseErrors(t, tests)
}

// longChain returns a config with profiles p0 extends p1 ... extends p(n-1).
func longChain(n int) string {
	var b strings.Builder
	b.WriteString("profiles:\n")
	for i := range n {
		next := fmt.Sprintf("p%d", i+1)
		if i == n-1 {
			next = "strict"
		}
		fmt.Fprintf(&b, "  p%d: {extends: %s}\n", i, next)
	}
	return b.String()
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := `isolation: loose
limits:
  pids: many
  cpus: 0
profiles:
  web:
    extends: nope
    python:
      mode: allow
    shel: {}
filter:
  rules:
    - {name: x, pattern: "["}
`
	_, err := Parse("m.yaml", []byte(src))
	e, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("error %v is not an *Error", err)
	}
	var got []string
	for _, p := range e.Problems {
		got = append(got, p.Path)
		if p.File != "m.yaml" || p.Line < 1 {
			t.Errorf("problem without a place: %+v", p)
		}
	}
	want := []string{"isolation", "limits.pids", "limits.cpus", "profiles.web.extends",
		"profiles.web.python.mode", "profiles.web.shel", "filter.rules[0].pattern"}
	if !slices.Equal(got, want) {
		t.Errorf("problems at %q, want %q\n%v", got, want, err)
	}
}

func TestValidateWithoutFile(t *testing.T) {
	c := &Config{Isolation: "none", Limits: Limits{CPUs: -1}, Profiles: map[string]Profile{"web": {Python: PythonPolicy{Mode: "x"}}}}
	err := c.Validate()
	want := "isolation: unknown isolation \"none\" (want strict or best_effort)\n" +
		"limits.cpus: invalid value -1 (want a number of cores from 0.01 to 1024)\n" +
		"profiles.web.python.mode: unknown mode \"x\" (want allowlist, denylist or off)"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v\nwant %s", err, want)
	}
	// A Config built in code has no presence information: zero is unset.
	c = &Config{Limits: Limits{CPUs: 0, Pids: 0, Memory: ""}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestProblemFormat(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{"m.yaml", 3, "limits.pids", "bad"}, "m.yaml:3: limits.pids: bad"},
		{Problem{"m.yaml", 0, "", "too big"}, "m.yaml: too big"},
		{Problem{"", 7, "profile", "bad"}, "line 7: profile: bad"},
		{Problem{"", 0, "isolation", "bad"}, "isolation: bad"},
	}
	for _, tc := range tests {
		if got := tc.p.Error(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestResolveProfile(t *testing.T) {
	c := mustParse(t, `
limits:
  timeout: 10s
  memory: 512MiB
profile: web
profiles:
  base:
    extends: strict
    python:
      allow_modules: [math, json]
      modules:
        math: {deny: [factorial]}
        numpy: {}
    shell:
      deny: [cat]
    limits:
      memory: 1GiB
      pids: 32
    preload: [math]
  web:
    extends: base
    python:
      deny_builtins: []
      modules:
        json: {allow: [loads, dumps]}
    shell:
      allow: [ls]
    limits:
      cpus: 0.5
  plain:
    shell:
      deny: [curl]
`)
	web, err := c.ResolveProfile("")
	if err != nil {
		t.Fatal(err)
	}
	strict := BuiltinProfiles()["strict"]
	want := Profile{
		Python: PythonPolicy{
			Mode:         ModeAllowlist,            // from strict
			AllowModules: []string{"math", "json"}, // base replaced strict's list
			DenyModules:  strict.Python.DenyModules,
			Modules: map[string]ModuleRule{ // merged by module; numpy: {} lifted strict's rule
				"math":   {Deny: []string{"factorial"}},
				"json":   {Allow: []string{"loads", "dumps"}},
				"pandas": strict.Python.Modules["pandas"],
				"os":     strict.Python.Modules["os"],
				"gc":     strict.Python.Modules["gc"],
				"sys":    strict.Python.Modules["sys"],
			},
			DenyBuiltins:   []string{}, // web cleared it
			DenyAttributes: strict.Python.DenyAttributes,
			FileAccess:     FileAccessSandbox,
		},
		Shell:   ShellPolicy{Allow: []string{"ls"}, Deny: []string{"cat"}},
		Limits:  Limits{Timeout: "10s", Memory: "1GiB", CPUs: 0.5, Pids: 32},
		Preload: []string{"math"},
	}
	if !reflect.DeepEqual(web, want) {
		t.Errorf("ResolveProfile(web) =\n%+v\nwant\n%+v", web, want)
	}
	r, err := web.Limits.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if want := (ResolvedLimits{Timeout: 10 * time.Second, Memory: 1 << 30, CPUs: 0.5, Pids: 32}); r != want {
		t.Errorf("Resolve = %+v, want %+v", r, want)
	}

	// The longest chain allowed resolves.
	long := mustParse(t, longChain(MaxExtends))
	if p, err := long.ResolveProfile("p0"); err != nil || p.Python.Mode != ModeAllowlist {
		t.Errorf("ResolveProfile at the depth limit = %+v, %v", p.Python, err)
	}

	// No extends means default; Config.Limits still apply.
	plain, err := c.ResolveProfile("plain")
	if err != nil {
		t.Fatal(err)
	}
	def := BuiltinProfiles()["default"]
	if plain.Python.Mode != ModeDenylist || !reflect.DeepEqual(plain.Python.Modules, def.Python.Modules) ||
		!slices.Equal(plain.Shell.Deny, []string{"curl"}) || plain.Limits.Memory != "512MiB" {
		t.Errorf("plain = %+v", plain)
	}

	// Resolving twice gives equal, independent results.
	web.Python.AllowModules[0] = "os"
	if again, _ := c.ResolveProfile("web"); again.Python.AllowModules[0] != "math" {
		t.Error("ResolveProfile shares memory with the config")
	}

	_, err = c.ResolveProfile("nope")
	if want := `unknown profile "nope" (available: base, default, open, plain, strict, web)`; err == nil || err.Error() != want {
		t.Errorf("ResolveProfile(nope) = %v, want %s", err, want)
	}

	// A Config built in code is resolved safely even if it was never validated.
	bad := &Config{Profiles: map[string]Profile{"a": {Extends: "b"}, "b": {Extends: "a"}, "c": {Extends: "zz"}}}
	if _, err := bad.ResolveProfile("a"); err == nil || !strings.Contains(err.Error(), "extends cycle a -> b -> a") {
		t.Errorf("cycle: %v", err)
	}
	if _, err := bad.ResolveProfile("c"); err == nil || !strings.Contains(err.Error(), `extends unknown profile "zz"`) {
		t.Errorf("unknown extends: %v", err)
	}
	// A user profile may not shadow a builtin, even unvalidated.
	shadow := &Config{Profiles: map[string]Profile{"strict": {Python: PythonPolicy{Mode: ModeOff}}}}
	if p, _ := shadow.ResolveProfile("strict"); p.Python.Mode != ModeAllowlist {
		t.Error("a user profile named strict replaced the builtin")
	}
}

func TestLimitsResolve(t *testing.T) {
	tests := []struct {
		in   Limits
		want ResolvedLimits
		err  string
	}{
		{Limits{}, ResolvedLimits{}, ""},
		{Limits{Timeout: "1m30s", Memory: "256MiB", Disk: "1GB", Tmp: "64Mi", OutputLimit: "4096", CPUs: 1.5, Pids: 64},
			ResolvedLimits{Timeout: 90 * time.Second, Memory: 256 << 20, Disk: 1e9, Tmp: 64 << 20, Output: 4096, CPUs: 1.5, Pids: 64}, ""},
		{Limits{Timeout: "soon"}, ResolvedLimits{}, `timeout: invalid duration "soon"`},
		{Limits{Memory: "8MiB"}, ResolvedLimits{}, "memory: 8MiB is below the minimum of 16MiB"},
		{Limits{CPUs: 2000}, ResolvedLimits{}, "cpus: invalid value 2000"},
		{Limits{Pids: -3}, ResolvedLimits{}, "pids: invalid value -3"},
		{Limits{Pids: MaxPids + 1}, ResolvedLimits{}, "pids: invalid value 4194305"},
		{Limits{Tmp: "x", OutputLimit: "y"}, ResolvedLimits{}, "tmp: invalid size \"x\" (want e.g. 256MiB, 1GiB, 4096)\noutput_limit: invalid size"},
	}
	for _, tc := range tests {
		got, err := tc.in.Resolve()
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("%+v: got %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want %s", tc.in, err, tc.err)
		}
	}
}

func TestWarnings(t *testing.T) {
	c := mustParse(t, `
isolation: best_effort
profile: open
profiles:
  loose:
    python:
      deny_modules: []
      deny_builtins: []
      deny_attributes: []
    shell:
      allow: [ls, bash]
  fine:
    extends: strict
  web:
    extends: strict
    network: {mode: open}
network:
  allow_open: true
filter:
  disable: [aws_key]
`)
	want := []string{
		"isolation is best_effort: code runs even when a protection is unavailable, and each result lists what was dropped",
		`profile "open": python policy is off: imports, builtins and attributes are not checked, only the box protects the host`,
		`profile "open": shell has no rules: every command is allowed`,
		`profile "loose": python.deny_modules is empty: code may import any module, subprocess and socket included`,
		`profile "loose": python.deny_builtins is empty: eval, exec and compile are allowed, so the static checks can be bypassed`,
		`profile "loose": python.deny_attributes is empty: the known sandbox escape gadgets are not blocked`,
		`profile "loose": shell.allow includes "bash", which can run any other command`,
		`profile "web": network is open: its code may reach any public host through the egress proxy`,
		"network.allow_open is set: profiles and local runs may give code open network access (public hosts, through the egress proxy)",
		`filter rule "aws_key" is disabled: what it matches is no longer redacted from output`,
	}
	if got := c.Warnings(); !slices.Equal(got, want) {
		t.Errorf("Warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, name := range []string{"strict", "default"} {
		c := &Config{Profile: name}
		if w := c.Warnings(); len(w) != 0 {
			t.Errorf("profile %s: warnings %q", name, w)
		}
	}
}

func TestCheckFilterNames(t *testing.T) {
	c := mustParse(t, `filter:
  disable: [aws_key, email, nope]
  enable: [private_ip, jwt, what]
  rules:
    - {name: jwt, pattern: x}
    - {name: mine, pattern: y}
`)
	defaults, optIn := []string{"aws_key", "jwt"}, []string{"email", "private_ip"}
	err := c.CheckFilterNames(defaults, optIn)
	want := `m.yaml:2: filter.disable[1]: rule "email" is opt-in: it is off unless enabled
m.yaml:2: filter.disable[2]: unknown filter rule "nope" (default rules: aws_key, jwt)
m.yaml:3: filter.enable[1]: rule "jwt" is on by default
m.yaml:3: filter.enable[2]: unknown opt-in filter rule "what" (opt-in rules: email, private_ip)
m.yaml:5: filter.rules[0].name: "jwt" is the name of a builtin filter rule`
	if err == nil || err.Error() != want {
		t.Errorf("CheckFilterNames:\n%v\nwant:\n%s", err, want)
	}
	if err := Default().CheckFilterNames(defaults, optIn); err != nil {
		t.Error(err)
	}
}

func TestIsSecretEnv(t *testing.T) {
	f := Filter{SecretEnv: []string{"DATABASE_URL", "*_DSN"}}
	for name, want := range map[string]bool{
		"OPENAI_API_KEY": true, "OPENAI_API_KEY_2": true, "GITHUB_TOKEN": true, "aws_secret": true, "DB_PASSWORD": true,
		"MYPASSWORDFILE": true, "GCP_CREDENTIALS": true, "DATABASE_URL": true, "SENTRY_DSN": true,
		"HOME": false, "PATH": false, "KEYBOARD": false, "TOKENIZER": false,
	} {
		if got := f.IsSecretEnv(name); got != want {
			t.Errorf("IsSecretEnv(%s) = %v, want %v", name, got, want)
		}
	}
}

func TestExample(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("example warns: %q", w)
	}
	for _, name := range c.profileNames() {
		p, err := c.ResolveProfile(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := p.Limits.Resolve(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	a, _ := c.ResolveProfile("analysis")
	if a.Python.FileAccess != FileAccessSandbox || !slices.Contains(a.Python.AllowModules, "scipy") || a.Limits.Memory != "1GiB" || a.Limits.Pids != 64 {
		t.Errorf("analysis = %+v", a)
	}
	// The example mentions every setting.
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Config](), reflect.TypeFor[Limits](), reflect.TypeFor[Profile](),
		reflect.TypeFor[PythonPolicy](), reflect.TypeFor[ModuleRule](), reflect.TypeFor[ShellPolicy](),
		reflect.TypeFor[Filter](), reflect.TypeFor[FilterRule](), reflect.TypeFor[Server](), reflect.TypeFor[Sessions](),
		reflect.TypeFor[APIKey](), reflect.TypeFor[Quotas](), reflect.TypeFor[Audit](), reflect.TypeFor[AuditRetention](),
		reflect.TypeFor[Backend](), reflect.TypeFor[DockerBackend]()} {
		for key := range yamlFields(typ) {
			if !strings.Contains(string(data), key+":") {
				t.Errorf("example.yaml does not show %s.%s", typ.Name(), key)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want a not-exist error", err)
	}
	p := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(p, []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "big.yaml: file is larger than") {
		t.Errorf("Load(big) = %v", err)
	}
	p = filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte("limits:\n  pids: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+":2: limits.pids:") {
		t.Errorf("Load(bad) = %v", err)
	}
}

func TestSearchPath(t *testing.T) {
	tests := []struct {
		name            string
		moat, xdg, home string
		want            []string
	}{
		{"nothing set", "", "", "/home/u", []string{"moat.yaml", "/home/u/.config/moat/config.yaml", "/etc/moat/config.yaml"}},
		{"xdg", "", "/xdg", "/home/u", []string{"moat.yaml", "/xdg/moat/config.yaml", "/etc/moat/config.yaml"}},
		{"relative xdg is ignored", "", "rel", "/home/u", []string{"moat.yaml", "/home/u/.config/moat/config.yaml", "/etc/moat/config.yaml"}},
		{"moat_config first", "/srv/moat.yaml", "/xdg", "/home/u", []string{"/srv/moat.yaml", "moat.yaml", "/xdg/moat/config.yaml", "/etc/moat/config.yaml"}},
		{"no home", "", "", "", []string{"moat.yaml", "/etc/moat/config.yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvConfig, tc.moat)
			t.Setenv("XDG_CONFIG_HOME", tc.xdg)
			t.Setenv("HOME", tc.home)
			if got := SearchPath(); !slices.Equal(got, tc.want) {
				t.Errorf("SearchPath() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	if _, err := os.Stat("/etc/moat/config.yaml"); err == nil {
		t.Skip("/etc/moat/config.yaml exists on this machine")
	}
	dir := t.TempDir()
	write := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("isolation: strict\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // despite the umask
			t.Fatal(err)
		}
		return p
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	t.Setenv(EnvConfig, "")
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "xdg"))

	if got, err := Find(); got != "" || err != nil {
		t.Fatalf("Find() with no files = %q, %v; want defaults", got, err)
	}
	xdg := write(filepath.Join(dir, "xdg", "moat", "config.yaml"), 0o644)
	if got, err := Find(); got != xdg || err != nil {
		t.Fatalf("Find() = %q, %v; want %s", got, err, xdg)
	}
	local := write(filepath.Join(work, "moat.yaml"), 0o644)
	if got, err := Find(); got != "moat.yaml" || err != nil {
		t.Fatalf("Find() = %q, %v; want ./moat.yaml first", got, err)
	}
	if err := os.Chmod(local, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("Find() with a world-writable moat.yaml = %v", err)
	}
	if err := os.Remove(local); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(local, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Find() with a directory moat.yaml = %v", err)
	}

	explicit := write(filepath.Join(dir, "explicit.yaml"), 0o666) // named, so not checked
	t.Setenv(EnvConfig, explicit)
	if got, err := Find(); got != explicit || err != nil {
		t.Errorf("Find() with $MOAT_CONFIG = %q, %v", got, err)
	}
	t.Setenv(EnvConfig, filepath.Join(dir, "gone.yaml"))
	if _, err := Find(); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "$MOAT_CONFIG") {
		t.Errorf("Find() with a missing $MOAT_CONFIG = %v", err)
	}
}

func TestPreloadMustBeAllowed(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"denied in default", "profiles:\n  p:\n    preload: [pandas, subprocess]\n", `m.yaml:3: profiles.p.preload[1]: "subprocess" is denied by python.deny_modules (subprocess)`},
		{"submodule of a denied one", "profiles:\n  p:\n    preload: [os.path, multiprocessing.pool]\n", `m.yaml:3: profiles.p.preload[1]: "multiprocessing.pool" is denied`},
		{"not in strict's allowlist", "profiles:\n  p:\n    extends: strict\n    preload: [requests]\n", `m.yaml:4: profiles.p.preload[0]: "requests" is not in python.allow_modules`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseErr(t, tc.src); !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	for _, ok := range []string{
		"profiles:\n  p:\n    preload: [pandas, numpy, matplotlib.pyplot]\n",
		"profiles:\n  p:\n    extends: open\n    preload: [subprocess]\n",
	} {
		mustParse(t, ok)
	}
}

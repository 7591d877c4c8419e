package config

import (
	"math"
	"path"
	"strings"
	"time"
)

// Isolation modes (Config.Isolation).
const (
	// IsolationStrict refuses to run code when a configured protection is unavailable.
	IsolationStrict = "strict"
	// IsolationBestEffort runs code without the protections that are unavailable and
	// lists what it dropped in every result.
	IsolationBestEffort = "best_effort"
)

// Names of the builtin profiles (see BuiltinProfiles).
const (
	ProfileStrict  = "strict"
	ProfileDefault = "default"
	ProfileOpen    = "open"
)

// Python policy modes (PythonPolicy.Mode).
const (
	// ModeAllowlist lets user code import only AllowModules (and their submodules).
	ModeAllowlist = "allowlist"
	// ModeDenylist lets user code import anything but DenyModules.
	ModeDenylist = "denylist"
	// ModeOff switches the Python policy off: no import, builtin or attribute checks.
	ModeOff = "off"
)

// File access modes (PythonPolicy.FileAccess).
const (
	// FileAccessAny leaves file access to the box.
	FileAccessAny = "any"
	// FileAccessSandbox lets Python code open files only under /tmp and /workspace.
	FileAccessSandbox = "sandbox"
)

// Bounds on limits, the same as those of the moat run flags.
const (
	MinMemory = 16 << 20 // bytes; below this the Python runtime cannot start
	MinCPUs   = 0.01
	MaxCPUs   = 1024
	MaxPids   = 1 << 22 // the kernel's PID_MAX_LIMIT
	// MaxFilterMatch bounds FilterRule.MaxLen.
	MaxFilterMatch = 1 << 16
)

// Config is moat's whole configuration. The zero value (and an absent file) is the
// secure default: strict isolation, the "default" profile, the engine's default
// limits and every default filter rule on.
//
// To add a setting: add the field here with a yaml tag and a doc comment, check it in
// Validate (with its path, so the error points at its line), mention it in Warnings
// if it weakens isolation, and document it in testdata/example.yaml.
type Config struct {
	// Isolation is "strict" (the default when empty): moat refuses to run code when a
	// protection it would use is unavailable. "best_effort" runs without it and lists
	// what was dropped in each result.
	Isolation string `yaml:"isolation"`
	// Limits are the defaults for every execution; a profile's Limits override them,
	// and request or flag values override both. Unset fields take the engine's
	// defaults (box.DefaultLimits).
	Limits Limits `yaml:"limits"`
	// Profile is the profile used when a request names none; empty means "default".
	Profile string `yaml:"profile"`
	// Profiles are user-defined profiles by name. A name matches [a-z0-9_-]+ and may
	// not be a builtin name (strict, default, open); extend a builtin instead.
	Profiles map[string]Profile `yaml:"profiles"`
	// Filter configures the output filter.
	Filter Filter `yaml:"filter"`
	// Server configures `moat serve`: its address, data directory, size caps,
	// sessions and API keys. See ResolveServer.
	Server Server `yaml:"server"`
	// Audit configures the audit trail of moat run and moat serve. See ResolveAudit.
	Audit Audit `yaml:"audit"`
	// Network holds the egress proxy's settings that profiles cannot change; each
	// profile's network says what its code may reach.
	Network Network `yaml:"network"`
	// Backend chooses what makes boxes: native (the default), docker or gvisor. See
	// ResolveBackend.
	Backend Backend `yaml:"backend"`

	file  string          // name given to Parse, for messages
	lines map[string]int  // setting path -> line in file, for messages; nil if built in code
	set   map[string]bool // settings the file gives a non-null value
}

// Limits bound one execution. Every field is optional; an unset (zero) field takes
// its value from the level below (profile over Config.Limits over the engine's
// defaults). In a file, a key given explicitly must have a valid, non-zero value:
// "cpus: 0" is an error, not "unset".
type Limits struct {
	// Timeout is the wall-clock limit, a Go duration: "30s", "2m".
	Timeout string `yaml:"timeout"`
	// Memory is the RAM limit, a size: "256MiB", "1GiB"; at least 16MiB.
	Memory string `yaml:"memory"`
	// Disk is the size of the writable workspace.
	Disk string `yaml:"disk"`
	// Tmp is the size of /tmp.
	Tmp string `yaml:"tmp"`
	// OutputLimit is how many bytes of output are kept per stream (head and tail).
	OutputLimit string `yaml:"output_limit"`
	// CPUs is the CPU bandwidth in cores, from 0.01 to 1024: 0.5, 2.
	CPUs float64 `yaml:"cpus"`
	// Pids limits processes and threads, from 1 to 4194304.
	Pids int `yaml:"pids"`
}

// ResolvedLimits are Limits parsed for the engine. A zero field means "not set".
type ResolvedLimits struct {
	Timeout time.Duration
	Memory  int64 // bytes
	Disk    int64 // bytes
	Tmp     int64 // bytes
	Output  int64 // bytes per stream
	CPUs    float64
	Pids    int64
}

// Profile is a named set of language rules and limits. In a user-defined profile
// every field is optional and inherits from Extends; see ResolveProfile for how.
type Profile struct {
	// Extends names the profile this one starts from: a builtin or another
	// user-defined profile, in any order (cycles are errors). Empty means "default".
	Extends string `yaml:"extends"`
	// Python holds the rules for Python code.
	Python PythonPolicy `yaml:"python"`
	// Shell holds the rules for shell scripts.
	Shell ShellPolicy `yaml:"shell"`
	// Limits override Config.Limits for executions under this profile.
	Limits Limits `yaml:"limits"`
	// Preload lists Python modules imported before user code arrives (by the warm
	// pool), so that their import time is not paid per execution. Preloading does
	// not allow user code to import them.
	Preload []string `yaml:"preload"`
	// Network says what the profile's code may reach; by default nothing.
	Network NetworkPolicy `yaml:"network"`
}

// PythonPolicy is the language-level policy for Python: AST checks before the code
// runs, audit hooks while it runs. It is defence in depth and a source of clear
// errors; the box is what keeps the host safe.
//
// Module names are dotted Python names ("os", "os.path"); a name covers its
// submodules, so denying "importlib" denies "importlib.util" too.
type PythonPolicy struct {
	// Mode is "allowlist", "denylist" or "off".
	Mode string `yaml:"mode"`
	// AllowModules are the modules user code may import in allowlist mode (with their
	// submodules). Only meaningful in allowlist mode.
	AllowModules []string `yaml:"allow_modules"`
	// DenyModules are modules user code may never import, in either mode; in
	// allowlist mode they carve submodules out of allowed packages.
	DenyModules []string `yaml:"deny_modules"`
	// Modules are per-module attribute rules, keyed by module name ("os").
	Modules map[string]ModuleRule `yaml:"modules"`
	// DenyBuiltins are builtins user code may not call or reference (eval, exec).
	DenyBuiltins []string `yaml:"deny_builtins"`
	// DenyAttributes are attribute names user code may not read, write or delete,
	// directly or through getattr and friends: the escape gadgets (__subclasses__,
	// __globals__, frame and code attributes).
	DenyAttributes []string `yaml:"deny_attributes"`
	// FileAccess is "any" (file access is left to the box) or "sandbox" (open and
	// friends may only reach /tmp and /workspace).
	FileAccess string `yaml:"file_access"`
}

// ModuleRule limits the attributes of one module user code may use. Patterns are
// attribute names or path.Match globs ("exec*"). Allow and Deny are mutually
// exclusive: Allow lists the only attributes permitted, Deny the ones refused. An
// empty rule permits everything.
type ModuleRule struct {
	// Allow lists the only attributes user code may use.
	Allow []string `yaml:"allow"`
	// Deny lists attributes user code may not use.
	Deny []string `yaml:"deny"`
}

// ShellPolicy is the language-level policy for shell scripts, checked on every
// command of the parsed script (pipelines, substitutions and subshells included).
// Names are bare command names, matched against the command's base name.
type ShellPolicy struct {
	// Allow, when non-empty, makes the policy an allowlist: only these commands run.
	Allow []string `yaml:"allow"`
	// Deny lists commands that never run (applied after Allow).
	Deny []string `yaml:"deny"`
}

// Filter configures the output filter, which redacts secrets and caps sizes. Rule
// names belong to the filter package: Validate checks only their spelling, and the
// caller checks them against the filter's rule set with CheckFilterNames.
type Filter struct {
	// Disable lists default rules to turn off.
	Disable []string `yaml:"disable"`
	// Enable lists opt-in rules to turn on (for example email, private_ip, system_path).
	Enable []string `yaml:"enable"`
	// Rules are custom redaction rules.
	Rules []FilterRule `yaml:"rules"`
	// SecretEnv lists names (or path.Match globs) of variables in moat's own
	// environment whose values are redacted wherever they appear in output. They are
	// added to DefaultSecretEnv, which always applies. Matching ignores case.
	SecretEnv []string `yaml:"secret_env"`
}

// FilterRule is a custom redaction rule.
type FilterRule struct {
	// Name identifies the rule in results ("redactions"); [a-z0-9_-]+.
	Name string `yaml:"name"`
	// Pattern is a Go (RE2) regular expression; it may not match the empty string.
	Pattern string `yaml:"pattern"`
	// MaxLen is the longest match in bytes the filter must find across chunk
	// boundaries of streamed output; 0 takes the filter's default.
	MaxLen int `yaml:"max_len"`
}

// DefaultSecretEnv are the patterns of environment variable names whose values are
// always redacted from output, in addition to Filter.SecretEnv.
var DefaultSecretEnv = []string{"*_KEY", "*_API_KEY*", "*_TOKEN", "*_SECRET", "*PASSWORD*", "*PASSWD*", "*_CREDENTIALS"}

// Default returns the config used when no file exists. It is the zero Config with
// its implied values spelled out.
func Default() *Config {
	return &Config{Isolation: IsolationStrict, Profile: ProfileDefault}
}

// BestEffort reports whether isolation is best_effort.
func (c *Config) BestEffort() bool { return c.Isolation == IsolationBestEffort }

// DefaultProfile returns the name of the profile used when a request names none.
func (c *Config) DefaultProfile() string {
	if c.Profile == "" {
		return ProfileDefault
	}
	return c.Profile
}

// IsSecretEnv reports whether the value of the environment variable name must be
// redacted: its name matches DefaultSecretEnv or f.SecretEnv, ignoring case.
func (f Filter) IsSecretEnv(name string) bool {
	upper := strings.ToUpper(name)
	for _, list := range [][]string{DefaultSecretEnv, f.SecretEnv} {
		for _, pat := range list {
			if ok, _ := path.Match(strings.ToUpper(pat), upper); ok {
				return true
			}
		}
	}
	return false
}

// Resolve parses l for the engine. Unset fields stay zero. It returns every problem
// found, joined, each naming its field.
func (l Limits) Resolve() (ResolvedLimits, error) {
	var ps problems
	r := l.check(&ps, "", nil)
	if err := ps.err(); err != nil {
		return ResolvedLimits{}, err
	}
	return r, nil
}

// check parses and checks l, whose settings live under prefix ("limits",
// "profiles.web.limits"). present reports whether the file spelled out a key, so
// that an explicit zero or empty value is an error rather than "unset".
func (l Limits) check(ps *problems, prefix string, present func(path string) bool) ResolvedLimits {
	var r ResolvedLimits
	set := func(key string, zero bool) (string, bool) {
		p := join(prefix, key)
		return p, !zero || (present != nil && present(p))
	}
	if p, ok := set("timeout", l.Timeout == ""); ok {
		d, err := ParseDuration(l.Timeout)
		if err != nil {
			ps.add(p, "%v", err)
		}
		r.Timeout = d
	}
	sizes := []struct {
		key string
		val string
		dst *int64
	}{
		{"memory", l.Memory, &r.Memory},
		{"disk", l.Disk, &r.Disk},
		{"tmp", l.Tmp, &r.Tmp},
		{"output_limit", l.OutputLimit, &r.Output},
	}
	for _, s := range sizes {
		p, ok := set(s.key, s.val == "")
		if !ok {
			continue
		}
		n, err := ParseSize(s.val)
		if err != nil {
			ps.add(p, "%v", err)
			continue
		}
		*s.dst = n
	}
	if r.Memory != 0 && r.Memory < MinMemory {
		ps.add(join(prefix, "memory"), "%s is below the minimum of 16MiB", l.Memory)
	}
	if p, ok := set("cpus", l.CPUs == 0); ok {
		if math.IsNaN(l.CPUs) || l.CPUs < MinCPUs || l.CPUs > MaxCPUs {
			ps.add(p, "invalid value %v (want a number of cores from 0.01 to 1024)", l.CPUs)
		}
		r.CPUs = l.CPUs
	}
	if p, ok := set("pids", l.Pids == 0); ok {
		if l.Pids < 1 || l.Pids > MaxPids {
			ps.add(p, "invalid value %d (want a whole number from 1 to %d)", l.Pids, MaxPids)
		}
		r.Pids = int64(l.Pids)
	}
	return r
}

// over returns l with every set field of o laid over it.
func (l Limits) over(o Limits) Limits {
	pick := func(a, b string) string {
		if b != "" {
			return b
		}
		return a
	}
	l.Timeout = pick(l.Timeout, o.Timeout)
	l.Memory = pick(l.Memory, o.Memory)
	l.Disk = pick(l.Disk, o.Disk)
	l.Tmp = pick(l.Tmp, o.Tmp)
	l.OutputLimit = pick(l.OutputLimit, o.OutputLimit)
	if o.CPUs != 0 {
		l.CPUs = o.CPUs
	}
	if o.Pids != 0 {
		l.Pids = o.Pids
	}
	return l
}

// join appends a key to a setting path.
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

package python

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Mode says which imports a Policy allows.
type Mode string

const (
	// ModeDenylist allows every import but DenyModules (and their submodules).
	ModeDenylist Mode = "denylist"
	// ModeAllowlist allows only AllowModules (and their submodules) to be imported by
	// the program; libraries still import what they need.
	ModeAllowlist Mode = "allowlist"
	// ModeOff applies no rule at all: the runner only reports a trailing expression.
	ModeOff Mode = "off"
)

// FileAccess says where the program may write.
type FileAccess string

const (
	// FileAny lets the program write wherever the box lets it.
	FileAny FileAccess = "any"
	// FileSandbox refuses writes outside /tmp and /workspace.
	FileSandbox FileAccess = "sandbox"
)

// Policy is what the runner enforces, written to /.moat/policy.json. The JSON field
// names are a contract with runner.py: add fields, never rename them. The config
// package produces the real profiles; DefaultPolicy and StrictPolicy approximate them.
type Policy struct {
	// Profile names the profile in every message ("blocked by profile 'default'").
	Profile string `json:"profile"`
	// Mode is denylist, allowlist or off.
	Mode Mode `json:"mode"`
	// AllowModules are the modules the program may import in allowlist mode.
	AllowModules []string `json:"allow_modules"`
	// DenyModules are the modules the program may not import in denylist mode.
	DenyModules []string `json:"deny_modules"`
	// Modules restricts attributes of a module, by glob ("exec*"): os.system,
	// `from os import system`. Applies in both modes; rules for "os" also cover posix.
	Modules map[string]ModuleRule `json:"modules"`
	// DenyBuiltins are builtins the program may not use: refused by name, removed
	// from its builtins (but __import__, which the import statement needs), and the
	// dynamic-code ones (eval, exec, compile) refused at run time.
	DenyBuiltins []string `json:"deny_builtins"`
	// DenyAttributes are attribute names the program may not use
	// (x.__subclasses__, getattr(x, '__globals__'), '{0.__globals__}'.format(x)).
	DenyAttributes []string `json:"deny_attributes"`
	// FileAccess is any or sandbox.
	FileAccess FileAccess `json:"file_access"`
}

// ModuleRule restricts a module's attributes. Exactly one of Allow and Deny is set.
type ModuleRule struct {
	// Allow lists the only attributes the program may use.
	Allow []string `json:"allow,omitempty"`
	// Deny lists attributes the program may not use.
	Deny []string `json:"deny,omitempty"`
}

// JSON returns the policy as runner.py reads it: lists are never null.
func (p Policy) JSON() []byte {
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	p.AllowModules = nonNil(p.AllowModules)
	p.DenyModules = nonNil(p.DenyModules)
	p.DenyBuiltins = nonNil(p.DenyBuiltins)
	p.DenyAttributes = nonNil(p.DenyAttributes)
	if p.Modules == nil {
		p.Modules = map[string]ModuleRule{}
	}
	b, err := json.Marshal(p)
	if err != nil {
		// Strings, slices and maps of strings always marshal.
		panic(fmt.Sprintf("python: marshal policy: %v", err))
	}
	return b
}

var (
	moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	attrGlob   = regexp.MustCompile(`^[A-Za-z0-9_*]+$`)
)

// Validate rejects a policy the runner would refuse or misread.
func (p Policy) Validate() error {
	if p.Profile == "" || strings.ContainsFunc(p.Profile, func(r rune) bool { return r < 0x20 || r == '\'' }) {
		return fmt.Errorf("python policy: profile name %q is empty or has quotes or control characters", p.Profile)
	}
	switch p.Mode {
	case ModeDenylist, ModeAllowlist, ModeOff:
	default:
		return fmt.Errorf("python policy %s: mode %q is not denylist, allowlist or off", p.Profile, p.Mode)
	}
	switch p.FileAccess {
	case FileAny, FileSandbox:
	default:
		return fmt.Errorf("python policy %s: file_access %q is not any or sandbox", p.Profile, p.FileAccess)
	}
	for _, list := range []struct {
		field string
		names []string
		re    *regexp.Regexp
	}{
		{"allow_modules", p.AllowModules, moduleName},
		{"deny_modules", p.DenyModules, moduleName},
		{"deny_builtins", p.DenyBuiltins, identifier},
		{"deny_attributes", p.DenyAttributes, identifier},
	} {
		for _, n := range list.names {
			if !list.re.MatchString(n) {
				return fmt.Errorf("python policy %s: %s entry %q is not a valid name", p.Profile, list.field, n)
			}
		}
	}
	mods := make([]string, 0, len(p.Modules))
	for m := range p.Modules {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		r := p.Modules[m]
		if !moduleName.MatchString(m) {
			return fmt.Errorf("python policy %s: modules entry %q is not a valid module name", p.Profile, m)
		}
		if (len(r.Allow) == 0) == (len(r.Deny) == 0) {
			return fmt.Errorf("python policy %s: modules.%s needs exactly one of allow and deny", p.Profile, m)
		}
		for _, g := range append(append([]string{}, r.Allow...), r.Deny...) {
			if !attrGlob.MatchString(g) {
				return fmt.Errorf("python policy %s: modules.%s pattern %q is not an attribute glob", p.Profile, m, g)
			}
		}
	}
	return nil
}

// processFuncs are the os functions that start or signal processes.
var processFuncs = []string{"system", "popen", "exec*", "spawn*", "fork", "forkpty", "kill", "killpg", "posix_spawn*"}

// runnerGuards keep the program away from the runner's own machinery: frames, tracing
// hooks, audit hooks and the garbage collector's object lists.
var runnerGuards = map[string]ModuleRule{
	"sys": {Deny: []string{"_getframe", "_current_frames", "settrace", "setprofile", "addaudithook"}},
	"gc":  {Deny: []string{"get_objects", "get_referrers", "get_referents"}},
}

// gadgetAttributes are the attributes pyjail escapes walk through.
var gadgetAttributes = []string{
	"__subclasses__", "__globals__", "__builtins__", "__code__", "__mro__", "__bases__", "__base__",
	"f_globals", "f_locals", "f_back", "f_builtins", "gi_frame", "gi_code", "cr_frame", "ag_frame",
	"tb_frame", "__closure__", "__reduce__", "__reduce_ex__", "__loader__", "__spec__",
}

// DefaultPolicy approximates the "default" profile: everything but shells, processes,
// network, native code and interpreter internals.
func DefaultPolicy() Policy {
	mods := map[string]ModuleRule{"os": {Deny: processFuncs}}
	for k, v := range runnerGuards {
		mods[k] = v
	}
	return Policy{
		Profile:        "default",
		Mode:           ModeDenylist,
		DenyModules:    []string{"subprocess", "socket", "ctypes", "_ctypes", "multiprocessing", "pty", "importlib", "_posixsubprocess", "_socket"},
		Modules:        mods,
		DenyBuiltins:   []string{"eval", "exec", "compile", "__import__", "breakpoint"},
		DenyAttributes: append([]string{}, gadgetAttributes...),
		FileAccess:     FileAny,
	}
}

// StrictPolicy approximates the "strict" profile: data analysis only, with an
// allowlist of modules, a few os functions, and writes under /workspace and /tmp.
func StrictPolicy() Policy {
	mods := map[string]ModuleRule{
		"os": {Allow: []string{"path", "getcwd", "listdir", "scandir", "walk", "makedirs", "mkdir",
			"remove", "unlink", "rename", "replace", "stat", "fspath", "sep", "linesep", "getenv",
			"environ", "cpu_count", "PathLike"}},
	}
	for k, v := range runnerGuards {
		mods[k] = v
	}
	return Policy{
		Profile: "strict",
		Mode:    ModeAllowlist,
		AllowModules: []string{
			"__future__", "abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections",
			"contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "enum", "fractions",
			"functools", "hashlib", "heapq", "io", "itertools", "json", "math", "matplotlib", "numbers",
			"numpy", "operator", "os", "pandas", "pathlib", "pprint", "random", "re", "statistics",
			"string", "struct", "textwrap", "time", "typing", "unicodedata", "uuid", "zoneinfo",
		},
		Modules: mods,
		DenyBuiltins: []string{"eval", "exec", "compile", "__import__", "breakpoint", "globals", "locals",
			"vars", "help", "input"},
		DenyAttributes: append(append([]string{}, gadgetAttributes...),
			"__dict__", "__self__", "__func__", "__wrapped__", "__traceback__", "f_code", "co_code"),
		FileAccess: FileSandbox,
	}
}

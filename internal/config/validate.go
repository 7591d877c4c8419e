package config

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
)

var (
	profileNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_-]{1,64}$`) })
	ruleNameRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_-]{1,64}$`) })
	identRE       = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	moduleRE      = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	})
	// attrGlobRE: an attribute name with path.Match metacharacters, no dots.
	attrGlobRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_*?\[\]^!-]+$`) })
	envGlobRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_*?\[\]^!-]+$`) })
)

// Validate checks c as a whole and returns an *Error listing every problem, with
// its line when c came from Load or Parse:
//
//   - isolation is strict or best_effort; profile names an existing profile;
//   - limits (top-level and per profile) parse, and lie within MinMemory, MinCPUs to
//     MaxCPUs and 1 to MaxPids; a key given explicitly may not be zero or empty;
//   - user profile names match [a-z0-9_-]+ and are not builtin names; extends names
//     an existing profile and forms no cycle;
//   - python: mode is allowlist, denylist or off; file_access is any or sandbox;
//     module names are dotted Python names; builtin and attribute names are
//     identifiers; a module rule has allow or deny, not both, with valid globs;
//     rules that have no effect in the resolved mode (allow_modules outside
//     allowlist mode, any rule with mode off) are errors, as they would mislead;
//   - shell command names are bare names;
//   - filter rule names are spelled [a-z0-9_-]+ and not both enabled and disabled;
//     custom rules have a unique name and a valid Go regular expression that
//     cannot match the empty string; secret_env entries are names or globs;
//   - server: listen is host:port; data_dir is absolute; sizes and durations
//     parse and are positive; sessions.idle_ttl is at most max_lifetime; counts
//     and quotas are from 1 to MaxQuota; rates read N/s, N/m or N/h; each api_keys
//     entry has a unique principal name ([a-z0-9_-]+), exactly one of key_env (a
//     variable name not shared with another key) and key_sha256 (64 hex digits,
//     not shared), and profiles that exist; max_limits are checked as limits;
//   - network: a profile's mode is none, allowlist (with destinations) or open
//     (only with network.allow_open); allow entries and secret hosts parse as
//     egress rules; secrets name valid variables, once each; limits parse;
//     network.hosts maps valid names to IP addresses; upstream_ca is absolute;
//   - audit: dir and a file sink are absolute paths; failure is fail_closed or
//     fail_open; buffer is from 1 to MaxAuditBuffer; code_max is a size or none;
//     retention.max_age is a duration (days allowed), max_records positive.
//   - backend: name and every fallback entry are native, docker or gvisor, the
//     fallback names neither backend.name nor one backend twice; docker.runtime is
//     runc or runsc; docker.image is an image reference; docker.host is
//     unix:///path or tcp://host:port; gvisor.runsc and gvisor.rootfs are absolute
//     paths, gvisor.platform ptrace, systrap or kvm.
//
// Validate does not read the key_env variables: ResolveServer does.
//
// Whether filter rule names exist is up to the filter package: the caller checks
// them with CheckFilterNames.
func (c *Config) Validate() error {
	ps := &problems{file: c.file, lines: c.lines}
	present := func(p string) bool { return c.set[p] }

	switch c.Isolation {
	case "", IsolationStrict, IsolationBestEffort:
	default:
		ps.add("isolation", "unknown isolation %q (want strict or best_effort)", c.Isolation)
	}
	c.Limits.check(ps, "limits", present)
	if c.Profile != "" || present("profile") {
		if _, ok := c.lookup(c.Profile, BuiltinProfiles()); !ok {
			ps.add("profile", "unknown profile %q (available: %s)", c.Profile, strings.Join(c.profileNames(), ", "))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Profiles)) {
		c.checkProfile(ps, name, present)
	}
	c.Filter.check(ps)
	c.checkNetworkSettings(ps)
	c.checkServer(ps, present, nil)
	c.checkAudit(ps, present)
	c.checkBackend(ps)
	return ps.err()
}

// checkProfile checks the user-defined profile name.
func (c *Config) checkProfile(ps *problems, name string, present func(string) bool) {
	p := c.Profiles[name]
	base := "profiles." + seg(name)
	switch {
	case isBuiltin(name):
		ps.add(base, "redefines the builtin profile %q (choose another name and use extends: %s)", name, name)
	case !profileNameRE().MatchString(name):
		ps.add(base, "invalid profile name %q (want 1 to 64 of a-z, 0-9, _ and -)", name)
	}
	chainOK := c.checkExtends(ps, name, base)

	py := base + ".python"
	switch p.Python.Mode {
	case "", ModeAllowlist, ModeDenylist, ModeOff:
	default:
		ps.add(py+".mode", "unknown mode %q (want allowlist, denylist or off)", p.Python.Mode)
	}
	switch p.Python.FileAccess {
	case "", FileAccessAny, FileAccessSandbox:
	default:
		ps.add(py+".file_access", "unknown file access %q (want any or sandbox)", p.Python.FileAccess)
	}
	checkList(ps, py+".allow_modules", p.Python.AllowModules, checkModule)
	checkList(ps, py+".deny_modules", p.Python.DenyModules, checkModule)
	for _, mod := range slices.Sorted(maps.Keys(p.Python.Modules)) {
		mp := py + ".modules." + seg(mod)
		if msg := checkModule(mod); msg != "" {
			ps.add(mp, "%s", msg)
		}
		r := p.Python.Modules[mod]
		if len(r.Allow) > 0 && len(r.Deny) > 0 {
			ps.add(mp, "allow and deny are mutually exclusive (allow lists the only attributes permitted)")
		}
		checkList(ps, mp+".allow", r.Allow, checkAttrGlob)
		checkList(ps, mp+".deny", r.Deny, checkAttrGlob)
	}
	checkList(ps, py+".deny_builtins", p.Python.DenyBuiltins, checkIdent)
	checkList(ps, py+".deny_attributes", p.Python.DenyAttributes, checkIdent)
	checkList(ps, base+".shell.allow", p.Shell.Allow, checkCommand)
	checkList(ps, base+".shell.deny", p.Shell.Deny, checkCommand)
	p.Limits.check(ps, base+".limits", present)
	checkList(ps, base+".preload", p.Preload, checkModule)
	c.checkNetwork(ps, base+".network", p.Network)

	if !chainOK {
		return
	}
	r, err := c.ResolveProfile(name)
	if err != nil {
		return // reported by checkExtends
	}
	checkResolvedNetwork(ps, base+".network", r.Network)
	for i, m := range p.Preload {
		if why := r.Python.refuses(m); why != "" {
			ps.add(fmt.Sprintf("%s.preload[%d]", base, i), "%s: preloading would hand user code a module the profile keeps from it", why)
		}
	}
	switch r.Python.Mode {
	case ModeOff:
		if p.Python.hasRules() {
			ps.add(py, "python rules have no effect with mode off (set python.mode to allowlist or denylist)")
		}
	case ModeDenylist:
		if len(p.Python.AllowModules) > 0 {
			ps.add(py+".allow_modules", "has no effect in denylist mode (set python.mode: allowlist, or use deny_modules)")
		}
	}
}

// checkExtends reports an unknown extends target and cycles through name, and says
// whether the chain from name reaches a builtin.
func (c *Config) checkExtends(ps *problems, name, base string) bool {
	builtins := BuiltinProfiles()
	if ext := c.Profiles[name].Extends; ext != "" {
		if _, ok := c.lookup(ext, builtins); !ok {
			ps.add(base+".extends", "unknown profile %q (available: %s)", ext, strings.Join(c.profileNames(), ", "))
			return false
		}
	}
	seen := []string{name}
	for cur := name; !isBuiltin(cur); {
		if len(seen) > MaxExtends {
			ps.add(base+".extends", "extends chain is longer than %d profiles", MaxExtends)
			return false
		}
		next := c.Profiles[cur].Extends
		if next == "" {
			next = ProfileDefault
		}
		if _, ok := c.lookup(next, builtins); !ok {
			return false // reported on cur
		}
		if next == name {
			ps.add(base+".extends", "extends cycle %s -> %s", strings.Join(seen, " -> "), name)
			return false
		}
		if slices.Contains(seen, next) {
			return false // a cycle further up, reported on its members
		}
		seen = append(seen, next)
		cur = next
	}
	return true
}

// hasRules reports whether p sets any rule (as opposed to the mode).
func (p PythonPolicy) hasRules() bool {
	return len(p.AllowModules) > 0 || len(p.DenyModules) > 0 || len(p.Modules) > 0 ||
		len(p.DenyBuiltins) > 0 || len(p.DenyAttributes) > 0 || p.FileAccess == FileAccessSandbox
}

// check checks the spelling of the filter settings.
func (f Filter) check(ps *problems) {
	checkList(ps, "filter.disable", f.Disable, checkRuleName)
	checkList(ps, "filter.enable", f.Enable, checkRuleName)
	for i, name := range f.Enable {
		if slices.Contains(f.Disable, name) {
			ps.add(fmt.Sprintf("filter.enable[%d]", i), "rule %q is both enabled and disabled", name)
		}
	}
	seen := map[string]bool{}
	for i, r := range f.Rules {
		rp := fmt.Sprintf("filter.rules[%d]", i)
		switch {
		case r.Name == "":
			ps.add(rp+".name", "missing rule name")
		case !ruleNameRE().MatchString(r.Name):
			ps.add(rp+".name", "invalid rule name %q (want 1 to 64 of a-z, 0-9, _ and -)", r.Name)
		case seen[r.Name]:
			ps.add(rp+".name", "duplicate rule name %q", r.Name)
		}
		seen[r.Name] = true
		if msg := checkPattern(r.Pattern); msg != "" {
			ps.add(rp+".pattern", "%s", msg)
		}
		if r.MaxLen < 0 || r.MaxLen > MaxFilterMatch {
			ps.add(rp+".max_len", "invalid value %d (want 0 for the default, up to %d)", r.MaxLen, MaxFilterMatch)
		}
	}
	checkList(ps, "filter.secret_env", f.SecretEnv, checkEnvGlob)
}

// CheckFilterNames checks the filter rule names of c against the filter package's
// rule set: filter.disable must name default rules, filter.enable opt-in rules, and
// custom rules may not take a builtin rule's name. The filter package owns the
// names, so Validate leaves this to the caller: cmd/moat calls it with the filter's
// lists after Load.
func (c *Config) CheckFilterNames(defaults, optIn []string) error {
	ps := &problems{file: c.file, lines: c.lines}
	for i, name := range c.Filter.Disable {
		p := fmt.Sprintf("filter.disable[%d]", i)
		switch {
		case slices.Contains(defaults, name):
		case slices.Contains(optIn, name):
			ps.add(p, "rule %q is opt-in: it is off unless enabled", name)
		default:
			ps.add(p, "unknown filter rule %q (default rules: %s)", name, strings.Join(defaults, ", "))
		}
	}
	for i, name := range c.Filter.Enable {
		p := fmt.Sprintf("filter.enable[%d]", i)
		switch {
		case slices.Contains(optIn, name):
		case slices.Contains(defaults, name):
			ps.add(p, "rule %q is on by default", name)
		default:
			ps.add(p, "unknown opt-in filter rule %q (opt-in rules: %s)", name, strings.Join(optIn, ", "))
		}
	}
	for i, r := range c.Filter.Rules {
		if slices.Contains(defaults, r.Name) || slices.Contains(optIn, r.Name) {
			ps.add(fmt.Sprintf("filter.rules[%d].name", i), "%q is the name of a builtin filter rule", r.Name)
		}
	}
	return ps.err()
}

// checkList runs check on every item of list, reporting at path[i].
func checkList(ps *problems, path string, list []string, check func(string) string) {
	for i, s := range list {
		if msg := check(s); msg != "" {
			ps.add(fmt.Sprintf("%s[%d]", path, i), "%s", msg)
		}
	}
}

// The item checks return a message, or "" if the item is fine.

func checkModule(s string) string {
	switch {
	case s == "":
		return "empty module name"
	case !moduleRE().MatchString(s):
		return fmt.Sprintf("invalid module name %q (want a dotted python name such as os.path)", s)
	}
	return ""
}

func checkIdent(s string) string {
	switch {
	case s == "":
		return "empty name"
	case !identRE().MatchString(s):
		return fmt.Sprintf("invalid name %q (want a python identifier)", s)
	}
	return ""
}

func checkAttrGlob(s string) string {
	switch {
	case s == "":
		return "empty attribute pattern"
	case strings.Contains(s, "."):
		return fmt.Sprintf("invalid attribute pattern %q: one attribute per pattern (give submodules their own key, e.g. os.path)", s)
	case !attrGlobRE().MatchString(s):
		return fmt.Sprintf("invalid attribute pattern %q (want a name or a glob such as exec*)", s)
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Sprintf("invalid glob %q: %v", s, err)
	}
	return ""
}

func checkCommand(s string) string {
	switch {
	case s == "":
		return "empty command name"
	case strings.Contains(s, "/"):
		return fmt.Sprintf("invalid command name %q: give the bare name, it matches the command in any directory", s)
	case strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Sprintf("invalid command name %q", s)
	}
	return ""
}

func checkRuleName(s string) string {
	if !ruleNameRE().MatchString(s) {
		return fmt.Sprintf("invalid rule name %q (want 1 to 64 of a-z, 0-9, _ and -)", s)
	}
	return ""
}

func checkEnvGlob(s string) string {
	switch {
	case s == "":
		return "empty variable name"
	case !envGlobRE().MatchString(s):
		return fmt.Sprintf("invalid variable name %q (want a name or a glob such as *_TOKEN)", s)
	}
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Sprintf("invalid glob %q: %v", s, err)
	}
	return ""
}

// checkPattern compiles a custom filter rule's regular expression. The filter
// package compiles it again; doing it here too puts the error on its line.
func checkPattern(s string) string {
	if s == "" {
		return "missing pattern"
	}
	if _, err := regexp.Compile(s); err != nil {
		if se, ok := errors.AsType[*syntax.Error](err); ok {
			return fmt.Sprintf("invalid regular expression %q: %s", s, se.Code)
		}
		return fmt.Sprintf("invalid regular expression %q", s)
	}
	if matchesEmpty(s) {
		return fmt.Sprintf("regular expression %q can match the empty string", s)
	}
	return ""
}

// matchesEmpty reports whether the regular expression s can match without consuming
// a character anywhere in a text (like `\b` or `x*`), treating `^`, `$` and `\b` as
// satisfiable. Such a rule would report redactions of nothing.
func matchesEmpty(s string) bool {
	re, err := syntax.Parse(s, syntax.Perl)
	if err != nil {
		return false
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return false
	}
	seen := make([]bool, len(prog.Inst))
	stack := []uint32{uint32(prog.Start)}
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		switch in := prog.Inst[pc]; in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Out, in.Arg)
		case syntax.InstCapture, syntax.InstNop, syntax.InstEmptyWidth:
			stack = append(stack, in.Out)
		}
	}
	return false
}

// refuses says why the policy keeps user code from importing module, or "".
func (pp PythonPolicy) refuses(module string) string {
	covers := func(list []string) string {
		for _, m := range list {
			if module == m || strings.HasPrefix(module, m+".") {
				return m
			}
		}
		return ""
	}
	switch pp.Mode {
	case ModeOff:
		return ""
	case ModeAllowlist:
		if covers(pp.AllowModules) == "" {
			return fmt.Sprintf("%q is not in python.allow_modules", module)
		}
	}
	if m := covers(pp.DenyModules); m != "" {
		return fmt.Sprintf("%q is denied by python.deny_modules (%s)", module, m)
	}
	return ""
}

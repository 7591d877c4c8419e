package config

import (
	"fmt"
	"maps"
	"slices"
)

// commandRunners are commands that run other commands (or any code), so an allow
// list that contains one allows everything.
var commandRunners = []string{
	"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "env", "xargs",
	"find", "nohup", "timeout", "nice", "stdbuf", "setsid", "script", "watch", "eval",
	"exec", "source", ".", "python", "python3", "perl", "ruby", "node", "php", "lua",
	"tclsh", "make", "git",
}

// Warnings lists, in plain words, the settings of a valid config that weaken
// isolation: best_effort isolation, and for the default profile and every
// user-defined profile, a Python policy that is off or has empty rule lists, and a
// shell policy without rules or whose allow list contains a command runner;
// default filter rules turned off; a server listening on a non-loopback address
// (moat serves plain HTTP), and with public metrics; an audit trail that is
// disabled or fails open; open network access allowed, and profiles that use it; a
// backend fallback. The caller logs them at startup and shows them in the API and
// console. Default() has none.
func (c *Config) Warnings() []string {
	var w []string
	if c.BestEffort() {
		w = append(w, "isolation is best_effort: code runs even when a protection is unavailable, and each result lists what was dropped")
	}
	names := []string{}
	if def := c.DefaultProfile(); isBuiltin(def) {
		names = append(names, def)
	}
	for _, n := range slices.Sorted(maps.Keys(c.Profiles)) {
		if !isBuiltin(n) {
			names = append(names, n)
		}
	}
	for _, name := range names {
		p, err := c.ResolveProfile(name)
		if err != nil {
			continue // Validate reports it
		}
		w = append(w, profileWarnings(name, p)...)
		if p.Network.Mode == NetworkOpen {
			w = append(w, fmt.Sprintf("profile %q: network is open: its code may reach any public host through the egress proxy", name))
		}
	}
	if c.Network.AllowOpen {
		w = append(w, "network.allow_open is set: profiles and local runs may give code open network access (public hosts, through the egress proxy)")
	}
	for _, r := range c.Filter.Disable {
		w = append(w, fmt.Sprintf("filter rule %q is disabled: what it matches is no longer redacted from output", r))
	}
	if listen := c.Server.Listen; listen != "" && !loopback(listen) {
		if len(c.Server.APIKeys) == 0 {
			w = append(w, fmt.Sprintf("server.listen %q is not a loopback address and no api_keys are set: the generated token is the only protection, and moat serves plain HTTP, so it crosses the network in clear text", listen))
		} else {
			w = append(w, fmt.Sprintf("server.listen %q is not a loopback address: moat serves plain HTTP, so API keys, code and output cross the network in clear text (listen on loopback behind a TLS proxy)", listen))
		}
	}
	if listen := c.Server.Listen; c.Server.MetricsPublic && listen != "" && !loopback(listen) {
		w = append(w, fmt.Sprintf("server.metrics_public is set and server.listen %q is not a loopback address: anyone who reaches the server can read its metrics", listen))
	}
	if c.Audit.Disable {
		w = append(w, "audit.disable is set: executions, session events and auth failures are not recorded")
	} else if c.Audit.Failure == AuditFailOpen {
		w = append(w, "audit.failure is fail_open: while the audit store fails, executions go on and records that do not fit the buffer are lost (counted in moat_audit_records_lost_total and logged)")
	}
	if len(c.Backend.Fallback) > 0 {
		name := c.Backend.Name
		if name == "" {
			name = BackendNative
		}
		w = append(w, fmt.Sprintf("backend.fallback is set: when %s cannot start, boxes are made by %s instead (each result's isolation says which)", name, orList(c.Backend.Fallback)))
	}
	return w
}

// profileWarnings lists what weakens the resolved profile p.
func profileWarnings(name string, p Profile) []string {
	var w []string
	add := func(format string, args ...any) {
		w = append(w, fmt.Sprintf("profile %q: ", name)+fmt.Sprintf(format, args...))
	}
	py := p.Python
	if py.Mode == ModeOff {
		add("python policy is off: imports, builtins and attributes are not checked, only the box protects the host")
	} else {
		if py.Mode == ModeDenylist && len(py.DenyModules) == 0 {
			add("python.deny_modules is empty: code may import any module, subprocess and socket included")
		}
		if len(py.DenyBuiltins) == 0 {
			add("python.deny_builtins is empty: eval, exec and compile are allowed, so the static checks can be bypassed")
		}
		if len(py.DenyAttributes) == 0 {
			add("python.deny_attributes is empty: the known sandbox escape gadgets are not blocked")
		}
	}
	if len(p.Shell.Allow) == 0 && len(p.Shell.Deny) == 0 {
		add("shell has no rules: every command is allowed")
	}
	for _, cmd := range p.Shell.Allow {
		if slices.Contains(commandRunners, cmd) {
			add("shell.allow includes %q, which can run any other command", cmd)
		}
	}
	return w
}

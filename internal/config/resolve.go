package config

import (
	"fmt"
	"slices"
	"strings"
)

// ResolveProfile returns the named profile ready for use; an empty name means
// DefaultProfile. It applies the chain of extends from the builtin at its root down
// to the named profile, each step laying the child over its parent:
//
//   - a string (mode, file_access) or limit the child sets replaces the parent's;
//   - a list the child sets replaces the parent's whole list, so `allow: []` clears
//     an inherited list and an absent key keeps it;
//   - python.modules merges by module name: the child's rule for a module replaces
//     the parent's rule for that module, and `os: {}` removes it.
//
// Finally the profile's limits are laid over Config.Limits. The result has Extends
// empty and shares no memory with c or the builtins.
//
// An unknown name is an error naming the available profiles. ResolveProfile does not
// validate the result; Validate does that for every profile.
func (c *Config) ResolveProfile(name string) (Profile, error) {
	if name == "" {
		name = c.DefaultProfile()
	}
	builtins := BuiltinProfiles()
	if _, ok := c.lookup(name, builtins); !ok {
		return Profile{}, fmt.Errorf("unknown profile %q (available: %s)", name, strings.Join(c.profileNames(), ", "))
	}
	chain, err := c.chain(name, builtins)
	if err != nil {
		return Profile{}, err
	}
	// chain runs from name to its builtin root; apply it root first.
	var p Profile
	for _, link := range slices.Backward(chain) {
		prof, _ := c.lookup(link, builtins)
		p = p.over(prof)
	}
	p.Extends = ""
	p.Limits = c.Limits.over(p.Limits)
	return p, nil
}

// lookup finds a profile by name: a user-defined one, else a builtin.
func (c *Config) lookup(name string, builtins map[string]Profile) (Profile, bool) {
	if p, ok := c.Profiles[name]; ok && !isBuiltin(name) {
		return p, true
	}
	p, ok := builtins[name]
	return p, ok
}

// MaxExtends bounds a chain of extends, from a user-defined profile to a builtin.
const MaxExtends = 16

// chain returns name followed by the profiles it extends, ending at a builtin.
func (c *Config) chain(name string, builtins map[string]Profile) ([]string, error) {
	chain := []string{name}
	for cur := name; !isBuiltin(cur); {
		if len(chain) > MaxExtends {
			return nil, fmt.Errorf("profile %q: extends chain is longer than %d profiles", name, MaxExtends)
		}
		next := c.Profiles[cur].Extends
		if next == "" {
			next = ProfileDefault
		}
		if _, ok := c.lookup(next, builtins); !ok {
			return nil, fmt.Errorf("profile %q extends unknown profile %q", cur, next)
		}
		if slices.Contains(chain, next) {
			return nil, fmt.Errorf("profile %q: extends cycle %s -> %s", name, strings.Join(chain, " -> "), next)
		}
		chain = append(chain, next)
		cur = next
	}
	return chain, nil
}

// profileNames lists the builtin and user-defined profile names, sorted.
func (c *Config) profileNames() []string {
	names := []string{ProfileDefault, ProfileOpen, ProfileStrict}
	for n := range c.Profiles {
		if !isBuiltin(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// over returns a copy of p with the settings of child laid over it.
func (p Profile) over(child Profile) Profile {
	out := Profile{
		Extends: child.Extends,
		Python:  p.Python.over(child.Python),
		Shell: ShellPolicy{
			Allow: pickList(p.Shell.Allow, child.Shell.Allow),
			Deny:  pickList(p.Shell.Deny, child.Shell.Deny),
		},
		Limits:  p.Limits.over(child.Limits),
		Preload: pickList(p.Preload, child.Preload),
		Network: p.Network.over(child.Network),
	}
	return out
}

func (p PythonPolicy) over(child PythonPolicy) PythonPolicy {
	out := PythonPolicy{
		Mode:           pickString(p.Mode, child.Mode),
		AllowModules:   pickList(p.AllowModules, child.AllowModules),
		DenyModules:    pickList(p.DenyModules, child.DenyModules),
		DenyBuiltins:   pickList(p.DenyBuiltins, child.DenyBuiltins),
		DenyAttributes: pickList(p.DenyAttributes, child.DenyAttributes),
		FileAccess:     pickString(p.FileAccess, child.FileAccess),
	}
	if p.Modules != nil || child.Modules != nil {
		out.Modules = make(map[string]ModuleRule, len(p.Modules)+len(child.Modules))
		for _, m := range []map[string]ModuleRule{p.Modules, child.Modules} {
			for name, r := range m {
				if len(r.Allow) == 0 && len(r.Deny) == 0 {
					delete(out.Modules, name) // `os: {}` lifts the inherited rule
					continue
				}
				out.Modules[name] = ModuleRule{Allow: clone(r.Allow), Deny: clone(r.Deny)}
			}
		}
	}
	return out
}

// pickString returns child if set, else parent.
func pickString(parent, child string) string {
	if child != "" {
		return child
	}
	return parent
}

// pickList returns a copy of child if set (non-nil, even empty), else of parent.
func pickList(parent, child []string) []string {
	if child != nil {
		return clone(child)
	}
	return clone(parent)
}

package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/internal/egress"
)

// Network modes (NetworkPolicy.Mode).
const (
	// NetworkNone: the box has no network at all (the default).
	NetworkNone = "none"
	// NetworkAllowlist: the box reaches only the destinations in Allow, through
	// moat's egress proxy.
	NetworkAllowlist = "allowlist"
	// NetworkOpen: the box reaches any public destination through moat's egress
	// proxy (loopback, private, link-local and metadata addresses stay refused).
	// Only where Network.AllowOpen is set.
	NetworkOpen = "open"
)

// NetworkPolicy is what a profile's code may reach. Every field is optional and
// inherits from the profile it extends; the builtins have none.
type NetworkPolicy struct {
	// Mode is none (the default), allowlist or open.
	Mode string `yaml:"mode"`
	// Allow lists the destinations of allowlist mode: "pypi.org", "*.example.com"
	// (any name below example.com), "api.example.com:8443", an IP address with its
	// port ("127.0.0.1:8080": addresses in loopback, private, link-local and metadata
	// ranges are reached only when named so), or a preset ("package_managers"). A
	// destination without a port is allowed on every port.
	Allow []string `yaml:"allow"`
	// Secrets are variables whose value the code never sees: it gets a placeholder,
	// which the proxy swaps for the real value in request headers to the secret's
	// hosts only.
	Secrets []NetworkSecret `yaml:"secrets"`
	// Limits bound one execution's (or session's) traffic.
	Limits NetworkLimits `yaml:"limits"`
}

// NetworkSecret is one secret given to code as a placeholder.
type NetworkSecret struct {
	// Env is the variable the code sees, holding the placeholder.
	Env string `yaml:"env"`
	// FromEnv is the variable of moat's own environment that holds the real value.
	FromEnv string `yaml:"from_env"`
	// Hosts are the destinations (as in Allow) that may receive the real value.
	Hosts []string `yaml:"hosts"`
}

// NetworkLimits bound traffic through the proxy. Unset fields are unlimited.
type NetworkLimits struct {
	// Connections is the number of connections (and plain HTTP requests' tunnels).
	Connections int `yaml:"connections"`
	// BytesOut and BytesIn are sizes ("10MiB") of the traffic each way.
	BytesOut string `yaml:"bytes_out"`
	BytesIn  string `yaml:"bytes_in"`
}

// Network holds the settings of moat's egress proxy that no profile may change.
type Network struct {
	// AllowOpen lets profiles and local runs use mode open.
	AllowOpen bool `yaml:"allow_open"`
	// Hosts gives names fixed addresses, looked up before DNS (as /etc/hosts). The
	// names must still be allowed, and the addresses still pass the range checks.
	Hosts map[string][]string `yaml:"hosts"`
	// UpstreamCA is a PEM file of extra roots the proxy trusts when it opens TLS to
	// an upstream itself (for secrets over HTTPS), beside the system's.
	UpstreamCA string `yaml:"upstream_ca"`
}

func (n NetworkPolicy) over(child NetworkPolicy) NetworkPolicy {
	out := NetworkPolicy{
		Mode:   pickString(n.Mode, child.Mode),
		Allow:  pickList(n.Allow, child.Allow),
		Limits: n.Limits,
	}
	out.Secrets = slices.Clone(n.Secrets)
	if child.Secrets != nil {
		out.Secrets = slices.Clone(child.Secrets)
	}
	for i := range out.Secrets {
		out.Secrets[i].Hosts = clone(out.Secrets[i].Hosts)
	}
	if child.Limits.Connections != 0 {
		out.Limits.Connections = child.Limits.Connections
	}
	out.Limits.BytesOut = pickString(n.Limits.BytesOut, child.Limits.BytesOut)
	out.Limits.BytesIn = pickString(n.Limits.BytesIn, child.Limits.BytesIn)
	return out
}

// ResolvedNetwork is a NetworkPolicy parsed for the engine.
type ResolvedNetwork struct {
	Mode    string // none, allowlist or open
	Allow   []egress.Rule
	Secrets []ResolvedSecret
	Limits  egress.Limits
}

// ResolvedSecret is a NetworkSecret with its hosts parsed.
type ResolvedSecret struct {
	Env, FromEnv string
	Hosts        []egress.Rule
}

// ResolveNetwork parses a resolved profile's network policy. It checks only what
// Validate checked already, so on a valid config it fails only for a profile built
// in code.
func (c *Config) ResolveNetwork(n NetworkPolicy) (ResolvedNetwork, error) {
	ps := &problems{}
	r := c.checkNetwork(ps, "network", n)
	checkResolvedNetwork(ps, "network", n)
	if err := ps.err(); err != nil {
		return ResolvedNetwork{}, err
	}
	return r, nil
}

// checkNetwork checks a network policy at path and returns it parsed (valid when ps
// got no problem).
func (c *Config) checkNetwork(ps *problems, path string, n NetworkPolicy) ResolvedNetwork {
	r := ResolvedNetwork{Mode: n.Mode}
	if r.Mode == "" {
		r.Mode = NetworkNone
	}
	switch n.Mode {
	case "", NetworkNone, NetworkAllowlist:
	case NetworkOpen:
		if !c.Network.AllowOpen {
			ps.add(path+".mode", "network mode open needs network.allow_open: true in the config")
		}
	default:
		ps.add(path+".mode", "unknown network mode %q (want none, allowlist or open)", n.Mode)
	}
	for i, a := range n.Allow {
		rules, err := egress.ParseRules(a)
		if err != nil {
			ps.add(fmt.Sprintf("%s.allow[%d]", path, i), "%v", err)
			continue
		}
		r.Allow = append(r.Allow, rules...)
	}
	seen := map[string]bool{}
	for i, s := range n.Secrets {
		sp := fmt.Sprintf("%s.secrets[%d]", path, i)
		if !envNameRE().MatchString(s.Env) {
			ps.add(sp+".env", "invalid variable name %q", s.Env)
		} else if seen[s.Env] {
			ps.add(sp+".env", "secret %s is given twice", s.Env)
		}
		seen[s.Env] = true
		if !envNameRE().MatchString(s.FromEnv) {
			ps.add(sp+".from_env", "invalid variable name %q (name the variable of moat's environment that holds the value)", s.FromEnv)
		}
		if len(s.Hosts) == 0 {
			ps.add(sp+".hosts", "a secret needs the hosts that may receive it")
		}
		rs := ResolvedSecret{Env: s.Env, FromEnv: s.FromEnv}
		for j, h := range s.Hosts {
			rules, err := egress.ParseRules(h)
			if err != nil {
				ps.add(fmt.Sprintf("%s.hosts[%d]", sp, j), "%v", err)
				continue
			}
			rs.Hosts = append(rs.Hosts, rules...)
		}
		r.Secrets = append(r.Secrets, rs)
	}
	if n.Limits.Connections < 0 {
		ps.add(path+".limits.connections", "must be positive")
	}
	r.Limits.Conns = n.Limits.Connections
	for _, l := range []struct {
		name string
		v    string
		dst  *int64
	}{{"bytes_out", n.Limits.BytesOut, &r.Limits.BytesOut}, {"bytes_in", n.Limits.BytesIn, &r.Limits.BytesIn}} {
		if l.v == "" {
			continue
		}
		v, err := ParseSize(l.v)
		if err != nil || v <= 0 {
			ps.add(path+".limits."+l.name, "invalid size %q (want e.g. 10MiB)", l.v)
			continue
		}
		*l.dst = v
	}
	return r
}

// checkResolvedNetwork checks what only a whole resolved profile shows: an inherited
// list may fill what the profile itself leaves empty.
func checkResolvedNetwork(ps *problems, path string, n NetworkPolicy) {
	switch n.Mode {
	case "", NetworkNone:
		if len(n.Allow) > 0 || len(n.Secrets) > 0 {
			ps.add(path+".mode", "allow and secrets have no effect with network mode none (set mode: allowlist)")
		}
	case NetworkAllowlist:
		if len(n.Allow) == 0 {
			ps.add(path+".allow", "network mode allowlist with no destinations reaches nothing (list them, or use mode none)")
		}
	}
}

// NetworkSecretEnv lists the variables of moat's environment that hold the egress
// proxy's secrets (from_env of every profile's secrets).
func (c *Config) NetworkSecretEnv() []string {
	var out []string
	for _, p := range c.Profiles {
		for _, s := range p.Network.Secrets {
			if !slices.Contains(out, s.FromEnv) {
				out = append(out, s.FromEnv)
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkNetworkSettings checks the top-level network settings.
func (c *Config) checkNetworkSettings(ps *problems) {
	for _, name := range slices.Sorted(maps.Keys(c.Network.Hosts)) {
		p := "network.hosts." + seg(name)
		if rules, err := egress.ParseRules(name); err != nil || len(rules) != 1 || rules[0].Port != 0 || strings.HasPrefix(name, "*.") {
			ps.add(p, "invalid host name %q", name)
		}
		if len(c.Network.Hosts[name]) == 0 {
			ps.add(p, "no addresses")
		}
		for i, a := range c.Network.Hosts[name] {
			if _, err := netip.ParseAddr(a); err != nil {
				ps.add(fmt.Sprintf("%s[%d]", p, i), "invalid IP address %q", a)
			}
		}
	}
	if c.Network.UpstreamCA != "" && !strings.HasPrefix(c.Network.UpstreamCA, "/") {
		ps.add("network.upstream_ca", "must be an absolute path, got %q", c.Network.UpstreamCA)
	}
}

// ResolvedHosts returns network.hosts parsed (Validate checked them).
func (c *Config) ResolvedHosts() map[string][]netip.Addr {
	if len(c.Network.Hosts) == 0 {
		return nil
	}
	out := make(map[string][]netip.Addr, len(c.Network.Hosts))
	for name, addrs := range c.Network.Hosts {
		for _, a := range addrs {
			if ip, err := netip.ParseAddr(a); err == nil {
				out[strings.ToLower(name)] = append(out[strings.ToLower(name)], ip)
			}
		}
	}
	return out
}

package egress

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Policy is what one box may reach. The zero Policy refuses everything.
type Policy struct {
	// Mode is none (the zero value counts as none), allowlist or open. In mode
	// none every destination is refused and Allow is ignored.
	Mode Mode
	// Allow lists the destinations of mode allowlist. In mode open it only
	// serves to name addresses in refused ranges (IP:port rules).
	Allow []Rule
	// Secrets are the placeholders the proxy replaces with real values.
	Secrets []Secret
	// Limits caps the box's egress.
	Limits Limits
	// Hosts maps lower-case names to fixed addresses, looked up before DNS (like
	// /etc/hosts or docker's --add-host). The names still have to be allowed, and
	// the addresses still pass the refused-range check unless an Allow rule names
	// the address with its port.
	Hosts map[string][]netip.Addr
}

// Secret is a value the box never sees: code in the box gets Placeholder (in the
// environment variable Env) and the proxy replaces it with Value in the headers
// of requests to Hosts, and only there.
type Secret struct {
	// Env is the name of the variable in the box; it names the secret in events
	// and messages.
	Env string
	// Placeholder is what the box sees; NewPlaceholder makes one.
	Placeholder string
	// Value is the real secret. It is never logged, never in an Event, an error
	// or a message to the box.
	Value string
	// Hosts are the destinations the real value may go to.
	Hosts []Rule
}

// Limits caps the egress of one box (one Attach); 0 means unlimited.
type Limits struct {
	// Conns is the number of connections the proxy may open to the outside
	// world for the box. Connection Conns+1 is refused.
	Conns int
	// BytesOut and BytesIn cap the bytes sent to and received from the outside
	// world (counted on the upstream connections, TLS records included). When a
	// total passes its cap, every connection of the box is closed and later
	// ones are refused.
	BytesOut, BytesIn int64
}

// placeholderPrefix starts every placeholder NewPlaceholder makes, so a reader
// of the box's output can tell one for what it is.
const placeholderPrefix = "moat-secret-"

// minPlaceholderLen keeps placeholders long enough that they cannot occur by
// chance in a header value, where the proxy would replace them.
const minPlaceholderLen = 16

// NewPlaceholder returns a fresh random placeholder: "moat-secret-" followed by
// 32 lower-case base32 characters (160 random bits).
func NewPlaceholder() string {
	var b [20]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read crashes the program instead)
	enc := base32.StdEncoding.WithPadding(base32.NoPadding)
	return placeholderPrefix + strings.ToLower(enc.EncodeToString(b[:]))
}

// Validate checks the policy: a known mode, valid rules (as ParseRules would
// accept them), well-formed secrets and non-negative limits. Every error wraps
// ErrBadPolicy. A policy that fails Validate makes Proxy.Attach refuse
// everything.
func (p *Policy) Validate() error {
	switch p.Mode {
	case "", ModeNone, ModeAllowlist, ModeOpen:
	default:
		return fmt.Errorf("%w: unknown network mode %q (want none, allowlist or open)", ErrBadPolicy, p.Mode)
	}
	for _, r := range p.Allow {
		if err := r.validate(); err != nil {
			return fmt.Errorf("%w: allow rule %q: %s", ErrBadPolicy, r, err)
		}
	}
	placeholders := map[string]string{}
	for i, s := range p.Secrets {
		name := s.Env
		if name == "" {
			return fmt.Errorf("%w: secret %d has no Env name", ErrBadPolicy, i+1)
		}
		switch {
		case len(s.Placeholder) < minPlaceholderLen:
			return fmt.Errorf("%w: secret %s: placeholder shorter than %d characters", ErrBadPolicy, name, minPlaceholderLen)
		case s.Value == "":
			return fmt.Errorf("%w: secret %s has no value", ErrBadPolicy, name)
		case strings.Contains(s.Value, s.Placeholder):
			return fmt.Errorf("%w: secret %s: the placeholder occurs in the value", ErrBadPolicy, name)
		case !validHeaderValue(s.Value):
			// A CR or LF here would let the substitution inject headers.
			return fmt.Errorf("%w: secret %s: the value has control characters, so it cannot go in a header", ErrBadPolicy, name)
		case !validHeaderValue(s.Placeholder):
			return fmt.Errorf("%w: secret %s: the placeholder has control characters", ErrBadPolicy, name)
		case len(s.Hosts) == 0:
			return fmt.Errorf("%w: secret %s has no hosts to go to", ErrBadPolicy, name)
		}
		for other, ph := range placeholders {
			if strings.Contains(ph, s.Placeholder) || strings.Contains(s.Placeholder, ph) {
				return fmt.Errorf("%w: secrets %s and %s have overlapping placeholders", ErrBadPolicy, other, name)
			}
		}
		placeholders[name] = s.Placeholder
		for _, r := range s.Hosts {
			if err := r.validate(); err != nil {
				return fmt.Errorf("%w: secret %s: host %q: %s", ErrBadPolicy, name, r, err)
			}
		}
	}
	if p.Limits.Conns < 0 || p.Limits.BytesOut < 0 || p.Limits.BytesIn < 0 {
		return fmt.Errorf("%w: negative limit", ErrBadPolicy)
	}
	for name, addrs := range p.Hosts {
		if why := checkName(name); why != "" {
			return fmt.Errorf("%w: hosts entry %q: not a valid lower-case host name: %s", ErrBadPolicy, name, why)
		}
		if len(addrs) == 0 {
			return fmt.Errorf("%w: hosts entry %q has no addresses", ErrBadPolicy, name)
		}
		for _, a := range addrs {
			if !a.IsValid() || a.Zone() != "" {
				return fmt.Errorf("%w: hosts entry %q: invalid address %v", ErrBadPolicy, name, a)
			}
		}
	}
	return nil
}

// validate checks a Rule built by hand the way ParseRules checks its text.
func (r Rule) validate() error {
	parsed, err := parseRule(r.String())
	if err != nil {
		return err
	}
	if parsed != r {
		return fmt.Errorf("not in canonical form (want %q)", parsed)
	}
	return nil
}

// validHeaderValue reports whether v can be sent in an HTTP header value: no
// control characters other than tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// Allowed decides whether the box may reach host (a DNS name or an IP literal,
// in any case, with or without a trailing dot) on port. When ok, reason names
// what allowed it (the matching rule, or "open mode"); otherwise reason says why
// not, in words fit for the box ("not in the allowlist"), never naming a secret.
//
// Allowed judges the name; the addresses it resolves to are judged apart (see
// Refused), since only the proxy knows them.
func (p *Policy) Allowed(host string, port uint16) (ok bool, reason string) {
	if port == 0 {
		return false, "port 0 is not a destination"
	}
	h, valid := canonHost(host)
	if !valid {
		return false, "not a valid host name"
	}
	switch p.Mode {
	case ModeAllowlist, ModeOpen:
	default:
		return false, "the network is off for this box (mode none)"
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if why, refused := Refused(a); refused {
			for _, r := range p.Allow {
				if r.namesAddr(a, port) {
					return true, r.String()
				}
			}
			return false, fmt.Sprintf("%s is %s address", h, article(why))
		}
	}
	if p.Mode == ModeOpen {
		return true, "open mode"
	}
	for _, r := range p.Allow {
		if r.match(h, port) {
			return true, r.String()
		}
	}
	var ports []string
	for _, r := range p.Allow {
		if r.matchHost(h) {
			ports = append(ports, strconv.Itoa(int(r.Port)))
		}
	}
	if len(ports) > 0 {
		return false, fmt.Sprintf("port %d is not allowed for %s (allowed: %s)", port, h, strings.Join(ports, ", "))
	}
	return false, "not in the allowlist"
}

// nameAllowed reports whether the name (canonical) may be resolved: whether it
// is allowed on some port. DNS answers are given for these names only.
func (p *Policy) nameAllowed(name string) (ok bool, reason string) {
	switch p.Mode {
	case ModeOpen:
		return true, ""
	case ModeAllowlist:
	default:
		return false, "the network is off for this box (mode none)"
	}
	for _, r := range p.Allow {
		if r.matchHost(name) {
			return true, ""
		}
	}
	return false, "not in the allowlist"
}

// addrAllowed reports whether the proxy may connect to a on port: a is outside
// the refused ranges, or an Allow rule names it with that port. port 0 (DNS
// answers) accepts a rule naming a with any port.
func (p *Policy) addrAllowed(a netip.Addr, port uint16) (ok bool, reason string) {
	why, refused := Refused(a)
	if !refused {
		return true, ""
	}
	for _, r := range p.Allow {
		if port == 0 && r.Port != 0 && r.namesAddr(a, r.Port) || r.namesAddr(a, port) {
			return true, ""
		}
	}
	return false, why
}

// secretsFor returns the secrets that may go to host (canonical) on port.
func (p *Policy) secretsFor(host string, port uint16) []*Secret {
	var out []*Secret
	for i := range p.Secrets {
		s := &p.Secrets[i]
		for _, r := range s.Hosts {
			if r.match(host, port) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// hasSecrets reports whether any secret may go to host on port.
func (p *Policy) hasSecrets(host string, port uint16) bool {
	return len(p.secretsFor(host, port)) > 0
}

// clone returns a deep copy, so the caller of Attach may change its Policy.
func (p *Policy) clone() *Policy {
	c := *p
	c.Allow = slices.Clone(p.Allow)
	c.Secrets = slices.Clone(p.Secrets)
	for i := range c.Secrets {
		c.Secrets[i].Hosts = slices.Clone(c.Secrets[i].Hosts)
	}
	c.Hosts = maps.Clone(p.Hosts)
	for k, v := range c.Hosts {
		c.Hosts[k] = slices.Clone(v)
	}
	return &c
}

// hostPort formats a destination for messages: "example.com:443", "[::1]:80".
func hostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

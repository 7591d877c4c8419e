package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mode is a box's network mode.
type Mode string

// The network modes. The zero Mode is ModeNone.
const (
	// ModeNone refuses every destination. It is the default.
	ModeNone Mode = "none"
	// ModeAllowlist allows the destinations that match a Rule of Policy.Allow.
	ModeAllowlist Mode = "allowlist"
	// ModeOpen allows every destination outside the refused ranges (see Refused),
	// on any port; the traffic still goes through the proxy, is checked, counted
	// and reported.
	ModeOpen Mode = "open"
)

// Rule allows one destination: a host and a port.
type Rule struct {
	// Host is lower-case: an exact DNS name ("pypi.org"), a wildcard
	// ("*.example.com": any name strictly below example.com, at any depth, but not
	// example.com itself), or an IP literal (v4 or v6, without brackets or zone).
	Host string
	// Port is the destination port; 0 means any port.
	Port uint16
}

// String returns the rule as ParseRules reads it: "host", "host:port",
// "[v6]" or "[v6]:port", "*.example.org:443".
func (r Rule) String() string {
	h := r.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if r.Port == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(int(r.Port))
}

// matchHost reports whether the rule's Host covers host, which must be canonical
// (see canonHost).
func (r Rule) matchHost(host string) bool {
	if suffix, ok := strings.CutPrefix(r.Host, "*"); ok {
		// suffix is ".example.com": host must end with it and have at least one
		// more label in front, so the apex never matches.
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return r.Host == host
}

// match reports whether the rule covers host (canonical) on port.
func (r Rule) match(host string, port uint16) bool {
	return (r.Port == 0 || r.Port == port) && r.matchHost(host)
}

// namesAddr reports whether the rule names exactly a on port, the only way to
// reach an address in a refused range.
func (r Rule) namesAddr(a netip.Addr, port uint16) bool {
	if r.Port == 0 || r.Port != port {
		return false
	}
	ra, err := netip.ParseAddr(r.Host)
	return err == nil && ra.Unmap() == a.Unmap()
}

// Presets are named lists of rules that ParseRules expands in place of their name.
var Presets = map[string][]Rule{
	// package_managers is what pip, uv, npm and yarn need to install packages
	// from the public registries: the PyPI index and its file host, the npm
	// registry (which also serves the tarballs) and yarn's alias of it.
	"package_managers": {
		{Host: "pypi.org", Port: 443},
		{Host: "files.pythonhosted.org", Port: 443},
		{Host: "registry.npmjs.org", Port: 443},
		{Host: "registry.yarnpkg.com", Port: 443},
	},
}

// ParseRules parses a comma-separated allowlist, "HOST[:PORT][,HOST[:PORT]...]".
// HOST is a DNS name, a wildcard "*.name", an IPv4 literal, or an IPv6 literal
// written "[addr]" (bare when it has no port); a preset name (see Presets) stands
// for its rules. Names are lower-cased. An IP literal in a refused range (see
// Refused) must carry its port: naming "127.0.0.1:8080" is how an operator allows
// one service on the host, and a bare "127.0.0.1" is refused as a likely mistake.
//
// Every error wraps ErrBadRule and names the item at fault.
func ParseRules(s string) ([]Rule, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: the allowlist is empty", ErrBadRule)
	}
	var rules []Rule
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%w: item %d is empty", ErrBadRule, i+1)
		}
		if preset, ok := Presets[item]; ok {
			rules = append(rules, preset...)
			continue
		}
		r, err := parseRule(item)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %s", ErrBadRule, item, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// parseRule parses one item; its errors do not repeat the item.
func parseRule(item string) (Rule, error) {
	if strings.Contains(item, "://") {
		return Rule{}, fmt.Errorf("a URL: name the host and port only, e.g. example.com:443")
	}
	if strings.ContainsAny(item, "/?#@") {
		return Rule{}, fmt.Errorf("has a path or other URL part: name the host and port only, e.g. example.com:443")
	}
	host, portStr, err := splitHostPort(item)
	if err != nil {
		return Rule{}, err
	}
	var port uint16
	if portStr != "" {
		n, err := strconv.ParseUint(portStr, 10, 64)
		switch {
		case err != nil && strings.Trim(portStr, "0123456789") == "":
			return Rule{}, fmt.Errorf("port %s is out of range (1-65535)", portStr)
		case err != nil:
			return Rule{}, fmt.Errorf("port %q is not a number", portStr)
		case n == 0:
			return Rule{}, fmt.Errorf("port 0 is not a port; leave the port out to allow any port")
		case n > 65535:
			return Rule{}, fmt.Errorf("port %d is out of range (1-65535)", n)
		}
		port = uint16(n)
	}
	host = strings.ToLower(host)
	if host == "*" {
		return Rule{}, fmt.Errorf(`"*" alone would allow everything; use the open network mode where the config permits it`)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("an IPv6 zone is not allowed")
		}
		a = a.Unmap()
		if why, refused := Refused(a); refused && port == 0 {
			example := net.JoinHostPort(a.String(), "8080")
			return Rule{}, fmt.Errorf("%s is %s address: name it with its port, e.g. %s, to allow it",
				a, article(why), example)
		}
		return Rule{Host: a.String(), Port: port}, nil
	}
	name, wild := strings.CutPrefix(host, "*.")
	if strings.Contains(name, "*") {
		return Rule{}, fmt.Errorf(`a wildcard is only allowed as a leading "*.", e.g. *.example.com`)
	}
	name = strings.TrimSuffix(name, ".")
	if why := checkName(name); why != "" {
		return Rule{}, fmt.Errorf("not a valid host name: %s", why)
	}
	if wild {
		name = "*." + name
	}
	return Rule{Host: name, Port: port}, nil
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port" or a bare
// IPv6 literal (two colons or more, no port).
func splitHostPort(item string) (host, port string, err error) {
	if rest, ok := strings.CutPrefix(item, "["); ok {
		addr, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", fmt.Errorf(`missing "]"`)
		}
		if _, err := netip.ParseAddr(addr); err != nil || !strings.Contains(addr, ":") {
			return "", "", fmt.Errorf("%q in brackets is not an IPv6 address", addr)
		}
		if after == "" {
			return addr, "", nil
		}
		port, ok := strings.CutPrefix(after, ":")
		if !ok || port == "" {
			return "", "", fmt.Errorf(`expected ":PORT" after "]"`)
		}
		return addr, port, nil
	}
	switch strings.Count(item, ":") {
	case 0:
		return item, "", nil
	case 1:
		host, port, _ = strings.Cut(item, ":")
		if host == "" {
			return "", "", fmt.Errorf("missing host")
		}
		if port == "" {
			return "", "", fmt.Errorf(`missing port after ":"`)
		}
		return host, port, nil
	default:
		if _, err := netip.ParseAddr(item); err != nil {
			return "", "", fmt.Errorf("not a valid IPv6 address (write [addr]:port for an IPv6 address with a port)")
		}
		return item, "", nil
	}
}

// checkName returns why name (lower-case, no trailing dot) is not a valid DNS
// name, or "" if it is. Labels are 1-63 characters of [a-z0-9_-] not starting or
// ending with '-', the whole name at most 253 characters, and the last label not
// all digits (so "1.2.3" or "0177.0.0.1" is never taken for a name: some
// resolvers read such strings as IPv4 addresses in odd notations).
func checkName(name string) string {
	if name == "" {
		return "empty"
	}
	if len(name) > 253 {
		return "longer than 253 characters"
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return "empty label"
		}
		if len(l) > 63 {
			return "label longer than 63 characters"
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Sprintf("label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("character %q is not allowed", c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "the last label is all digits (an IP address is written in full, e.g. 192.0.2.1)"
	}
	return ""
}

// canonHost returns the canonical form of a destination host named by the box:
// lower-case, without a trailing dot; an IP literal in netip's form (IPv4-mapped
// IPv6 unmapped). ok is false if host is neither a valid DNS name nor an IP
// literal without zone.
func canonHost(host string) (canon string, ok bool) {
	host = strings.ToLower(host)
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", false
		}
		return a.Unmap().String(), true
	}
	host = strings.TrimSuffix(host, ".")
	if checkName(host) != "" {
		return "", false
	}
	return host, true
}

// prefixRange is one refused range.
type prefixRange struct {
	p      netip.Prefix
	reason string
}

// metadataAddrs are the link-local and private addresses where clouds serve
// instance metadata and credentials: the classic target of SSRF from a workload
// (e.g. the 2019 Capital One breach through 169.254.169.254). They are named
// "cloud metadata" rather than by their range so the refusal says what is at stake.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OpenStack, DigitalOcean, ...
	netip.MustParseAddr("169.254.170.2"):   true, // AWS ECS task metadata and credentials
	netip.MustParseAddr("169.254.170.23"):  true, // AWS EKS pod identity agent
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud (classic)
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"):    true, // AWS DNS over IPv6
}

// refusedRanges lists the ranges refused unless named explicitly. The first
// matching entry names the reason, so narrower ranges come first.
var refusedRanges = []prefixRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "CGNAT (shared address space)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved (IETF protocol assignments)"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "reserved (benchmarking)"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255

	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "reserved"}, // IPv4-compatible, deprecated
	{netip.MustParsePrefix("64:ff9b:1::/48"), "private (local-use NAT64)"},
	{netip.MustParsePrefix("100::/64"), "reserved (discard-only)"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "private (unique local)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "private (site-local)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Prefixes whose addresses embed an IPv4 address that a gateway translates to:
// NAT64 (RFC 6052) and 6to4 (RFC 3056). 64:ff9b::7f00:1 reaches 127.0.0.1 of the
// NAT64 gateway, so the embedded address is checked too.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// Refused reports whether addr lies in a range that is refused unless an allow
// rule names the address with its port, and names the range: "loopback",
// "private", "link-local", "cloud metadata", "CGNAT (shared address space)",
// "unspecified", "multicast", "documentation", "reserved"... IPv4-mapped IPv6
// addresses are judged as the IPv4 address they map, and NAT64 and 6to4 addresses
// as the IPv4 address they embed.
//
// These ranges hold the host's own services, the networks the moat server sits
// in, and the cloud's metadata service: a box that could reach them (directly, or
// through an allowed name whose DNS answer points there: DNS rebinding) could
// attack what runs beside it. The host's own addresses are refused too, whatever
// their range ("an address of this host": a public address of the host reaches
// whatever listens on all its interfaces, moat serve --listen 0.0.0.0 included).
func Refused(addr netip.Addr) (reason string, refused bool) {
	if why, refused := refusedRange(addr); refused {
		return why, true
	}
	if hostAddrs.has(addr.WithZone("").Unmap()) {
		return "address of this host", true
	}
	return "", false
}

// hostAddrs are the addresses of this host's interfaces, as the proxy's dials see
// them (the server's network namespace), read again when a second has passed.
var hostAddrs = &addrCache{read: interfaceAddrs, ttl: time.Second}

// interfaceAddrs lists the addresses of this host's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().WithZone("").Unmap())
		}
	}
	return out, nil
}

// addrCache keeps a set of addresses read by read, again once ttl has passed.
type addrCache struct {
	read func() ([]netip.Addr, error)
	ttl  time.Duration

	mu    sync.Mutex
	at    time.Time
	addrs map[netip.Addr]bool
}

// has reports whether a is in the set. When the set cannot be read, the last one
// read stays.
func (c *addrCache) has(a netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addrs == nil || time.Since(c.at) > c.ttl {
		if addrs, err := c.read(); err == nil {
			c.addrs = make(map[netip.Addr]bool, len(addrs))
			for _, x := range addrs {
				c.addrs[x] = true
			}
		}
		c.at = time.Now()
	}
	return c.addrs[a]
}

// refusedRange is Refused without the host's own addresses.
func refusedRange(addr netip.Addr) (reason string, refused bool) {
	a := addr.WithZone("").Unmap()
	if metadataAddrs[a] {
		return "cloud metadata", true
	}
	if a.Is6() {
		b := a.As16()
		var v4 netip.Addr
		switch {
		case nat64Prefix.Contains(a):
			v4 = netip.AddrFrom4([4]byte(b[12:16]))
		case sixToFour.Contains(a):
			v4 = netip.AddrFrom4([4]byte(b[2:6]))
		}
		if v4.IsValid() {
			if why, refused := Refused(v4); refused {
				return why + " (embedded in " + a.String() + ")", true
			}
		}
	}
	for _, r := range refusedRanges {
		if r.p.Contains(a) {
			return r.reason, true
		}
	}
	if !a.IsValid() {
		return "invalid", true
	}
	return "", false
}

// article returns reason with "a" or "an" in front, for "127.0.0.1 is a
// loopback address".
func article(reason string) string {
	switch reason[0] {
	case 'a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U':
		return "an " + reason
	}
	return "a " + reason
}

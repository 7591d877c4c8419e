package egress

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRules(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Rule
	}{
		{"name", "pypi.org", []Rule{{"pypi.org", 0}}},
		{"name and port, upper case", "PyPI.org:443", []Rule{{"pypi.org", 443}}},
		{"trailing dot", "example.com.:80", []Rule{{"example.com", 80}}},
		{"wildcard", "*.pypi.org:443", []Rule{{"*.pypi.org", 443}}},
		{"underscore and punycode", "_dmarc.xn--bcher-kva.example", []Rule{{"_dmarc.xn--bcher-kva.example", 0}}},
		{"single label", "localhost-ish", []Rule{{"localhost-ish", 0}}},
		{"list with spaces", " a.com , b.com:8080 ", []Rule{{"a.com", 0}, {"b.com", 8080}}},
		{"public IPv4", "1.1.1.1", []Rule{{"1.1.1.1", 0}}},
		{"public IPv4 with port", "1.1.1.1:53", []Rule{{"1.1.1.1", 53}}},
		{"public IPv6 bare", "2606:4700::1111", []Rule{{"2606:4700::1111", 0}}},
		{"public IPv6 bracketed", "[2606:4700::1111]", []Rule{{"2606:4700::1111", 0}}},
		{"public IPv6 with port", "[2606:4700::1111]:443", []Rule{{"2606:4700::1111", 443}}},
		{"loopback with port", "127.0.0.1:8080", []Rule{{"127.0.0.1", 8080}}},
		{"IPv6 loopback with port", "[::1]:8080", []Rule{{"::1", 8080}}},
		{"IPv4-mapped is unmapped", "[::ffff:10.1.2.3]:80", []Rule{{"10.1.2.3", 80}}},
		{"metadata with port", "169.254.169.254:80", []Rule{{"169.254.169.254", 80}}},
		{"max port", "a.com:65535", []Rule{{"a.com", 65535}}},
		{"preset", "package_managers", Presets["package_managers"]},
		{"preset and more", "package_managers,x.org", append(append([]Rule(nil), Presets["package_managers"]...), Rule{"x.org", 0})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRules(tt.in)
			if err != nil {
				t.Fatalf("ParseRules(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseRules(%q) = %v, want %v", tt.in, got, tt.want)
			}
			for _, r := range got {
				back, err := ParseRules(r.String())
				if err != nil || len(back) != 1 || back[0] != r {
					t.Errorf("round trip of %v through %q: %v, %v", r, r.String(), back, err)
				}
				if err := r.validate(); err != nil {
					t.Errorf("validate(%v): %v", r, err)
				}
			}
		})
	}
}

func TestParseRulesErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "the allowlist is empty"},
		{"blank", "  ", "the allowlist is empty"},
		{"empty item", "a.com,,b.com", "item 2 is empty"},
		{"trailing comma", "a.com,", "item 2 is empty"},
		{"port 0", "a.com:0", `"a.com:0": port 0 is not a port`},
		{"port too big", "a.com:65536", "port 65536 is out of range (1-65535)"},
		{"port huge", "a.com:99999999999999999999999", "out of range"},
		{"port not a number", "a.com:http", `port "http" is not a number`},
		{"negative port", "a.com:-1", `port "-1" is not a number`},
		{"missing port", "a.com:", `missing port after ":"`},
		{"missing host", ":80", "missing host"},
		{"star alone", "*", `"*" alone would allow everything`},
		{"star with port", "*:443", `"*" alone would allow everything`},
		{"double wildcard", "*.*.a.com", `only allowed as a leading "*."`},
		{"inner wildcard", "a.*.com", `only allowed as a leading "*."`},
		{"glued wildcard", "*a.com", `only allowed as a leading "*."`},
		{"URL", "https://a.com", "a URL: name the host and port only"},
		{"path", "a.com/path", "has a path"},
		{"userinfo", "user@a.com", "has a path or other URL part"},
		{"leading hyphen", "-a.com", `label "-a" starts or ends with '-'`},
		{"empty label", "a..com", "empty label"},
		{"space", "a b.com", "character ' ' is not allowed"},
		{"long label", strings.Repeat("a", 64) + ".com", "label longer than 63 characters"},
		{"long name", strings.Repeat("a.", 127) + "com", "longer than 253 characters"},
		{"numeric last label", "1.2.3", "the last label is all digits"},
		{"octal address", "0177.0.0.1", "the last label is all digits"},
		{"loopback without port", "127.0.0.1",
			`"127.0.0.1": 127.0.0.1 is a loopback address: name it with its port, e.g. 127.0.0.1:8080, to allow it`},
		{"IPv6 loopback without port", "[::1]",
			"::1 is a loopback address: name it with its port, e.g. [::1]:8080, to allow it"},
		{"private", "10.0.0.1", "10.0.0.1 is a private address"},
		{"CGNAT", "100.64.0.1", "is a CGNAT (shared address space) address"},
		{"metadata", "169.254.169.254", "169.254.169.254 is a cloud metadata address"},
		{"AWS IPv6 metadata", "fd00:ec2::254", "is a cloud metadata address"},
		{"mapped metadata", "::ffff:169.254.169.254", "169.254.169.254 is a cloud metadata address"},
		{"ULA", "fd12::1", "is a private (unique local) address"},
		{"unspecified", "0.0.0.0", "is an unspecified address"},
		{"multicast", "224.0.0.1", "is a multicast address"},
		{"zone", "[fe80::1%eth0]:80", "zone"},
		{"IPv4 in brackets", "[1.2.3.4]:80", "is not an IPv6 address"},
		{"unclosed bracket", "[::1:80", `missing "]"`},
		{"two colons", "a.com:80:90", "not a valid IPv6 address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRules(tt.in)
			if err == nil {
				t.Fatalf("ParseRules(%q) = %v, want an error", tt.in, got)
			}
			if !errors.Is(err, ErrBadRule) {
				t.Errorf("error %v does not wrap ErrBadRule", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseRules(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestRuleString(t *testing.T) {
	for r, want := range map[Rule]string{
		{"a.com", 0}:       "a.com",
		{"a.com", 443}:     "a.com:443",
		{"*.x.org", 443}:   "*.x.org:443",
		{"::1", 8080}:      "[::1]:8080",
		{"2001:db8::1", 0}: "[2001:db8::1]",
		{"1.2.3.4", 80}:    "1.2.3.4:80",
	} {
		if got := r.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", r, got, want)
		}
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		addr, reason string // reason "" means not refused
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"100.64.0.1", "CGNAT (shared address space)"},
		{"100.127.255.255", "CGNAT (shared address space)"},
		{"169.254.1.1", "link-local"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.170.2", "cloud metadata"},
		{"100.100.100.200", "cloud metadata"},
		{"192.0.0.192", "cloud metadata"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"224.0.0.251", "multicast"},
		{"255.255.255.255", "reserved"},
		{"198.18.0.1", "reserved (benchmarking)"},
		{"192.0.2.1", "documentation"},
		{"::1", "loopback"},
		{"::", "unspecified"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fc00::1", "private (unique local)"},
		{"fd00:ec2::254", "cloud metadata"},
		{"ff02::1", "multicast"},
		{"2001:db8::1", "documentation"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"::127.0.0.1", "reserved"}, // IPv4-compatible, deprecated
		{"64:ff9b::7f00:1", "loopback (embedded in 64:ff9b::7f00:1)"},
		{"64:ff9b::a9fe:a9fe", "cloud metadata (embedded in 64:ff9b::a9fe:a9fe)"},
		{"2002:7f00:1::1", "loopback (embedded in 2002:7f00:1::1)"},
		{"2002:c0a8:101::1", "private (embedded in 2002:c0a8:101::1)"},

		{"1.1.1.1", ""},
		{"8.8.8.8", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.32.0.1", ""},
		{"11.0.0.1", ""},
		{"169.253.255.255", ""},
		{"2606:4700::1111", ""},
		{"::ffff:1.1.1.1", ""},
		{"64:ff9b::101:101", ""}, // NAT64 of 1.1.1.1
		{"2002:101:101::1", ""},  // 6to4 of 1.1.1.1
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			reason, refused := Refused(netip.MustParseAddr(tt.addr))
			if refused != (tt.reason != "") || reason != tt.reason {
				t.Errorf("Refused(%s) = %q, %v; want %q", tt.addr, reason, refused, tt.reason)
			}
		})
	}
}

// TestRefusedHostAddrs: an address of this host's interfaces is refused whatever its
// range (here a public one, as a host with a public address has), also as NAT64 and
// IPv4-mapped forms; the list is read again once its second has passed.
func TestRefusedHostAddrs(t *testing.T) {
	saved := hostAddrs
	t.Cleanup(func() { hostAddrs = saved })
	own := []netip.Addr{netip.MustParseAddr("8.8.4.4"), netip.MustParseAddr("2606:4700::6810:85e5")}
	reads := 0
	hostAddrs = &addrCache{read: func() ([]netip.Addr, error) { reads++; return own, nil }, ttl: time.Hour}
	for _, a := range []string{"8.8.4.4", "::ffff:8.8.4.4", "64:ff9b::808:404", "2606:4700::6810:85e5"} {
		if why, refused := Refused(netip.MustParseAddr(a)); !refused || !strings.HasPrefix(why, "address of this host") {
			t.Errorf("Refused(%s) = %q, %v; want an address of this host", a, why, refused)
		}
	}
	if why, refused := Refused(netip.MustParseAddr("8.8.8.8")); refused {
		t.Errorf("Refused(8.8.8.8) = %q: not the host's", why)
	}
	if reads != 1 {
		t.Errorf("the host's addresses were read %d times within their TTL, want once", reads)
	}
	hostAddrs.ttl = 0
	own = nil
	time.Sleep(time.Millisecond)
	if _, refused := Refused(netip.MustParseAddr("8.8.4.4")); refused {
		t.Error("an address the host no longer has is still refused")
	}
	// The real list holds at least loopback.
	if addrs, err := interfaceAddrs(); err != nil || !slices.Contains(addrs, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("interfaceAddrs() = %v, %v; want 127.0.0.1 among them", addrs, err)
	}
}

func TestAllowed(t *testing.T) {
	rules, err := ParseRules("*.pypi.org:443,pypi.org:443,example.com,1.1.1.1:53,127.0.0.1:8080,[::1]:9000")
	if err != nil {
		t.Fatal(err)
	}
	allow := &Policy{Mode: ModeAllowlist, Allow: rules}
	open := &Policy{Mode: ModeOpen, Allow: []Rule{{"127.0.0.1", 8080}}}
	none := &Policy{Mode: ModeNone, Allow: rules}
	var zero Policy
	tests := []struct {
		name   string
		pol    *Policy
		host   string
		port   uint16
		ok     bool
		reason string
	}{
		{"exact name and port", allow, "pypi.org", 443, true, "pypi.org:443"},
		{"wrong port", allow, "pypi.org", 80, false, "port 80 is not allowed for pypi.org (allowed: 443)"},
		{"wildcard below", allow, "files.pypi.org", 443, true, "*.pypi.org:443"},
		{"wildcard two below", allow, "a.b.pypi.org", 443, true, "*.pypi.org:443"},
		{"wildcard not the apex", &Policy{Mode: ModeAllowlist, Allow: rules[:1]}, "pypi.org", 443, false, "not in the allowlist"},
		{"wildcard not a suffix lookalike", allow, "evilpypi.org", 443, false, "not in the allowlist"},
		{"case and trailing dot", allow, "Files.PyPI.org.", 443, true, "*.pypi.org:443"},
		{"any port", allow, "example.com", 8443, true, "example.com"},
		{"subdomain of exact", allow, "www.example.com", 443, false, "not in the allowlist"},
		{"unlisted", allow, "evil.test", 443, false, "not in the allowlist"},
		{"public IP rule", allow, "1.1.1.1", 53, true, "1.1.1.1:53"},
		{"public IP other port", allow, "1.1.1.1", 443, false, "port 443 is not allowed for 1.1.1.1 (allowed: 53)"},
		{"loopback named", allow, "127.0.0.1", 8080, true, "127.0.0.1:8080"},
		{"loopback other port", allow, "127.0.0.1", 8081, false, "127.0.0.1 is a loopback address"},
		{"loopback mapped", allow, "::ffff:127.0.0.1", 8080, true, "127.0.0.1:8080"},
		{"IPv6 loopback named", allow, "::1", 9000, true, "[::1]:9000"},
		{"metadata", allow, "169.254.169.254", 80, false, "169.254.169.254 is a cloud metadata address"},
		{"invalid name", allow, "a b", 80, false, "not a valid host name"},
		{"port 0", allow, "pypi.org", 0, false, "port 0 is not a destination"},
		{"mode none", none, "pypi.org", 443, false, "the network is off for this box (mode none)"},
		{"zero policy", &zero, "pypi.org", 443, false, "the network is off for this box (mode none)"},
		{"open: any name, any port", open, "anything.test", 25, true, "open mode"},
		{"open: public IP", open, "8.8.8.8", 53, true, "open mode"},
		{"open: loopback refused", open, "127.0.0.1", 80, false, "127.0.0.1 is a loopback address"},
		{"open: loopback named", open, "127.0.0.1", 8080, true, "127.0.0.1:8080"},
		{"open: private refused", open, "192.168.0.1", 80, false, "192.168.0.1 is a private address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := tt.pol.Allowed(tt.host, tt.port)
			if ok != tt.ok || reason != tt.reason {
				t.Errorf("Allowed(%q, %d) = %v, %q; want %v, %q", tt.host, tt.port, ok, reason, tt.ok, tt.reason)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ph := NewPlaceholder()
	good := func() *Policy {
		return &Policy{
			Mode:    ModeAllowlist,
			Allow:   []Rule{{"api.test", 443}},
			Secrets: []Secret{{Env: "API_KEY", Placeholder: ph, Value: "sk-real", Hosts: []Rule{{"api.test", 443}}}},
			Hosts:   map[string][]netip.Addr{"api.test": {loopback}},
		}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good policy: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Policy)
		want   string
	}{
		{"unknown mode", func(p *Policy) { p.Mode = "wide-open" }, `unknown network mode "wide-open"`},
		{"bad rule", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "a..b"}) }, "empty label"},
		{"upper-case rule", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "A.com"}) }, "not in canonical form"},
		{"loopback rule without port", func(p *Policy) { p.Allow = append(p.Allow, Rule{Host: "127.0.0.1"}) }, "name it with its port"},
		{"secret without env", func(p *Policy) { p.Secrets[0].Env = "" }, "has no Env name"},
		{"short placeholder", func(p *Policy) { p.Secrets[0].Placeholder = "x" }, "placeholder shorter than 16"},
		{"no value", func(p *Policy) { p.Secrets[0].Value = "" }, "has no value"},
		{"placeholder in value", func(p *Policy) { p.Secrets[0].Value = "a" + ph + "b" }, "the placeholder occurs in the value"},
		{"CRLF in value", func(p *Policy) { p.Secrets[0].Value = "x\r\nX-Evil: 1" }, "control characters"},
		{"no hosts", func(p *Policy) { p.Secrets[0].Hosts = nil }, "has no hosts"},
		{"bad secret host", func(p *Policy) { p.Secrets[0].Hosts = []Rule{{Host: "*"}} }, "alone would allow everything"},
		{"same placeholder twice", func(p *Policy) {
			p.Secrets = append(p.Secrets, Secret{Env: "OTHER", Placeholder: ph, Value: "v", Hosts: p.Allow})
		}, "overlapping placeholders"},
		{"negative limit", func(p *Policy) { p.Limits.BytesIn = -1 }, "negative limit"},
		{"bad hosts name", func(p *Policy) { p.Hosts["Bad Name"] = []netip.Addr{loopback} }, "not a valid lower-case host name"},
		{"hosts without address", func(p *Policy) { p.Hosts["x.test"] = nil }, "has no addresses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.change(p)
			err := p.Validate()
			if err == nil || !errors.Is(err, ErrBadPolicy) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an ErrBadPolicy containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "sk-real") {
				t.Errorf("error %q shows the secret value", err)
			}
		})
	}
}

func TestNewPlaceholder(t *testing.T) {
	a, b := NewPlaceholder(), NewPlaceholder()
	if a == b {
		t.Fatal("two placeholders are equal")
	}
	rest, ok := strings.CutPrefix(a, "moat-secret-")
	if !ok || len(rest) != 32 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		t.Fatalf("placeholder %q: want moat-secret- and 32 base32 characters", a)
	}
}

func FuzzParseRules(f *testing.F) {
	for _, s := range []string{
		"pypi.org", "*.pypi.org:443", "[::1]:80", "127.0.0.1:8080", "package_managers,a.b",
		"https://x", "a..b", "::ffff:1.2.3.4", "[fe80::1%eth0]:1", "*", "a.com:0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules, err := ParseRules(s)
		if err != nil {
			return
		}
		for _, r := range rules {
			if err := r.validate(); err != nil {
				t.Fatalf("ParseRules(%q) gave %#v, which does not validate: %v", s, r, err)
			}
			if a, err := netip.ParseAddr(r.Host); err == nil {
				if _, refused := Refused(a); refused && r.Port == 0 {
					t.Fatalf("ParseRules(%q) allows refused %s on any port", s, a)
				}
			}
		}
	})
}

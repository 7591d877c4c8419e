package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// resolverFor returns a Go resolver that asks only the box's DNS socket.
func resolverFor(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
}

// query sends one raw query and returns the answer, or an error after a
// short wait.
func query(t *testing.T, addr string, q []byte) (*dnsmessage.Message, error) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatalf("unpack answer: %v", err)
	}
	return &m, nil
}

func packQuery(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	m := dnsmessage.Message{
		Header: dnsmessage.Header{ID: 4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{
			Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET,
		}},
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDNS(t *testing.T) {
	public := netip.MustParseAddr("93.184.215.14")
	public6 := netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")
	resolve := fakeResolve(map[string][]netip.Addr{
		"pkg.example.test": {public, public6},
		"rebind.test":      {netip.MustParseAddr("127.0.0.2")}, // 127.0.0.1 is named below
		"mixed.test":       {netip.MustParseAddr("10.0.0.1"), public},
	})
	pol := &Policy{
		Mode: ModeAllowlist,
		Allow: []Rule{
			{"*.example.test", 443}, {"rebind.test", 0}, {"mixed.test", 0},
			{"allowed.test", 8080}, {"127.0.0.1", 8080},
		},
		Hosts: map[string][]netip.Addr{"allowed.test": {loopback}},
	}
	h := newHarness(t, pol, hopts{dns: true, opts: Options{Resolve: resolve}})
	r := resolverFor(h.dns)
	ctx := context.Background()

	for _, tt := range []struct {
		name, network string
		want          []netip.Addr
	}{
		{"pkg.example.test.", "ip4", []netip.Addr{public}},
		{"PKG.Example.Test.", "ip6", []netip.Addr{public6}},
		{"allowed.test.", "ip4", []netip.Addr{loopback}}, // from Hosts; 127.0.0.1:8080 is named
		{"mixed.test.", "ip4", []netip.Addr{public}},     // the private address is dropped
	} {
		got, err := r.LookupNetIP(ctx, tt.network, tt.name)
		if err != nil || len(got) != len(tt.want) || got[0] != tt.want[0] {
			t.Errorf("LookupNetIP(%s, %s) = %v, %v; want %v", tt.network, tt.name, got, err, tt.want)
		}
	}
	for _, name := range []string{"denied.test.", "example.test.", "rebind.test."} {
		_, err := r.LookupNetIP(ctx, "ip4", name)
		var de *net.DNSError
		if !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("LookupNetIP(%s) error %v, want not found", name, err)
		}
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "dns" && e.Host == "denied.test" })
	if e.Allowed || e.Reason != "not in the allowlist" {
		t.Errorf("event %+v", e)
	}
	e = h.waitEvent(func(e Event) bool { return e.Kind == "dns" && e.Host == "rebind.test" })
	if e.Allowed || !strings.Contains(e.Reason, "resolves only to addresses moat refuses (127.0.0.2 is a loopback address)") {
		t.Errorf("event %+v", e)
	}

	// Other types of an allowed name: an empty NOERROR answer.
	m, err := query(t, h.dns, packQuery(t, "pkg.example.test.", dnsmessage.TypeTXT))
	if err != nil || m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 || m.ID != 4242 || !m.Response {
		t.Errorf("TXT: %+v, %v", m, err)
	}
	// Of a refused name: NXDOMAIN.
	m, err = query(t, h.dns, packQuery(t, "exfil.evil.test.", dnsmessage.TypeTXT))
	if err != nil || m.RCode != dnsmessage.RCodeNameError {
		t.Errorf("TXT of a refused name: %+v, %v", m, err)
	}
	// Malformed packets and answers are dropped; the server serves on.
	for _, junk := range [][]byte{{1, 2, 3}, make([]byte, 2000), mustResponse(t)} {
		if m, err := query(t, h.dns, junk); err == nil {
			t.Errorf("answer to junk: %+v", m)
		}
	}
	if _, err := r.LookupNetIP(ctx, "ip4", "pkg.example.test."); err != nil {
		t.Errorf("after junk: %v", err)
	}
}

// mustResponse is a well-formed DNS response: not a query, dropped.
func mustResponse(t *testing.T) []byte {
	var p dnsmessage.Parser
	q := packQuery(t, "pkg.example.test.", dnsmessage.TypeA)
	h, _ := p.Start(q)
	qs, _ := p.AllQuestions()
	return dnsReply(h, qs[0], dnsmessage.RCodeSuccess, nil)
}

func TestDNSOpenAndNone(t *testing.T) {
	public := netip.MustParseAddr("93.184.215.14")
	resolve := fakeResolve(map[string][]netip.Addr{"any.test": {public}, "lan.test": {netip.MustParseAddr("192.168.1.10")}})
	open := newHarness(t, &Policy{Mode: ModeOpen}, hopts{dns: true, opts: Options{Resolve: resolve}})
	none := newHarness(t, &Policy{}, hopts{dns: true, opts: Options{Resolve: resolve}})
	ctx := context.Background()
	if got, err := resolverFor(open.dns).LookupNetIP(ctx, "ip4", "any.test."); err != nil || len(got) != 1 || got[0] != public {
		t.Errorf("open: %v, %v", got, err)
	}
	if _, err := resolverFor(open.dns).LookupNetIP(ctx, "ip4", "lan.test."); err == nil {
		t.Error("open: a private address resolved")
	}
	if _, err := resolverFor(none.dns).LookupNetIP(ctx, "ip4", "any.test."); err == nil {
		t.Error("none: a name resolved")
	}
	e := none.waitEvent(func(e Event) bool { return e.Kind == "dns" })
	if e.Allowed || !strings.Contains(e.Reason, "mode none") {
		t.Errorf("event %+v", e)
	}
}

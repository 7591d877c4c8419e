//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// The egress tests reach only servers they start on 127.0.0.1. The boxes name them
// example.com (the name in httptest's certificate), which the config's network.hosts
// maps to 127.0.0.1; the allowlists name 127.0.0.1 with each port, which is how a
// loopback address is let through.

// apiToken is the real value of the secret the boxes get as a placeholder.
const apiToken = "real-token-5b2f0c9e71d4a3"

// upstream is a test server that remembers what reached it.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newUpstream(t *testing.T, tls bool) *upstream {
	t.Helper()
	u := &upstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		if n := r.URL.Query().Get("bytes"); n != "" {
			var size int
			fmt.Sscan(n, &size)
			w.Write(make([]byte, size))
			return
		}
		fmt.Fprintf(w, "hello from %s auth=%s", r.Host, r.Header.Get("Authorization"))
	})
	if tls {
		u.Server = httptest.NewTLSServer(h)
	} else {
		u.Server = httptest.NewServer(h)
	}
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) port() string {
	_, p, _ := net.SplitHostPort(u.Listener.Addr().String())
	return p
}

// headers returns what reached u so far.
func (u *upstream) headers() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}

// egressFixture is three upstreams and a config whose profile "net" allows them.
type egressFixture struct {
	plain, other, tls *upstream
	config            string
	dir               string
}

func newEgressFixture(t *testing.T, extraProfile string) *egressFixture {
	t.Helper()
	f := &egressFixture{plain: newUpstream(t, false), other: newUpstream(t, false), tls: newUpstream(t, true), dir: t.TempDir()}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.tls.Certificate().Raw})
	caFile := writeFixture(t, f.dir, "upstream-ca.pem", ca)
	var allow []string
	for _, u := range []*upstream{f.plain, f.other, f.tls} {
		allow = append(allow, `"example.com:`+u.port()+`"`, `"127.0.0.1:`+u.port()+`"`)
	}
	cfg := fmt.Sprintf(`network:
  hosts:
    example.com: [127.0.0.1]
    public.test: [93.184.215.14]
  upstream_ca: %s
profiles:
  net:
    extends: open
    network:
      mode: allowlist
      allow: [%s, "public.test:443"]
      secrets:
        - env: API_TOKEN
          from_env: MOAT_TEST_API_TOKEN
          hosts: ["example.com:%s", "example.com:%s"]
%s`, caFile, strings.Join(allow, ", "), f.plain.port(), f.tls.port(), extraProfile)
	f.config = writeFixture(t, f.dir, "moat.yaml", []byte(cfg))
	return f
}

// run runs code under the fixture's config with the secret in moat's environment.
func (f *egressFixture) run(t *testing.T, code string, args ...string) runOut {
	t.Helper()
	t.Setenv("MOAT_TEST_API_TOKEN", apiToken)
	return moatRun(t, code, append([]string{"--config", f.config, "--profile", "net", "--lang", "python"}, args...)...)
}

// egressProbe fetches URLs in the box and prints one JSON line per fetch: the HTTP
// status (or the exception's name), the body and the seconds it took.
const egressProbe = `
import json, os, socket, ssl, time, urllib.request, urllib.error
def get(url, headers={}):
    t = time.monotonic()
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
        out = (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        out = (e.code, e.read().decode())
    except Exception as e:
        out = (type(e).__name__, str(e))
    print(json.dumps({"url": url, "status": out[0], "body": out[1], "secs": time.monotonic() - t}))
`

type fetch struct {
	URL    string  `json:"url"`
	Status any     `json:"status"`
	Body   string  `json:"body"`
	Secs   float64 `json:"secs"`
}

func fetches(t *testing.T, o runOut) []fetch {
	t.Helper()
	if o.exit != 0 || o.res.Status != box.StatusOK {
		t.Fatalf("the probe failed:\n%s", o)
	}
	var out []fetch
	for _, line := range strings.Split(strings.TrimSpace(o.res.Stdout), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var f fetch
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("bad probe line %q: %v", line, err)
		}
		out = append(out, f)
	}
	return out
}

func TestEgressAllowlist(t *testing.T) {
	testutil.RequireRoot(t)
	f := newEgressFixture(t, "")
	before := snapshotHost(t)
	code := egressProbe + fmt.Sprintf(`
get("http://example.com:%[1]s/plain")
get("https://example.com:%[2]s/tls")
get("http://refused.test/")
get("https://refused.test/")
get("http://example.com:1/")
print("TOKEN=" + os.environ["API_TOKEN"])
t = time.monotonic()
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n")
line = s.recv(100).split(b"\r\n")[0]
secs = time.monotonic() - t
print("raw refusal", "ok" if line.startswith(b"HTTP/1.1 403") and secs < 0.1 else "slow or wrong", line, secs)
`, f.other.port(), f.tls.port())
	o := f.run(t, code)
	got := fetches(t, o)
	if len(got) != 5 {
		t.Fatalf("want 5 fetches, got %d:\n%s", len(got), o)
	}
	if got[0].Status != float64(200) || !strings.Contains(got[0].Body, "hello from example.com") {
		t.Errorf("plain HTTP to an allowed host: %+v", got[0])
	}
	if got[1].Status != float64(200) || !strings.Contains(got[1].Body, "hello from example.com") {
		t.Errorf("HTTPS to an allowed host (verified against the upstream CA): %+v", got[1])
	}
	for _, r := range got[2:] {
		// urllib reports a refused CONNECT as an error that names the 403.
		if r.Status != float64(403) && !strings.Contains(r.Body, "403") || r.Status == float64(403) && !strings.Contains(r.Body, "refused") {
			t.Errorf("a refused destination: %+v", r)
		}
		// urllib's own work (an SSL context: the CA bundle) is in this; the proxy's
		// answer alone is timed below.
		if r.Secs > 1 {
			t.Errorf("a refusal took %.3fs: %+v", r.Secs, r)
		}
	}
	if !strings.Contains(o.res.Stdout, "raw refusal ok") {
		t.Errorf("the proxy's refusal of a CONNECT was not immediate:\n%s", o.res.Stdout)
	}
	if !strings.Contains(o.res.Stdout, "TOKEN=moat-secret-") || strings.Contains(o.stdout, apiToken) {
		t.Errorf("the box must see a placeholder, never the token:\n%s", o)
	}
	if o.res.Egress == nil || o.res.Egress.Connections < 2 || o.res.Egress.Refused < 3 || o.res.Egress.BytesIn == 0 {
		t.Errorf("result's egress usage: %+v", o.res.Egress)
	} else if len(o.res.Egress.Refusals) == 0 || !strings.Contains(o.res.Egress.Refusals[0].Dest, "refused.test") {
		t.Errorf("result's refusals: %+v", o.res.Egress.Refusals)
	}
	if !hasPrefix(o.res.Isolation, "egress_proxy") || !hasPrefix(o.res.Isolation, "network_namespace") {
		t.Errorf("isolation %v lacks the egress proxy or the network namespace", o.res.Isolation)
	}
	checkHostClean(t, before)
}

// TestEgressSecretPlaceholder: the proxy puts the real token only into requests to
// the secret's hosts, over HTTP and HTTPS (intercepted with moat's CA, which the box
// trusts); another allowed host gets the placeholder; the token never enters the box.
func TestEgressSecretPlaceholder(t *testing.T) {
	testutil.RequireRoot(t)
	f := newEgressFixture(t, "")
	code := egressProbe + fmt.Sprintf(`
h = {"Authorization": "Bearer " + os.environ["API_TOKEN"]}
get("http://example.com:%[1]s/secret", h)
get("https://example.com:%[2]s/secret", h)
get("http://example.com:%[3]s/elsewhere", h)
print(open("/proc/self/environ", "rb").read().decode(errors="replace"))
`, f.plain.port(), f.tls.port(), f.other.port())
	o := f.run(t, code)
	got := fetches(t, o)
	if len(got) != 3 {
		t.Fatalf("want 3 fetches:\n%s", o)
	}
	for _, u := range []*upstream{f.plain, f.tls} {
		hs := u.headers()
		if len(hs) != 1 || hs[0].Get("Authorization") != "Bearer "+apiToken {
			t.Errorf("the secret's host got %v, want the real token", hs)
		}
	}
	hs := f.other.headers()
	if len(hs) != 1 || !strings.HasPrefix(hs[0].Get("Authorization"), "Bearer moat-secret-") {
		t.Errorf("a host not allowed the secret got %v, want the placeholder", hs)
	}
	if strings.Contains(o.stdout, apiToken) || strings.Contains(o.stderr, apiToken) {
		t.Errorf("the real token reached the box's output:\n%s", o)
	}
}

// TestEgressBypassesFail: code that ignores the proxy, lies about the Host or the
// TLS name, or looks up a name it may not reach, fails at once, and no server hears
// anything from it.
func TestEgressBypassesFail(t *testing.T) {
	testutil.RequireRoot(t)
	f := newEgressFixture(t, "")
	// A listener on the host's loopback that no allowlist names.
	hidden, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hidden.Close()
	heard := make(chan string, 4)
	go func() {
		for {
			c, err := hidden.Accept()
			if err != nil {
				return
			}
			heard <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	_, hiddenPort, _ := net.SplitHostPort(hidden.Addr().String())
	code := fmt.Sprintf(`
import json, socket, ssl, time
def attempt(name, fn):
    t = time.monotonic()
    try:
        r = fn()
        out = "ok " + str(r)
    except Exception as e:
        out = type(e).__name__ + " " + str(e)
    print(json.dumps({"name": name, "out": out, "secs": time.monotonic() - t}))

# direct connects, ignoring the proxy
attempt("direct-allowed", lambda: socket.create_connection(("127.0.0.1", %[1]s), timeout=5))
attempt("direct-hidden", lambda: socket.create_connection(("127.0.0.1", %[2]s), timeout=5))
attempt("direct-public", lambda: socket.create_connection(("203.0.113.7", 3128), timeout=5))
# DNS
attempt("dns-refused", lambda: socket.getaddrinfo("refused.test", 80))
attempt("dns-allowed", lambda: sorted({a[4][0] for a in socket.getaddrinfo("public.test", 443, socket.AF_INET)}))
# the proxy asked for a destination not allowed, and for the hidden port
def proxy(req):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(req)
    return s.recv(200).decode(errors="replace").split("\r\n")[0]
attempt("connect-hidden", lambda: proxy(b"CONNECT 127.0.0.1:%[2]s HTTP/1.1\r\nHost: 127.0.0.1:%[2]s\r\n\r\n"))
attempt("host-mismatch", lambda: proxy(b"GET http://example.com:%[3]s/ HTTP/1.1\r\nHost: 127.0.0.1:%[2]s\r\n\r\n"))
# TLS whose SNI names another host than the CONNECT
def sni():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b"CONNECT example.com:%[4]s HTTP/1.1\r\nHost: example.com:%[4]s\r\n\r\n")
    s.recv(200)
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(s, server_hostname="refused.test").version()
attempt("sni-mismatch", sni)
`, f.plain.port(), hiddenPort, f.plain.port(), f.tls.port())
	o := f.run(t, code)
	if o.exit != 0 || o.res.Status != box.StatusOK {
		t.Fatalf("probe failed:\n%s", o)
	}
	results := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(o.res.Stdout), "\n") {
		var r struct {
			Name, Out string
			Secs      float64
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad line %q", line)
		}
		results[r.Name] = r.Out
		if r.Secs > 0.5 {
			t.Errorf("%s took %.3fs: a refusal must be immediate", r.Name, r.Secs)
		}
	}
	for name, want := range map[string]string{
		"direct-allowed": "Error", // Landlock (EACCES) or the empty loopback (ECONNREFUSED)
		"direct-hidden":  "Error",
		"direct-public":  "Network is unreachable",
		"dns-refused":    "gaierror",
		"dns-allowed":    "ok ['93.184.215.14']",
		"connect-hidden": "403",
		"host-mismatch":  "40", // 400 or 403
		"sni-mismatch":   "Error",
	} {
		if !strings.Contains(results[name], want) {
			t.Errorf("%s: got %q, want it to contain %q", name, results[name], want)
		}
	}
	select {
	case from := <-heard:
		t.Errorf("the hidden host listener was reached from %s", from)
	default:
	}
	if n := len(f.plain.headers()) + len(f.tls.headers()); n != 0 {
		t.Errorf("the allowed servers heard %d requests from bypass attempts", n)
	}
}

// TestEgressLimits: the profile's byte and connection limits end the traffic past
// them, and say so.
func TestEgressLimits(t *testing.T) {
	testutil.RequireRoot(t)
	f := newEgressFixture(t, `  tight:
    extends: net
    network:
      limits: {connections: 2, bytes_in: 1MiB}
`)
	code := egressProbe + fmt.Sprintf(`
get("http://example.com:%[1]s/?bytes=100")
get("http://example.com:%[1]s/?bytes=4000000")
get("http://example.com:%[1]s/?bytes=100")
get("http://example.com:%[1]s/?bytes=100")
`, f.other.port())
	t.Setenv("MOAT_TEST_API_TOKEN", apiToken)
	o := moatRun(t, code, "--config", f.config, "--profile", "tight", "--lang", "python")
	got := fetches(t, o)
	if len(got) != 4 || got[0].Status != float64(200) {
		t.Fatalf("fetches: %+v\n%s", got, o)
	}
	if got[1].Status == float64(200) && len(got[1].Body) >= 4000000 {
		t.Errorf("a 4 MB download passed a 1 MiB limit")
	}
	if got[3].Status == float64(200) {
		t.Errorf("a connection past the limit of 2 went through: %+v", got)
	}
}

// TestEgressRequestNarrowing: API callers may only narrow their profile's network;
// the CLI operator may name any allowlist; open needs the config's consent. Each
// decision of the proxy is in the audit trail.
func TestEgressRequestNarrowing(t *testing.T) {
	testutil.RequireRoot(t)
	f := newEgressFixture(t, "")
	cfg, err := os.ReadFile(f.config)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MOAT_TEST_KEY_ADMIN", keyAdmin)
	t.Setenv("MOAT_TEST_API_TOKEN", apiToken)
	s := startServer(t, serverOpts{config: `server:
  api_keys:
    - principal: alice
      key_env: MOAT_TEST_KEY_ALICE
      profile: net
    - principal: root
      key_env: MOAT_TEST_KEY_ADMIN
      admin: true
` + string(cfg)})
	exec := func(network, code string) (int, string, []byte) {
		body, _ := json.Marshal(map[string]string{"language": "python", "code": code, "network": network})
		return apiDo(t, s, "POST", "/v1/execute", keyAlice, string(body))
	}
	fetchOther := egressProbe + fmt.Sprintf(`get("http://example.com:%s/")`, f.other.port())
	// Narrowed to none: the profile's host is out of reach.
	code, _, body := exec("none", fetchOther)
	if code != 200 || !strings.Contains(string(body), "URLError") && !strings.Contains(string(body), "gaierror") {
		t.Errorf("network none: %d %s", code, body)
	}
	// Narrowed to one allowed host: fine.
	code, reqID, body := exec("allow:example.com:"+f.other.port()+",127.0.0.1:"+f.other.port(), fetchOther)
	if code != 200 || !strings.Contains(string(body), "hello from example.com") {
		t.Errorf("a narrowed allowlist: %d %s", code, body)
	}
	// Widened: refused before anything runs.
	for _, n := range []string{"allow:pypi.org", "allow:127.0.0.1:22", "open", "allow:*.com"} {
		code, _, body := exec(n, "print(1)")
		if code != 400 || !strings.Contains(string(body), "network") {
			t.Errorf("network %q: %d %s, want 400 naming the network", n, code, body)
		}
	}
	// A session keeps its network across calls; each call's result counts its own
	// traffic.
	c := s.client(keyAlice)
	ctx := context.Background()
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if !hasPrefix(info.Isolation, "egress_proxy") {
		t.Errorf("session isolation %v lacks the egress proxy", info.Isolation)
	}
	res := sessionCall(t, c, info.ID, egressProbe, "")
	for i := 0; i < 2; i++ {
		res = sessionCall(t, c, info.ID, fmt.Sprintf(`get("http://example.com:%s/")`, f.other.port()), "")
		if !strings.Contains(res.Stdout, "hello from example.com") || res.Egress == nil || res.Egress.Connections != 1 || res.Egress.Refused != 0 {
			t.Fatalf("session call %d: %+v %+v", i, res, res.Egress)
		}
	}
	res = sessionCall(t, c, info.ID, `get("http://refused.test/")`, "")
	if res.Egress == nil || res.Egress.Connections != 0 || res.Egress.Refused != 1 || len(res.Egress.Refusals) != 1 {
		t.Fatalf("a refused call: %+v %+v", res, res.Egress)
	}
	if err := c.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}

	// One allowed connection of the narrowed execution, two allowed and one refused
	// of the session.
	recs := waitRecords(t, s, "kind="+audit.KindEgress, 4)
	found := false
	for _, r := range byRequest(recs, reqID) {
		found = found || r.Status == audit.StatusOK && strings.HasPrefix(r.Dest, "example.com:") && r.BytesIn > 0
	}
	if !found {
		t.Errorf("no audit record of the allowed connection of request %s: %+v", reqID, recs)
	}
	inSession := 0
	for _, r := range recs {
		if r.Session == info.ID && r.Status == audit.StatusRefused && r.Dest == "refused.test:80" {
			inSession++
		}
	}
	if inSession != 1 {
		t.Errorf("want one refused record of the session, got %d: %+v", inSession, recs)
	}
}

func hasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// TestEgressRootless: moat started by an ordinary user gives boxes the same way out
// (the box's init makes the sockets in its own user and network namespaces).
func TestEgressRootless(t *testing.T) {
	testutil.RequireRoot(t) // to switch to the other user
	up := newUpstream(t, false)
	cred := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	code := egressProbe + fmt.Sprintf(`
get("http://127.0.0.1:%s/")
get("http://refused.test/")
`, up.port())
	o := moatExecAs(t, cred, code, "run", "--json", "--profile", "open", "--lang", "python", "--network", "allow:127.0.0.1:"+up.port())
	got := fetches(t, o)
	if len(got) != 2 || got[0].Status != float64(200) || got[1].Status != float64(403) {
		t.Fatalf("fetches %+v\n%s", got, o)
	}
	if !slices.Contains(o.res.Isolation, "rootless") || !hasPrefix(o.res.Isolation, "egress_proxy") {
		t.Errorf("isolation %v", o.res.Isolation)
	}
	if len(up.headers()) != 1 {
		t.Errorf("the upstream saw %d requests, want 1", len(up.headers()))
	}
}

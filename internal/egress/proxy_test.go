package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// echoHandler answers with what it received.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "host=%s uri=%s method=%s body=%s", r.Host, r.RequestURI, r.Method, body)
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Authorization"} {
		if v := r.Header.Get(h); v != "" {
			fmt.Fprintf(w, " %s=%s", h, v)
		}
	}
}

func TestHTTPAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	h := newHarness(t, allowPolicy(t, map[string]string{"allowed.test": srv.URL}), hopts{})
	client, _ := h.client(nil)

	resp, err := client.Get(hostURL(t, srv.URL, "allowed.test", "/hello?x=1"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("host=allowed.test:%d uri=/hello?x=1 method=GET body=", port(t, srv.URL))
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "http" })
	if !e.Allowed || e.Host != "allowed.test" || e.Addr != "127.0.0.1:"+fmt.Sprint(port(t, srv.URL)) ||
		e.BytesOut == 0 || e.BytesIn == 0 || e.Reason != "" {
		t.Errorf("event %+v", e)
	}
	if s := h.box.Stats(); s.Conns != 1 || s.Refused != 0 || s.BytesIn != e.BytesIn || s.BytesOut != e.BytesOut {
		t.Errorf("stats %+v, event %+v", s, e)
	}
}

// TestHTTPKeepAliveAndHeaders sends two requests on one proxy connection, the
// first with a body and proxy-only headers: the server sees neither those
// headers nor the absolute URL, and the second request is judged on its own.
func TestHTTPKeepAliveAndHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	h := newHarness(t, allowPolicy(t, map[string]string{"allowed.test": srv.URL}), hopts{})
	p := port(t, srv.URL)
	c, br := h.raw(fmt.Sprintf("POST http://allowed.test:%d/a HTTP/1.1\r\nHost: allowed.test:%d\r\n"+
		"Proxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nConnection: X-Hop\r\nX-Hop: 1\r\n"+
		"Content-Length: 5\r\n\r\nhello", p, p))
	resp, body := readResp(t, br, "POST")
	want := fmt.Sprintf("host=allowed.test:%d uri=/a method=POST body=hello", p)
	if resp.StatusCode != 200 || body != want {
		t.Fatalf("first: %d %q, want %q", resp.StatusCode, body, want)
	}
	fmt.Fprintf(c, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	resp, body = readResp(t, br, "GET")
	if resp.StatusCode != 403 || body != "moat: egress to denied.test:80 refused: not in the allowlist\n" {
		t.Fatalf("second: %d %q", resp.StatusCode, body)
	}
	// Clients that show only the status line (pip, urllib3) show why, too.
	if resp.Status != "403 Forbidden by moat: egress to denied.test:80 refused: not in the allowlist" {
		t.Fatalf("status line %q", resp.Status)
	}
}

func TestHTTPRefused(t *testing.T) {
	h := newHarness(t, &Policy{Mode: ModeAllowlist, Allow: []Rule{{"allowed.test", 0}}}, hopts{})
	client, _ := h.client(nil)
	start := time.Now()
	resp, err := client.Get("http://denied.test/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("refusal took %v", d)
	}
	if resp.StatusCode != 403 || resp.Header.Get("X-Moat-Egress") != "refused" ||
		resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !resp.Close ||
		string(body) != "moat: egress to denied.test:80 refused: not in the allowlist\n" {
		t.Fatalf("got %d %v %q", resp.StatusCode, resp.Header, body)
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "http" })
	if e.Allowed || e.Host != "denied.test" || e.Port != 80 || e.Reason != "not in the allowlist" || e.Addr != "" {
		t.Errorf("event %+v", e)
	}
	if s := h.box.Stats(); s.Refused != 1 || s.Conns != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestHTTPHostMismatch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	h := newHarness(t, allowPolicy(t, map[string]string{"allowed.test": srv.URL}), hopts{})
	p := port(t, srv.URL)
	_, br := h.raw(fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", p))
	resp, body := readResp(t, br, "GET")
	want := fmt.Sprintf("moat: egress to allowed.test:%d refused: Host header names \"evil.test\" but the request is for allowed.test:%d\n", p, p)
	if resp.StatusCode != 403 || body != want {
		t.Fatalf("got %d %q, want %q", resp.StatusCode, body, want)
	}
	// The same host without the default port is no mismatch.
	_, br = h.raw("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n")
	if resp, body := readResp(t, br, "GET"); resp.StatusCode != 403 || !strings.Contains(body, "port 80 is not allowed") {
		t.Fatalf("default port: %d %q", resp.StatusCode, body)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	h := newHarness(t, &Policy{Mode: ModeOpen}, hopts{shorten: true})
	tests := []struct {
		name, send string
		status     int
		body       string
	}{
		{"origin form", "GET /path HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "send requests in absolute form"},
		{"https scheme", "GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "https goes through CONNECT"},
		{"garbage", "HELLO\r\n\r\n", 400, "malformed request"},
		{"bad header", "GET http://a.test/ HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "malformed request"},
		{"header too large", "GET http://a.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", 431, "larger than 65536 bytes"},
		{"incomplete header", "GET http://a.test/ HTTP/1.1\r\nX: 1\r\n", 408, "no complete request header within 300ms"},
		{"CONNECT without port", "CONNECT a.test HTTP/1.1\r\n\r\n", 400, "CONNECT needs host:port"},
		{"invalid host", "GET http://a_b-.test/ HTTP/1.1\r\n\r\n", 403, "not a valid host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, br := h.raw(tt.send)
			resp, body := readResp(t, br, "GET")
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.body) {
				t.Fatalf("got %d %q, want %d with %q", resp.StatusCode, body, tt.status, tt.body)
			}
			// The proxy closed the connection.
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				t.Errorf("after the answer: %d, %v; want EOF", n, err)
			}
		})
	}
}

// TestIdleTimeout: a connection that sends nothing is closed after the idle
// timeout, without an answer; one that sends half a header gets 408 (see
// TestHTTPBadRequests); a long Host header is clipped in the event.
func TestIdleTimeout(t *testing.T) {
	h := newHarness(t, &Policy{Mode: ModeOpen}, hopts{shorten: true})
	c, _ := h.raw("")
	start := time.Now()
	n, err := c.Read(make([]byte, 100))
	if !errors.Is(err, io.EOF) || n != 0 {
		t.Fatalf("read %d, %v; want EOF", n, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("closed after %v, want the idle timeout (300ms)", d)
	}

	long := strings.Repeat("h", 1000) + ".test"
	_, br := h.raw("GET http://a.test/ HTTP/1.1\r\nHost: " + long + "\r\n\r\n")
	resp, _ := readResp(t, br, "GET")
	if resp.StatusCode != 403 {
		t.Fatalf("got %d", resp.StatusCode)
	}
	e := h.waitEvent(func(e Event) bool { return strings.Contains(e.Reason, "Host header") })
	if len(e.Reason) > maxClip+100 {
		t.Errorf("reason of %d bytes", len(e.Reason))
	}
}

// TestRebinding: an allowed name whose address is loopback is refused, by the
// Hosts map or by DNS, unless the allowlist names that IP:port.
func TestRebinding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	p := port(t, srv.URL)
	resolve := fakeResolve(map[string][]netip.Addr{"rebind.test": {loopback}})
	for _, tt := range []struct {
		name string
		pol  *Policy
		want int
	}{
		{"by DNS", &Policy{Mode: ModeAllowlist, Allow: []Rule{{"rebind.test", 0}}}, 403},
		{"by Hosts", &Policy{Mode: ModeAllowlist, Allow: []Rule{{"rebind.test", 0}},
			Hosts: map[string][]netip.Addr{"rebind.test": {loopback}}}, 403},
		{"other port named", &Policy{Mode: ModeAllowlist, Allow: []Rule{{"rebind.test", 0}, {"127.0.0.1", p + 1}}}, 403},
		{"open mode", &Policy{Mode: ModeOpen}, 403},
		{"IP:port named", &Policy{Mode: ModeAllowlist, Allow: []Rule{{"rebind.test", 0}, {"127.0.0.1", p}}}, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.pol, hopts{opts: Options{Resolve: resolve}})
			client, _ := h.client(nil)
			resp, err := client.Get(hostURL(t, srv.URL, "rebind.test", "/"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tt.want)
			}
			if tt.want == 403 {
				want := "refused: rebind.test resolves only to addresses moat refuses (127.0.0.1 is a loopback address)\n"
				if !strings.HasSuffix(string(body), want) {
					t.Fatalf("body %q, want it to end with %q", body, want)
				}
			}
		})
	}
}

func TestHTTPDialFails(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	pol := allowPolicy(t, map[string]string{"gone.test": addr})
	h := newHarness(t, pol, hopts{})
	_, br := h.raw(fmt.Sprintf("GET http://gone.test:%d/ HTTP/1.1\r\nHost: gone.test:%d\r\n\r\n", port(t, addr), port(t, addr)))
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 502 || resp.Header.Get("X-Moat-Egress") != "error" || !strings.Contains(body, "could not connect") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "http" })
	if !e.Allowed || !strings.Contains(e.Error, "could not connect") {
		t.Errorf("event %+v", e)
	}
}

// TestHTTPStreaming: a response streamed slowly reaches the client piece by
// piece, not when the buffer fills.
func TestHTTPStreaming(t *testing.T) {
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
	}))
	defer srv.Close()
	defer close(next)
	h := newHarness(t, allowPolicy(t, map[string]string{"stream.test": srv.URL}), hopts{})
	client, _ := h.client(nil)
	resp, err := client.Get(hostURL(t, srv.URL, "stream.test", "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		br.ReadString('\n')
		if i < 2 {
			next <- struct{}{}
		}
	}
}

// tlsUpstream starts an HTTPS echo server for name and a policy allowing it.
func tlsUpstream(t *testing.T, k testPKI, name string) (*httptest.Server, *Policy) {
	srv := k.tlsServer(t, name, http.HandlerFunc(echoHandler))
	return srv, allowPolicy(t, map[string]string{name: srv.URL})
}

func TestConnectAllowed(t *testing.T) {
	k := newPKI(t)
	srv, pol := tlsUpstream(t, k, "tls.test")
	h := newHarness(t, pol, hopts{})
	client, tr := h.client(k.ca.Pool())
	resp, err := client.Get(hostURL(t, srv.URL, "tls.test", "/secure"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "uri=/secure") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	// The tunnel was not intercepted: the client saw the server's own certificate.
	if !resp.TLS.PeerCertificates[0].Equal(srv.TLS.Certificates[0].Leaf) {
		t.Error("the client did not see the server's certificate")
	}
	tr.CloseIdleConnections()
	e := h.waitEvent(func(e Event) bool { return e.Kind == "connect" })
	if !e.Allowed || e.Host != "tls.test" || e.Port != port(t, srv.URL) || e.BytesIn < 500 || e.BytesOut < 200 || e.Duration <= 0 {
		t.Errorf("event %+v", e)
	}
}

func TestConnectRefusedFast(t *testing.T) {
	h := newHarness(t, &Policy{Mode: ModeAllowlist, Allow: []Rule{{"allowed.test", 443}}}, hopts{})
	for _, target := range []string{"denied.test:443", "allowed.test:22", "169.254.169.254:80", "127.0.0.1:22"} {
		t.Run(target, func(t *testing.T) {
			start := time.Now()
			_, br := h.raw("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")
			resp, body := readResp(t, br, "CONNECT")
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Errorf("refusal took %v", d)
			}
			if resp.StatusCode != 403 || resp.Header.Get("X-Moat-Egress") != "refused" ||
				!strings.HasPrefix(body, "moat: egress to "+target+" refused: ") {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
		})
	}
	// And through a real client: an error at once, not a hang.
	client, _ := h.client(nil)
	start := time.Now()
	_, err := client.Get("https://denied.test/")
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("got %v, want a Forbidden error", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("client saw the refusal after %v", d)
	}
}

// connectTunnel opens a tunnel through the proxy and returns the raw
// connection after the 200.
func connectTunnel(t *testing.T, h *harness, target string) net.Conn {
	t.Helper()
	c, br := h.raw("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n")
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	c.SetDeadline(time.Time{})
	return &replayConn{Conn: c, r: br} // what br read past the 200 is the server's
}

func TestConnectSNIMismatch(t *testing.T) {
	k := newPKI(t)
	srv, pol := tlsUpstream(t, k, "tls.test")
	h := newHarness(t, pol, hopts{})
	target := fmt.Sprintf("tls.test:%d", port(t, srv.URL))
	c := connectTunnel(t, h, target)
	tc := tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with SNI evil.test succeeded")
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "connect" })
	if e.Allowed || e.Reason != "TLS SNI evil.test does not match CONNECT host tls.test" || e.BytesOut != 0 {
		t.Errorf("event %+v", e)
	}

	// The same name in another case is fine, and so is no SNI at all (Go
	// sends none when ServerName is an IP address).
	for _, sni := range []string{"TLS.test", "127.0.0.1"} {
		c := connectTunnel(t, h, target)
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			t.Errorf("SNI %q: %v", sni, err)
		}
		tc.Close()
	}
}

func TestConnectBadHello(t *testing.T) {
	k := newPKI(t)
	srv, pol := tlsUpstream(t, k, "tls.test")
	h := newHarness(t, pol, hopts{shorten: true})
	target := fmt.Sprintf("tls.test:%d", port(t, srv.URL))
	for _, tt := range []struct{ name, send, reason string }{
		{"malformed", "\x16\x03\x01\x00\x04\x01\x00\x00\x00", "no valid TLS ClientHello: malformed"},
		{"truncated", "\x16\x03\x01\x01\x00abc", "no complete TLS ClientHello within 300ms"},
		{"too large", hugeHello(), fmt.Sprintf("no valid TLS ClientHello: longer than %d bytes", maxHelloBytes)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := connectTunnel(t, h, target)
			io.WriteString(c, tt.send)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 100)); err == nil {
				t.Fatalf("read %d bytes from a refused tunnel", n)
			}
			e := h.waitEvent(func(e Event) bool { return e.Kind == "connect" && e.Reason == tt.reason })
			if e.Allowed {
				t.Errorf("event %+v", e)
			}
		})
	}
}

// hugeHello is the start of a ClientHello of 60000 bytes in four records.
func hugeHello() string {
	var b strings.Builder
	for i := range 4 {
		b.WriteString("\x16\x03\x01\x40\x00") // a handshake record of 16384 bytes
		body := make([]byte, 16384)
		if i == 0 {
			copy(body, "\x01\x00\xea\x60") // ClientHello, 60000 bytes
		}
		b.Write(body)
	}
	return b.String()
}

// tcpServer starts a TCP server on loopback that runs serve for each
// connection.
func tcpServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return l.Addr().String()
}

// TestConnectNotTLS: a tunnel whose client does not speak TLS is relayed as
// it is, even when the server speaks first (as SSH does).
func TestConnectNotTLS(t *testing.T) {
	addr := tcpServer(t, func(c net.Conn) {
		io.WriteString(c, "SSH-2.0-test\r\n")
		io.Copy(c, c)
	})
	h := newHarness(t, allowPolicy(t, map[string]string{"ssh.test": addr}), hopts{})
	c := connectTunnel(t, h, fmt.Sprintf("ssh.test:%d", port(t, addr)))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("greeting %q, %v", line, err)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q, %v", line, err)
	}
	c.(*replayConn).Conn.(*net.TCPConn).CloseWrite()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after half-close: %v, want EOF", err)
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "connect" })
	if !e.Allowed || e.BytesOut != 5 || e.BytesIn != 19 {
		t.Errorf("event %+v", e)
	}
}

// TestPanicRecovered: a panic while serving one connection (here from the
// event callback) ends that connection only; the proxy serves on.
func TestPanicRecovered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	pol := allowPolicy(t, map[string]string{"allowed.test": srv.URL})
	h := newHarness(t, pol, hopts{onEvent: func(e Event) {
		if e.Host == "panic.test" {
			panic("test panic")
		}
	}})
	c, _ := h.raw("GET http://panic.test/ HTTP/1.1\r\nHost: panic.test\r\n\r\n")
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes, want the connection closed", n)
	}
	client, _ := h.client(nil)
	resp, err := client.Get(hostURL(t, srv.URL, "allowed.test", "/"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the panic: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestInvalidPolicyRefusesAll(t *testing.T) {
	h := newHarness(t, &Policy{Mode: "bogus"}, hopts{})
	_, br := h.raw("CONNECT a.test:443 HTTP/1.1\r\n\r\n")
	resp, body := readResp(t, br, "CONNECT")
	if resp.StatusCode != 403 || !strings.Contains(body, "the box's egress policy is invalid") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// TestAttachCopiesPolicy: changing the Policy after Attach changes nothing.
func TestAttachCopiesPolicy(t *testing.T) {
	pol := &Policy{Mode: ModeAllowlist, Allow: []Rule{{"a.test", 443}}}
	h := newHarness(t, pol, hopts{})
	pol.Allow[0] = Rule{"evil.test", 443}
	pol.Mode = ModeOpen
	_, br := h.raw("CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
	if resp, _ := readResp(t, br, "CONNECT"); resp.StatusCode != 403 {
		t.Fatalf("got %d", resp.StatusCode)
	}
}

var _ = context.Background

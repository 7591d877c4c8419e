package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestLimitConns(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	pol := allowPolicy(t, map[string]string{"allowed.test": srv.URL})
	pol.Limits.Conns = 2
	h := newHarness(t, pol, hopts{})
	client, _ := h.client(nil)
	url := hostURL(t, srv.URL, "allowed.test", "/")
	for i := range 3 {
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := 200
		if i == 2 {
			want = 403
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %q, want %d", i+1, resp.StatusCode, body, want)
		}
		if i == 2 && !strings.HasSuffix(string(body), "refused: connection limit of 2 reached\n") {
			t.Fatalf("request 3: %q", body)
		}
	}
	if s := h.box.Stats(); s.Conns != 2 || s.Refused != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestLimitBytesIn(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(big) }))
	defer srv.Close()
	pol := allowPolicy(t, map[string]string{"big.test": srv.URL})
	pol.Limits.BytesIn = 10000
	h := newHarness(t, pol, hopts{})
	client, _ := h.client(nil)
	url := hostURL(t, srv.URL, "big.test", "/")
	resp, err := client.Get(url)
	if err == nil {
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("read %d bytes whole, past a limit of 10000", n)
		}
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "http" })
	if e.Error != "cut off: byte limit of 10000 bytes in reached" {
		t.Errorf("event %+v", e)
	}
	if s := h.box.Stats(); s.BytesIn != 10001 {
		t.Errorf("stats %+v", s)
	}
	// Later requests are refused at once.
	resp, err = client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.HasSuffix(string(body), "refused: byte limit of 10000 bytes in reached\n") {
		t.Errorf("after the limit: %d %q", resp.StatusCode, body)
	}
}

func TestLimitBytesOutTunnel(t *testing.T) {
	addr := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	pol := allowPolicy(t, map[string]string{"sink.test": addr})
	pol.Limits.BytesOut = 1000
	h := newHarness(t, pol, hopts{})
	c := connectTunnel(t, h, fmt.Sprintf("sink.test:%d", port(t, addr)))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var sent int
	var err error
	for sent < 10<<20 && err == nil { // the proxy closes the tunnel long before
		var n int
		n, err = c.Write(make([]byte, 4096))
		sent += n
	}
	if err == nil {
		t.Fatalf("sent %d bytes through a tunnel limited to 1000", sent)
	}
	e := h.waitEvent(func(e Event) bool { return e.Kind == "connect" })
	if !e.Allowed || e.Error != "cut off: byte limit of 1000 bytes out reached" || e.BytesOut > 1001 {
		t.Errorf("event %+v", e)
	}
}

// TestCloseEndsEverything: Close ends live tunnels, idle connections and the
// DNS server, returns promptly, leaves no goroutine behind, and reports no
// event after it returns.
func TestCloseEndsEverything(t *testing.T) {
	addr := tcpServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	srv := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer srv.Close()
	k := newPKI(t)
	api := k.tlsServer(t, "api.test", secretHandler(nil))
	proxyCA, _ := NewCA()
	before := runtime.NumGoroutine()

	pol, ph := secretPolicy(t, map[string]string{"hold.test": addr, "allowed.test": srv.URL, "api.test": api.URL}, "api.test")
	h := newHarness(t, pol, hopts{dns: true, opts: Options{CA: proxyCA, UpstreamRoots: k.ca.Pool()}})
	if _, err := resolverFor(h.dns).LookupNetIP(context.Background(), "ip4", "hold.test."); err != nil {
		t.Fatal(err)
	}
	// An intercepted tunnel, idle after one request.
	tc, br := interceptedConn(t, h, fmt.Sprintf("api.test:%d", port(t, api.URL)), proxyCA.Pool())
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: api.test:%d\r\nAuthorization: %s\r\n\r\n", port(t, api.URL), ph)
	if resp, _ := readResp(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("intercepted request: %d", resp.StatusCode)
	}
	var tunnels []net.Conn
	for range 3 {
		c := connectTunnel(t, h, fmt.Sprintf("hold.test:%d", port(t, addr)))
		io.WriteString(c, "some bytes")
		tunnels = append(tunnels, c)
	}
	idle, _ := h.raw("")                                                        // no request yet
	half, _ := h.raw("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test") // half a header
	client, tr := h.client(nil)
	resp, err := client.Get(hostURL(t, srv.URL, "allowed.test", "/")) // a keep-alive connection
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	h.waitEvent(func(e Event) bool { return e.Kind == "http" })

	start := time.Now()
	st := h.box.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if st.Conns != 5 || st.BytesOut < 30 {
		t.Errorf("stats %+v", st)
	}
	if again := h.box.Close(); again != st {
		t.Errorf("second Close: %+v, first %+v", again, st)
	}
	nev := len(h.events())
	for _, c := range append(tunnels, idle, half, tc) {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		// EOF, or a reset when the box had unread bytes: closed either way.
		var ne net.Error
		if _, err := io.ReadAll(c); errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("connection not closed by Close: %v", err)
		}
		c.Close()
	}
	// 1 DNS query, 1 request in the intercepted tunnel, 1 plain request, and
	// at Close the 4 tunnels.
	if nev != 7 || len(h.events()) != nev {
		t.Errorf("%d events at Close (want 7), %d after: %+v", nev, len(h.events()), h.events())
	}
	tr.CloseIdleConnections()

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

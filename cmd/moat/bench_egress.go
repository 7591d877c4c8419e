package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/egress"
)

// The egress part of moat bench measures the egress proxy against a direct
// connection, in the bench's own process and on loopback only: an httptest TLS
// server on 127.0.0.1 is the upstream, and a Proxy attached to a 127.0.0.1 listener
// serves the client as it serves a box (the same policy checks, CONNECT, SNI check
// and splice), minus the box around the client.
//
// Nothing leaves loopback: the upstream is named benchEgressHost (the name in
// httptest's certificate), which the policy's Hosts maps to 127.0.0.1; the proxy's
// resolver knows no name and its dialer refuses every address outside 127.0.0.0/8,
// and the direct client dials the server's address whatever the URL says.
const (
	benchEgressHost        = "example.com"
	benchDownloadMiB       = 100
	benchShortDownloadMiB  = 10
	benchDownloadRuns      = 5 // measured downloads per case, after one unmeasured
	benchShortDownloadRuns = 3
	benchEgressTimeout     = 2 * time.Minute // for one request or download
)

// egressReport is what the proxy costs a client, against a direct connection.
type egressReport struct {
	// Request holds one HTTPS GET over a fresh connection (TCP and TLS handshakes
	// included), direct and through the proxy, with ratios to direct.
	Request []benchRow `json:"request"`
	// DownloadMiB is the size of one download.
	DownloadMiB int `json:"download_mib"`
	// Download holds the throughput of one HTTPS download, direct and through the
	// proxy, with ratios to direct.
	Download []downloadRow `json:"download"`
}

// downloadRow is the throughput of one way to download.
type downloadRow struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Runs int    `json:"runs"`
	// MBps is the download's size in MB (10^6 bytes) over the median time of the
	// measured downloads.
	MBps float64 `json:"mb_per_s"`
	// Ratio is MBps over the direct row's MBps.
	Ratio float64 `json:"ratio"`
	Error string  `json:"error,omitempty"`
}

// egressBench is the upstream, the proxy and the two clients of one run.
type egressBench struct {
	srv     *httptest.Server
	box     *egress.Box
	url     string // https://benchEgressHost:PORT
	size    int64  // of one download
	direct  *http.Transport
	proxied *http.Transport

	mu      sync.Mutex
	refusal string // the proxy's last refusal, to explain a 403
}

// egressCost measures the proxy: n GETs per case after warmups, and downloads of
// sizeMiB. A case that failed, or could not start, is reported in its row; the
// error says that traffic did not all go through the proxy.
func egressCost(ctx context.Context, n, warmups, sizeMiB, downloads int) (egressReport, error) {
	rep := egressReport{DownloadMiB: sizeMiB}
	e, err := startEgressBench(int64(sizeMiB) << 20)
	if err != nil {
		msg := "start: " + err.Error()
		rep.Request = []benchRow{{ID: "direct", Name: "direct", Error: msg}, {ID: "proxy", Name: "through the egress proxy", Error: msg}}
		rep.Download = []downloadRow{{ID: "direct", Name: "direct", Error: msg}, {ID: "proxy", Name: "through the egress proxy", Error: msg}}
		return rep, nil
	}
	defer e.srv.Close()
	rep.Request = measure(ctx, []benchCase{
		{id: "direct", name: "direct (TCP and TLS handshakes, GET)", run: func() error { return e.get(e.direct, "/get", 2) }},
		{id: "proxy", name: "through the egress proxy (CONNECT, policy, SNI check, splice)", run: func() error { return e.get(e.proxied, "/get", 2) }},
	}, n, warmups)
	ratios(rep.Request)
	const downloadWarmups = 1
	rows := measure(ctx, []benchCase{
		{id: "direct", name: "direct", run: func() error { return e.get(e.direct, "/download", e.size) }},
		{id: "proxy", name: "through the egress proxy", run: func() error { return e.get(e.proxied, "/download", e.size) }},
	}, downloads, downloadWarmups)
	rep.Download = downloadRows(rows, e.size)

	// Every proxied request must have gone through the proxy: one upstream
	// connection each, and the downloads' bytes. (An interrupted run is a failure
	// already, with fewer requests than counted here.)
	st := e.box.Close()
	if ctx.Err() != nil {
		return rep, nil
	}
	var wantConns int
	var wantIn int64
	if r := rep.Request[1]; r.Error == "" {
		wantConns += r.Runs + warmups
	}
	if r := rows[1]; r.Error == "" {
		wantConns += r.Runs + downloadWarmups
		wantIn = int64(r.Runs+downloadWarmups) * e.size
	}
	if st.Conns < wantConns || st.BytesIn < wantIn || st.Refused > 0 {
		return rep, fmt.Errorf("the proxy counted %d connections, %d bytes in and %d refusals; want at least %d connections, %d bytes in and no refusal",
			st.Conns, st.BytesIn, st.Refused, wantConns, wantIn)
	}
	return rep, nil
}

// downloadRows turns the downloads' times into throughputs with ratios to the
// first row's.
func downloadRows(rows []benchRow, size int64) []downloadRow {
	out := make([]downloadRow, len(rows))
	for i, r := range rows {
		out[i] = downloadRow{ID: r.ID, Name: r.Name, Runs: r.Runs, Error: r.Error}
		if d := pct(r.times, 50); r.Error == "" && d > 0 {
			out[i].MBps = round(float64(size)/d.Seconds()/1e6, 10)
		}
	}
	if len(out) > 0 && out[0].MBps > 0 {
		for i := range out {
			if out[i].MBps > 0 {
				out[i].Ratio = round(out[i].MBps/out[0].MBps, 1000)
			}
		}
	}
	return out
}

// startEgressBench starts the upstream and attaches a proxy that allows it.
func startEgressBench(size int64) (*egressBench, error) {
	e := &egressBench{size: size}
	chunk := make([]byte, 1<<20)
	mux := http.NewServeMux()
	mux.HandleFunc("/get", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/download", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for left := size; left > 0; left -= int64(len(chunk)) {
			if _, err := w.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
				return
			}
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the upstream: %w", err)
	}
	e.srv = httptest.NewUnstartedServer(mux)
	e.srv.Listener.Close()
	e.srv.Listener = l
	e.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.srv.StartTLS()
	upstream := l.Addr().(*net.TCPAddr).AddrPort()
	e.url = "https://" + net.JoinHostPort(benchEgressHost, strconv.Itoa(int(upstream.Port())))

	rules, err := egress.ParseRules(fmt.Sprintf("%s:%d,%s", benchEgressHost, upstream.Port(), upstream))
	if err != nil {
		e.srv.Close()
		return nil, err
	}
	pol := &egress.Policy{Mode: egress.ModeAllowlist, Allow: rules,
		Hosts: map[string][]netip.Addr{benchEgressHost: {upstream.Addr()}}}
	if err := pol.Validate(); err != nil {
		e.srv.Close()
		return nil, err
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.srv.Close()
		return nil, fmt.Errorf("listen for the proxy: %w", err)
	}
	proxy := egress.New(egress.Options{
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			return nil, &net.DNSError{Err: "moat bench resolves no name", Name: host, IsNotFound: true}
		},
		Dial: loopbackDial,
	})
	e.box = proxy.Attach(pol, pl, nil, e.event)

	roots := x509.NewCertPool()
	roots.AddCert(e.srv.Certificate())
	tlsCfg := &tls.Config{RootCAs: roots}
	var d net.Dialer
	e.direct = &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, upstream.String())
		},
		TLSClientConfig:   tlsCfg,
		DisableKeepAlives: true,
	}
	e.proxied = &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: pl.Addr().String()}),
		TLSClientConfig:   tlsCfg.Clone(),
		DisableKeepAlives: true,
	}
	return e, nil
}

// loopbackDial is the proxy's dialer: it reaches 127.0.0.0/8 and ::1 only.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("moat bench: %s is not a loopback address", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// event keeps the proxy's refusals, which a client sees as a bare 403.
func (e *egressBench) event(ev egress.Event) {
	if !ev.Allowed {
		e.mu.Lock()
		e.refusal = fmt.Sprintf("%s:%d refused: %s", ev.Host, ev.Port, ev.Reason)
		e.mu.Unlock()
	}
}

// get fetches path over a new connection of tr and checks it got want bytes.
func (e *egressBench) get(tr *http.Transport, path string, want int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), benchEgressTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.refusal != "" {
			return fmt.Errorf("%w (the proxy: %s)", err, e.refusal)
		}
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("read %s after %d bytes: %w", path, n, err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	case n != want:
		return fmt.Errorf("GET %s: %d bytes, want %d", path, n, want)
	}
	return nil
}

package egress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// The benchmarks compare a client talking to a loopback HTTPS server directly
// with the same client going through the proxy (CONNECT, SNI check, splice).
// Run them with -benchtime=1x for a quick look:
//
//	go test -run XXX -bench . -benchtime=1x ./internal/egress/

// benchSetup starts an HTTPS server for bench.test with h and returns its URL
// (by name) and a transport factory: direct (dialling the server for the
// name) or through a proxy that allows it.
func benchSetup(b *testing.B, h http.Handler, viaProxy bool) (url string, transport func() *http.Transport) {
	k := newPKI(b)
	srv := k.tlsServer(b, "bench.test", h)
	addr := srv.Listener.Addr().String()
	url = "https://bench.test:" + strconv.Itoa(int(port(b, addr))) + "/"
	tlsCfg := &tls.Config{RootCAs: k.ca.Pool()}
	if !viaProxy {
		var d net.Dialer
		return url, func() *http.Transport {
			return &http.Transport{
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					return d.DialContext(ctx, network, addr)
				},
				TLSClientConfig:   tlsCfg,
				DisableKeepAlives: true,
			}
		}
	}
	hn := newHarness(b, allowPolicy(b, map[string]string{"bench.test": addr}), hopts{})
	return url, func() *http.Transport {
		_, tr := hn.client(k.ca.Pool())
		tr.DisableKeepAlives = true
		return tr
	}
}

// benchGet fetches url over a fresh connection and returns the body size.
func benchGet(b *testing.B, tr *http.Transport, url string) int64 {
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("%d, %v", resp.StatusCode, err)
	}
	tr.CloseIdleConnections()
	return n
}

func benchHTTPSRequest(b *testing.B, viaProxy bool) {
	url, transport := benchSetup(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}), viaProxy)
	tr := transport()
	b.ReportAllocs()
	for b.Loop() {
		benchGet(b, tr, url)
	}
}

// BenchmarkHTTPSRequestDirect: one HTTPS GET on a fresh connection (TCP and
// TLS handshakes included).
func BenchmarkHTTPSRequestDirect(b *testing.B) { benchHTTPSRequest(b, false) }

// BenchmarkHTTPSRequestProxy: the same through the proxy (plus the CONNECT
// exchange, the policy check and the SNI check).
func BenchmarkHTTPSRequestProxy(b *testing.B) { benchHTTPSRequest(b, true) }

const downloadSize = 100 << 20

func benchDownload(b *testing.B, viaProxy bool) {
	chunk := make([]byte, 1<<20)
	url, transport := benchSetup(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(downloadSize))
		for range downloadSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}), viaProxy)
	tr := transport()
	b.SetBytes(downloadSize)
	for b.Loop() {
		if n := benchGet(b, tr, url); n != downloadSize {
			b.Fatalf("got %d bytes", n)
		}
	}
}

// BenchmarkDownloadDirect: a 100 MiB HTTPS download.
func BenchmarkDownloadDirect(b *testing.B) { benchDownload(b, false) }

// BenchmarkDownloadProxy: the same through a CONNECT tunnel of the proxy.
func BenchmarkDownloadProxy(b *testing.B) { benchDownload(b, true) }

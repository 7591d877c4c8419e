//go:build integration

package integration

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// pip in a box, through moat's proxy, against a package index the test serves on
// 127.0.0.1 (named example.com, mapped to 127.0.0.1 by the config's network.hosts,
// as in egress_test.go). pip comes from the host's /usr (Debian's python3-pip,
// which scripts/test installs).

const (
	pipProject = "moatprobe"
	pipVersion = "1.0"
	pipValue   = "moat-pip-probe-ok"
)

// pipIndex is a PEP 503 "simple" index with one pure-Python wheel, and the paths
// asked of it.
type pipIndex struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

// newPipIndex serves the index over HTTPS (httptest's certificate, for example.com)
// when tls, over plain HTTP otherwise.
func newPipIndex(t *testing.T, tls bool) *pipIndex {
	t.Helper()
	whlName, whl := buildWheel(t)
	sum := sha256.Sum256(whl)
	ix := &pipIndex{}
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="%[1]s/">%[1]s</a></body></html>`, pipProject)
	})
	mux.HandleFunc("/simple/"+pipProject+"/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%[1]s#sha256=%[2]s">%[1]s</a></body></html>`,
			whlName, hex.EncodeToString(sum[:]))
	})
	mux.HandleFunc("/files/"+whlName, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ix.mu.Lock()
		ix.paths = append(ix.paths, r.URL.Path)
		ix.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
	if tls {
		ix.Server = httptest.NewTLSServer(h)
	} else {
		ix.Server = httptest.NewServer(h)
	}
	t.Cleanup(ix.Close)
	return ix
}

// requests returns the paths asked of the index so far.
func (ix *pipIndex) requests() []string {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return append([]string(nil), ix.paths...)
}

// indexURL is the index's simple API at example.com, over HTTPS when it serves TLS.
func (ix *pipIndex) indexURL() string {
	scheme := "http"
	if ix.TLS != nil {
		scheme = "https"
	}
	return scheme + "://example.com:" + ix.port() + "/simple/"
}

func (ix *pipIndex) port() string {
	_, p, _ := net.SplitHostPort(ix.Listener.Addr().String())
	return p
}

// buildWheel makes a minimal pure-Python wheel of pipProject: one module, and the
// dist-info's METADATA, WHEEL and RECORD (PEP 427).
func buildWheel(t *testing.T) (name string, data []byte) {
	t.Helper()
	distInfo := pipProject + "-" + pipVersion + ".dist-info"
	files := []struct{ path, body string }{
		{pipProject + ".py", fmt.Sprintf("VALUE = %q\n", pipValue)},
		{distInfo + "/METADATA", "Metadata-Version: 2.1\nName: " + pipProject + "\nVersion: " + pipVersion + "\nSummary: moat's pip probe\n"},
		{distInfo + "/WHEEL", "Wheel-Version: 1.0\nGenerator: moat-integration-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
	w, err := zw.Create(distInfo + "/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return pipProject + "-" + pipVersion + "-py3-none-any.whl", buf.Bytes()
}

// pipConfig writes a config that maps example.com to 127.0.0.1, trusts the
// index's certificate when it has one, and has a profile "pip" extending open with
// no network of its own: each run names its allowlist with --network.
func pipConfig(t *testing.T, ix *pipIndex) string {
	t.Helper()
	dir := t.TempDir()
	cfg := "network:\n  hosts:\n    example.com: [127.0.0.1]\n"
	if cert := ix.Certificate(); cert != nil {
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
		cfg += "  upstream_ca: " + writeFixture(t, dir, "index-ca.pem", ca) + "\n"
	}
	cfg += "profiles:\n  pip:\n    extends: open\n"
	return writeFixture(t, dir, "moat.yaml", []byte(cfg))
}

// pipScript installs pipProject from url into /workspace/lib, then imports it. It
// prints pip's exit status and how long pip took, in milliseconds.
func pipScript(url string, extra ...string) string {
	return fmt.Sprintf(`
start=$(date +%%s%%N)
python3 -m pip install --no-cache-dir --no-deps --no-input --target /workspace/lib --index-url %s %s %s
rc=$?
echo "pip exit=$rc ms=$(( ($(date +%%s%%N) - start) / 1000000 ))"
[ $rc = 0 ] && PYTHONPATH=/workspace/lib python3 -c 'import %s; print("imported", %s.VALUE)'
exit $rc
`, url, strings.Join(extra, " "), pipProject, pipProject, pipProject)
}

// pipRun runs script in a box of profile pip with network, and returns the result
// and how long pip took.
func pipRun(t *testing.T, config, network, script string) (runOut, int) {
	t.Helper()
	o := moatRun(t, script, "--config", config, "--profile", "pip", "--lang", "bash", "--network", network,
		"--env", "PIP_DISABLE_PIP_VERSION_CHECK=1", "--timeout", "60s")
	if o.exit != 0 {
		t.Fatalf("moat run failed:\n%s", o)
	}
	_, after, ok := strings.Cut(o.res.Stdout, "pip exit=")
	if !ok {
		t.Fatalf("pip did not run:\n%s", o)
	}
	_, ms, _ := strings.Cut(strings.Fields(after)[1], "ms=")
	n, err := strconv.Atoi(ms)
	if err != nil {
		t.Fatalf("bad pip timing %q:\n%s", after, o)
	}
	return o, n
}

func requirePip(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-m", "pip", "--version").Run(); err != nil {
		if testutil.InCI() {
			t.Fatalf("pip is not installed for /usr/bin/python3 (apt-get install python3-pip): %v", err)
		}
		t.Skipf("pip is not installed for /usr/bin/python3 (apt-get install python3-pip): %v", err)
	}
}

// TestEgressPipAllowed: pip installs a package from an index the box may reach,
// over plain HTTP (the proxy relays each request) and over HTTPS (a CONNECT tunnel;
// pip verifies the index with the bundle moat gives it in PIP_CERT), and the
// package imports.
func TestEgressPipAllowed(t *testing.T) {
	testutil.RequireRoot(t)
	requirePip(t)
	for _, c := range []struct {
		name  string
		tls   bool
		extra []string
	}{
		// pip ignores a plain-HTTP index that is not localhost unless trusted.
		{"http", false, []string{"--trusted-host", "example.com"}},
		{"https", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := newPipIndex(t, c.tls)
			url := ix.indexURL()
			network := "allow:example.com:" + ix.port() + ",127.0.0.1:" + ix.port()
			o, ms := pipRun(t, pipConfig(t, ix), network, pipScript(url, c.extra...))
			if o.res.Status != box.StatusOK || !strings.Contains(o.res.Stdout, "pip exit=0") ||
				!strings.Contains(o.res.Stdout, "imported "+pipValue) {
				t.Fatalf("pip install through the proxy failed:\n%s", o)
			}
			t.Logf("pip install took %d ms", ms)
			got := strings.Join(ix.requests(), " ")
			for _, want := range []string{"/simple/" + pipProject + "/", "/files/" + pipProject + "-" + pipVersion + "-py3-none-any.whl"} {
				if !strings.Contains(got, want) {
					t.Errorf("the index saw %s, want %s among them", got, want)
				}
			}
			if o.res.Egress == nil || o.res.Egress.Connections < 1 || o.res.Egress.BytesIn == 0 || o.res.Egress.Refused != 0 {
				t.Errorf("result's egress usage: %+v", o.res.Egress)
			}
		})
	}
}

// TestEgressPipRefused: with the index not in the allowlist, pip fails at once
// with the proxy's 403 (no hang, no blackhole), and the index hears nothing. pip
// names the 403 in its debug log (-vv) only: by default it says "No matching
// distribution". Over HTTPS pip retries a refused CONNECT 5 times with its own
// backoff (about 8 s in all, each refusal immediate), so that case runs with
// --retries 0.
func TestEgressPipRefused(t *testing.T) {
	testutil.RequireRoot(t)
	requirePip(t)
	for _, c := range []struct {
		name  string
		tls   bool
		extra []string
		want  string // in pip's debug log
	}{
		{"http", false, []string{"-vv", "--trusted-host", "example.com"}, "403 Client Error"},
		{"https", true, []string{"-vv", "--retries", "0"}, "Tunnel connection failed: 403"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := newPipIndex(t, c.tls)
			url := ix.indexURL()
			// The box has a network, but not to the index.
			o, ms := pipRun(t, pipConfig(t, ix), "allow:pypi.test:443", pipScript(url, c.extra...))
			t.Logf("refused pip took %d ms", ms)
			if o.res.Status != box.StatusError || strings.Contains(o.res.Stdout, "pip exit=0") {
				t.Fatalf("pip must fail when its index is not allowed:\n%s", o)
			}
			if ms > 5000 {
				t.Errorf("pip took %d ms to fail: a refusal must be immediate", ms)
			}
			if out := o.res.Stdout + o.res.Stderr; !strings.Contains(out, c.want) {
				t.Errorf("pip's output lacks %q:\n%s", c.want, o)
			}
			if n := ix.requests(); len(n) != 0 {
				t.Errorf("the index heard %v from a box not allowed to reach it", n)
			}
			if o.res.Egress == nil || o.res.Egress.Refused == 0 || o.res.Egress.Connections != 0 {
				t.Errorf("result's egress usage: %+v", o.res.Egress)
			} else if r := o.res.Egress.Refusals; len(r) == 0 || r[0].Dest != "example.com:"+ix.port() || r[0].Reason == "" {
				t.Errorf("result's refusals: %+v, want example.com:%s with a reason", r, ix.port())
			}
		})
	}
}

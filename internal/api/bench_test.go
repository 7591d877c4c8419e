package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/gate"
)

// benchServer is the API on a fake engine that answers at once: what the handlers
// themselves cost (auth, decoding, the gate, encoding), without a box.
func benchServer() *Server {
	res := box.Result{Status: box.StatusOK, Stdout: "1\n", DurationMS: 1, Isolation: []string{"namespaces", "seccomp", "landlock"}}
	eng := &fakeEngine{res: res, out: []string{"1\n"}}
	g := &fakeGate{tokens: map[string]*gate.Principal{
		tokAlice: {Name: "alice", Profile: "default", Quotas: gate.Quotas{Sessions: 3},
			MaxLimits: box.DefaultLimits.Merge(box.Limits{Memory: 512 << 20, Timeout: time.Minute})},
	}, busy: map[string]bool{}}
	return New(Options{Engine: eng, Gate: g, Heartbeat: time.Hour})
}

func benchServe(b *testing.B, srv *Server, method, target, body string, headers ...string) {
	b.Helper()
	for b.Loop() {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+tokAlice)
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%s %s: %d %s", method, target, w.Code, w.Body)
		}
	}
}

// BenchmarkHandlerExecute is POST /v1/execute answered with one JSON result.
func BenchmarkHandlerExecute(b *testing.B) {
	benchServe(b, benchServer(), "POST", "/v1/execute", `{"language":"python","code":"print(1)"}`)
}

// BenchmarkHandlerExecuteSSE is the same with the output streamed as events.
func BenchmarkHandlerExecuteSSE(b *testing.B) {
	benchServe(b, benchServer(), "POST", "/v1/execute", `{"language":"python","code":"print(1)"}`, "Accept", "text/event-stream")
}

// BenchmarkHandlerSessionExecute is POST /v1/sessions/{id}/execute.
func BenchmarkHandlerSessionExecute(b *testing.B) {
	benchServe(b, benchServer(), "POST", "/v1/sessions/s1/execute", `{"code":"1+1"}`)
}

// BenchmarkLoopbackExecute is POST /v1/execute through net/http on loopback, on a
// kept-alive connection: the handler plus HTTP and TCP on both sides.
func BenchmarkLoopbackExecute(b *testing.B) {
	ts := httptest.NewServer(benchServer())
	defer ts.Close()
	c := ts.Client()
	body := []byte(`{"language":"python","code":"print(1)"}`)
	var out bytes.Buffer
	for b.Loop() {
		req, err := http.NewRequest("POST", ts.URL+"/v1/execute", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out.Reset()
		_, _ = out.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d: %s", resp.StatusCode, out.String())
		}
	}
}

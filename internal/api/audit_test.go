package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/metrics"
)

const tokAdmin = "admin-token-0123456789"

// auditFixture is a fixture whose server has an audit log and metrics, and an
// admin principal.
func auditFixture(t *testing.T, metricsPublic bool) (*fixture, *audit.Log, *metrics.Metrics) {
	t.Helper()
	f := newFixture(t)
	f.gate.tokens[tokAdmin] = &gate.Principal{Name: "root", Profile: "default", MaxLimits: box.DefaultLimits, Admin: true}
	l, err := audit.Open(audit.Options{Path: filepath.Join(t.TempDir(), audit.FileName)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	m := metrics.New()
	f.srv = New(Options{Engine: f.eng, Gate: f.gate, Log: slog.New(slog.NewJSONHandler(f.logs, nil)), Audit: l, Metrics: m, MetricsPublic: metricsPublic})
	return f, l, m
}

func flushLog(t *testing.T, l *audit.Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAuthFailuresAreRecorded(t *testing.T) {
	f, l, _ := auditFixture(t, false)
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"1"}`), "Content-Type", "application/json", "Authorization", "Bearer wrong-token-0123456789")
	if w.Code != 401 {
		t.Fatal(w.Code)
	}
	id401 := w.Header().Get("X-Request-Id")
	w = f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"1","profile":"open"}`), "Content-Type", "application/json")
	if w.Code != 403 {
		t.Fatal(w.Code, w.Body)
	}
	id403 := w.Header().Get("X-Request-Id")
	f.gate.busy["alice"] = true // 429: counted, not recorded
	f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"1"}`), "Content-Type", "application/json")
	flushLog(t, l)
	p, err := l.Store().Query(context.Background(), audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 2 {
		t.Fatalf("%d records: %+v", len(p.Records), p.Records)
	}
	forbidden, unauth := p.Records[0], p.Records[1]
	if unauth.Kind != audit.KindAuthFailure || unauth.Principal != "" || unauth.Status != CodeUnauthenticated ||
		unauth.RequestID != id401 || unauth.Remote == "" || !strings.HasPrefix(unauth.Reason, "POST /v1/execute: ") {
		t.Errorf("401 record: %+v", unauth)
	}
	if strings.Contains(unauth.Reason, "wrong-token") {
		t.Errorf("the token is in the record: %s", unauth.Reason)
	}
	if forbidden.Principal != "alice" || forbidden.Status != CodeForbidden || forbidden.RequestID != id403 || !strings.Contains(forbidden.Reason, `profile "open"`) {
		t.Errorf("403 record: %+v", forbidden)
	}
}

func TestCallerReachesTheEngine(t *testing.T) {
	f, _, _ := auditFixture(t, false)
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"1"}`), "Content-Type", "application/json")
	c := f.eng.lastReq.Caller
	if w.Code != 200 || c.Principal != "alice" || c.FrontEnd != audit.FrontEndAPI || c.RequestID != w.Header().Get("X-Request-Id") || c.Remote == "" {
		t.Fatalf("caller %+v (response %d, X-Request-Id %s)", c, w.Code, w.Header().Get("X-Request-Id"))
	}
	w = f.do(t, "POST", "/v1/sessions", strings.NewReader(`{"language":"python"}`), "Content-Type", "application/json")
	if c := f.eng.lastSR.Caller; w.Code != 201 || c.RequestID != w.Header().Get("X-Request-Id") {
		t.Fatalf("session caller %+v", c)
	}
}

func TestAuditUnavailableIs503(t *testing.T) {
	f, _, _ := auditFixture(t, false)
	f.eng.err = fmt.Errorf("%w: the audit store is failing (disk I/O error); executions are refused until it works again (audit.failure: fail_closed)", audit.ErrUnavailable)
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"1"}`), "Content-Type", "application/json")
	if w.Code != 503 || errorCode(t, w) != CodeUnavailable || !strings.Contains(w.Body.String(), "fail_closed") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	return b.Error.Code
}

func TestListAudit(t *testing.T) {
	f, l, _ := auditFixture(t, false)
	now := time.Now()
	for i := range 30 {
		l.Append(&audit.Record{Time: now.Add(time.Duration(i-30) * time.Minute), Kind: audit.KindExecute,
			Principal: []string{"alice", "bob", "carol"}[i%3], Status: "ok", Session: fmt.Sprint("s", i%2)})
	}
	flushLog(t, l)
	get := func(tok, query string) (int, audit.Page, string) {
		t.Helper()
		w := f.do(t, "GET", "/v1/audit"+query, nil, "Authorization", "Bearer "+tok)
		var p audit.Page
		if w.Code == 200 {
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
		}
		return w.Code, p, w.Body.String()
	}
	cases := []struct {
		name, tok, query string
		code, n          int
		principal        string
	}{
		{"own records", tokAlice, "", 200, 10, "alice"},
		{"own, filtered", tokAlice, "?principal=alice&session=s0&since=15m", 200, 2, "alice"},
		{"another principal's", tokAlice, "?principal=bob", 403, 0, ""},
		{"admin reads all", tokAdmin, "?limit=1000&kind=execute", 200, 30, ""},
		{"admin reads bob's", tokAdmin, "?principal=bob", 200, 10, "bob"},
		{"bad since", tokAlice, "?since=yesterday", 400, 0, ""},
		{"bad limit", tokAlice, "?limit=0", 400, 0, ""},
		{"unknown parameter", tokAlice, "?who=bob", 400, 0, ""},
		{"unknown kind", tokAlice, "?kind=coffee", 400, 0, ""},
		{"no token", "nope-nope-nope-nope", "", 401, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, p, body := get(c.tok, c.query)
			if code != c.code || len(p.Records) != c.n {
				t.Fatalf("%d with %d records, want %d with %d: %s", code, len(p.Records), c.code, c.n, body)
			}
			for _, r := range p.Records {
				if c.principal != "" && r.Principal != c.principal || len(r.Hash) != 64 {
					t.Fatalf("record %+v", r)
				}
			}
		})
	}
	// Pages: admin, 30 records by 12.
	var seen int
	before := ""
	for range 3 {
		code, p, body := get(tokAdmin, "?kind=execute&limit=12"+before)
		if code != 200 {
			t.Fatal(body)
		}
		seen += len(p.Records)
		if p.Next == 0 {
			break
		}
		before = fmt.Sprint("&before=", p.Next)
	}
	if seen != 30 {
		t.Fatalf("paged through %d records", seen)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	f, _, m := auditFixture(t, false)
	m.Executed(metrics.Execution{Kind: "execute", FrontEnd: "api", Status: "ok", Language: "python", Backend: "native", Profile: "default"})
	if w := f.do(t, "GET", "/metrics", nil, "Authorization", ""); w.Code != 401 {
		t.Fatalf("/metrics without a token: %d", w.Code)
	}
	w := f.do(t, "GET", "/metrics", nil, "Authorization", "Bearer "+tokBob)
	body := w.Body.String()
	for _, want := range []string{
		`moat_executions_total{backend="native",front_end="api",kind="execute",language="python",profile="default",status="ok"} 1`,
		`moat_gate_refusals_total{code="unauthenticated"} 1`,
		`moat_stage_duration_seconds_count{stage="gate"} 2`,
	} {
		if w.Code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s (%d)", want, w.Code)
		}
	}
	if strings.Contains(body, "alice") || strings.Contains(body, "bob") {
		t.Error("metrics name a principal")
	}
	pub, _, _ := auditFixture(t, true)
	if w := pub.do(t, "GET", "/metrics", nil, "Authorization", ""); w.Code != 200 || !bytes.Contains(w.Body.Bytes(), []byte("moat_")) {
		t.Fatalf("public /metrics: %d", w.Code)
	}
	plain := newFixture(t)
	if w := plain.do(t, "GET", "/metrics", nil); w.Code != 404 {
		t.Fatalf("/metrics without metrics: %d", w.Code)
	}
	if w := plain.do(t, "GET", "/v1/audit", nil); w.Code != 404 {
		t.Fatalf("/v1/audit without audit: %d", w.Code)
	}
}

//go:build integration

package integration

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// This file checks the audit trail and the metrics end to end: every kind of event
// makes exactly one record, through the CLI, the HTTP API and MCP; tampering is
// caught by moat audit verify; a failing store refuses executions (fail_closed) or
// is survived and counted (fail_open); the metrics match a known sequence; and
// 10,000 records are queried fast and cost an execution next to nothing.

const (
	keyAdmin = "admin-key-0123456789abcdef"
	keyLoad  = "load-key-0123456789abcdef"
)

// auditConfig: alice and bob as in serverConfig, an admin, and a principal for
// the load test with quotas that never refuse. %s is the audit section.
const auditConfig = `server:
  api_keys:
    - principal: alice
      key_env: MOAT_TEST_KEY_ALICE
      profiles: [strict, open]
    - principal: bob
      key_env: MOAT_TEST_KEY_BOB
    - principal: root
      key_env: MOAT_TEST_KEY_ADMIN
      admin: true
    - principal: load
      key_env: MOAT_TEST_KEY_LOAD
      quotas: {concurrent: 64, rate: 1000000/s}
  pool: {size: 0}
audit:
%s`

func startAuditServer(t *testing.T, auditYAML string) *server {
	t.Helper()
	if auditYAML == "" {
		auditYAML = "  code_max: 4KiB\n"
	}
	t.Setenv("MOAT_TEST_KEY_ADMIN", keyAdmin)
	t.Setenv("MOAT_TEST_KEY_LOAD", keyLoad)
	return startServer(t, serverOpts{config: fmt.Sprintf(auditConfig, auditYAML)})
}

// apiDo sends a JSON request and returns the status, the X-Request-Id and the body.
func apiDo(t *testing.T, s *server, method, path, key, body string) (int, string, []byte) {
	t.Helper()
	var h []string
	if body != "" {
		h = []string{"Content-Type", "application/json"}
	}
	code, hdr, b := s.raw(t, method, path, key, strings.NewReader(body), h...)
	return code, hdr.Get("X-Request-Id"), b
}

// auditPage is GET /v1/audit with query as key.
func auditPage(t *testing.T, s *server, key, query string) (int, audit.Page) {
	t.Helper()
	code, _, b := apiDo(t, s, "GET", "/v1/audit?"+query, key, "")
	var p audit.Page
	if code == 200 {
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("GET /v1/audit: %v: %s", err, b)
		}
	}
	return code, p
}

// waitRecords polls GET /v1/audit (as the admin) until n records match query.
func waitRecords(t *testing.T, s *server, query string, n int) []audit.Record {
	t.Helper()
	var p audit.Page
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, p = auditPage(t, s, keyAdmin, query+"&limit=1000")
		if len(p.Records) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(p.Records) != n {
		t.Fatalf("%d records match %q, want %d: %+v", len(p.Records), query, n, p.Records)
	}
	return p.Records
}

func byRequest(recs []audit.Record, id string) []audit.Record {
	var out []audit.Record
	for _, r := range recs {
		if r.RequestID == id {
			out = append(out, r)
		}
	}
	return out
}

// metricsOf scrapes /metrics and returns the samples by series, e.g.
// `moat_sessions_created_total` or `moat_gate_refusals_total{code="unauthenticated"}`.
func metricsOf(t *testing.T, s *server) map[string]float64 {
	t.Helper()
	code, _, b := apiDo(t, s, "GET", "/metrics", keyBob, "")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func TestAuditEveryEventOnceThroughEveryFrontEnd(t *testing.T) {
	testutil.RequireRoot(t)
	s := startAuditServer(t, "")
	secret := "sk-ant-api03-" + strings.Repeat("Q", 93) + "AA"

	type want struct {
		kind, principal, frontEnd, status string
		check                             func(r audit.Record) bool
	}
	events := map[string]want{} // request id -> the one record it must make

	// HTTP API: an execution with a secret in its code, a blocked one, a refused
	// one, a session's life, and auth failures.
	code, id, b := apiDo(t, s, "POST", "/v1/execute", keyAlice, `{"language":"python","code":"key = '`+secret+`'\nprint(len(key))\n"}`)
	if code != 200 {
		t.Fatalf("execute: %d %s", code, b)
	}
	events[id] = want{audit.KindExecute, "alice", "api", "ok", func(r audit.Record) bool {
		return !strings.Contains(r.Code, secret) && strings.Contains(r.Code, "[REDACTED:anthropic_key]") && r.CodeRedactions == 1 &&
			r.CodeSHA256 != "" && r.ExitCode != nil && *r.ExitCode == 0 && r.OutputBytes == 4 && r.Language == "python" &&
			r.Profile == "default" && r.Backend == "native" && slices.Contains(r.Isolation, "seccomp") && r.DurationMS > 0 && r.Remote != ""
	}}
	code, id, _ = apiDo(t, s, "POST", "/v1/execute", keyBob, `{"language":"bash","code":"curl http://example.com\n"}`)
	events[id] = want{audit.KindExecute, "bob", "api", "blocked", func(r audit.Record) bool {
		return len(r.Violations) == 1 && r.Violations[0].Rule == "shell.command" && r.Language == "bash"
	}}
	code, id, b = apiDo(t, s, "POST", "/v1/sessions", keyAlice, `{"language":"python"}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	var sess struct{ ID string }
	_ = json.Unmarshal(b, &sess)
	events[id] = want{audit.KindSessionCreate, "alice", "api", "ok", func(r audit.Record) bool { return r.Session == sess.ID && len(r.Isolation) > 0 }}
	_, id, _ = apiDo(t, s, "POST", "/v1/sessions/"+sess.ID+"/execute", keyAlice, `{"code":"x = 41\nx + 1"}`)
	events[id] = want{audit.KindSessionExecute, "alice", "api", "ok", func(r audit.Record) bool { return r.Session == sess.ID && r.CodeBytes == 12 }}
	_, id, _ = apiDo(t, s, "POST", "/v1/sessions/"+sess.ID+"/execute", keyBob, `{"code":"x"}`)
	events[id] = want{audit.KindSessionExecute, "bob", "api", "rejected", func(r audit.Record) bool { return strings.Contains(r.Reason, "not found") }}
	code, id, _ = apiDo(t, s, "DELETE", "/v1/sessions/"+sess.ID, keyAlice, "")
	if code != 204 {
		t.Fatalf("delete: %d", code)
	}
	events[id] = want{audit.KindSessionDestroy, "alice", "api", "ok", func(r audit.Record) bool { return r.Session == sess.ID && r.Language == "python" }}
	_, id, _ = apiDo(t, s, "POST", "/v1/execute", "wrong-key-0123456789abcdef", `{"language":"python","code":"1"}`)
	events[id] = want{audit.KindAuthFailure, "", "api", "unauthenticated", func(r audit.Record) bool {
		return !strings.Contains(r.Reason, "wrong-key") && strings.HasPrefix(r.Reason, "POST /v1/execute")
	}}
	_, id, _ = apiDo(t, s, "POST", "/v1/execute", keyBob, `{"language":"python","code":"1","profile":"open"}`)
	events[id] = want{audit.KindAuthFailure, "bob", "api", "forbidden", nil}

	// An idle session expires (idle_ttl 1s; the sweeper runs every 5 s).
	code, _, b = apiDo(t, s, "POST", "/v1/sessions", keyBob, `{"language":"bash","idle_ttl":"1s"}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	var idle struct{ ID string }
	_ = json.Unmarshal(b, &idle)

	// MCP over HTTP, on the same server.
	cs := mcpHTTP(t, s, keyAlice)
	if res := mcpCall(t, cs, "execute_python", map[string]any{"code": "print('from mcp')"}); res.IsError {
		t.Fatalf("mcp: %s", mcpText(res))
	}
	cs.Close()
	// The MCP endpoint's refusals are auth failures too.
	if code, _, _ := apiDo(t, s, "POST", "/mcp", "wrong-key-0123456789abcdef", `{}`); code != 401 {
		t.Fatalf("/mcp with a wrong key: %d", code)
	}

	// The CLI, on the same store, from another process.
	dir := t.TempDir()
	cliCfg := writeFixture(t, dir, "cli.yaml", []byte("audit:\n  dir: "+s.dataDir+"\n"))
	if o := moatExec(t, "print('from the cli')\n", "run", "--config", cliCfg, "--lang", "python"); o.exit != 0 {
		t.Fatalf("moat run: %s", o)
	}

	// Each request made exactly one record, with the request id of its response.
	all := waitRecords(t, s, "since=1h&kind=session_expire", 1) // after the expiry
	if all[0].Session != idle.ID || all[0].Principal != "bob" || !strings.Contains(all[0].Reason, "idle") {
		t.Errorf("expiry record: %+v", all[0])
	}
	_, p := auditPage(t, s, keyAdmin, "limit=1000")
	all = p.Records
	for id, w := range events {
		got := byRequest(all, id)
		if len(got) != 1 {
			t.Errorf("request %s (%s): %d records, want 1", id, w.kind, len(got))
			continue
		}
		r := got[0]
		if r.Kind != w.kind || r.Principal != w.principal || r.FrontEnd != w.frontEnd || r.Status != w.status || (w.check != nil && !w.check(r)) {
			t.Errorf("request %s: record %+v, want %+v", id, r, w)
		}
	}
	count := func(kind, principal, frontEnd string) int {
		n := 0
		for _, r := range all {
			if r.Kind == kind && r.Principal == principal && r.FrontEnd == frontEnd {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		kind, principal, frontEnd string
		n                         int
	}{
		{audit.KindExecute, "alice", "mcp", 1},
		{audit.KindExecute, "local:root", "cli", 1},
		{audit.KindExecute, "alice", "api", 1},
		{audit.KindSessionCreate, "bob", "api", 1},
		{audit.KindSessionExpire, "bob", "server", 1},
		{audit.KindAuthFailure, "", "mcp", 1},
	} {
		if got := count(c.kind, c.principal, c.frontEnd); got != c.n {
			t.Errorf("%s by %s through %s: %d records, want %d", c.kind, c.principal, c.frontEnd, got, c.n)
		}
	}

	// A principal reads its own records; only an admin reads another's.
	_, p = auditPage(t, s, keyBob, "limit=1000")
	for _, r := range p.Records {
		if r.Principal != "bob" {
			t.Errorf("bob read a record of %q", r.Principal)
		}
	}
	if code, _ := auditPage(t, s, keyBob, "principal=alice"); code != 403 {
		t.Errorf("bob asked for alice's records: %d, want 403", code)
	}
	if _, p := auditPage(t, s, keyAlice, "violations=true"); len(p.Records) != 0 {
		t.Errorf("alice has no violations, got %d records", len(p.Records))
	}
	if _, p := auditPage(t, s, keyBob, "violations=true"); len(p.Records) != 1 {
		t.Errorf("bob's violations: %d records, want 1", len(p.Records))
	}

	// moat audit reads the same, and the chain verifies.
	o := moatExec(t, "", "audit", "--data-dir", s.dataDir, "--principal", "bob", "--status", "blocked")
	if o.exit != 0 || !strings.Contains(o.stdout, "violations: shell.command") || strings.Count(o.stdout, "\n") != 2 {
		t.Errorf("moat audit:\n%s%s", o.stdout, o.stderr)
	}
	o = moatExec(t, "", "audit", "verify", "--data-dir", s.dataDir)
	if o.exit != 0 || !strings.Contains(o.stdout, "ok: ") {
		t.Errorf("moat audit verify: %d\n%s%s", o.exit, o.stdout, o.stderr)
	}
	// No log line holds code or a secret.
	if log := s.stderr.String(); strings.Contains(log, secret) || strings.Contains(log, "print(") {
		t.Errorf("the server's log holds code or a secret")
	}
}

// openDB opens the store for a test that edits it by hand, as an intruder would.
func openDB(t *testing.T, dataDir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: filepath.Join(dataDir, audit.FileName)}).EscapedPath()+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestAuditVerifyCatchesTampering(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	cfg := writeFixture(t, dir, "moat.yaml", []byte("audit:\n  dir: "+dir+"\n"))
	for i := range 6 {
		if o := moatExec(t, fmt.Sprintf("echo %d\n", i), "run", "--config", cfg, "--lang", "bash"); o.exit != 0 {
			t.Fatalf("moat run: %s", o)
		}
	}
	verify := func() runOut { return moatExec(t, "", "audit", "verify", "--config", cfg) }
	if o := verify(); o.exit != 0 || !strings.Contains(o.stdout, "ok: 6 records") {
		t.Fatalf("intact chain: %d %s%s", o.exit, o.stdout, o.stderr)
	}
	db := openDB(t, dir)
	// edit changes the store as someone with the file would: without the triggers
	// that stop accidental edits.
	edit := func(q string) {
		t.Helper()
		for _, q := range []string{"DROP TRIGGER IF EXISTS records_append_only", "DROP TRIGGER IF EXISTS records_prune_only", q} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	// A hand-edited row: another status.
	edit(`UPDATE records SET body = replace(body, '"status":"ok"', '"status":"error"') WHERE seq = 3`)
	if o := verify(); o.exit != 1 || !strings.Contains(o.stdout, "BROKEN at record 3: record 3 was edited") {
		t.Fatalf("edited row: %d %s%s", o.exit, o.stdout, o.stderr)
	}
	edit(`UPDATE records SET body = replace(body, '"status":"error"', '"status":"ok"') WHERE seq = 3`)
	if o := verify(); o.exit != 0 {
		t.Fatalf("restored row: %d %s", o.exit, o.stdout)
	}
	// A deleted row.
	edit(`DELETE FROM records WHERE seq = 4`)
	if o := verify(); o.exit != 1 || !strings.Contains(o.stdout, "BROKEN at record 5: records 4 to 4 are missing") {
		t.Fatalf("deleted row: %d %s%s", o.exit, o.stdout, o.stderr)
	}
}

// holdLock takes SQLite's write lock on the store and keeps it until release is
// called: the server's writes then fail with "database is locked".
func holdLock(t *testing.T, dataDir string) (release func()) {
	t.Helper()
	db := openDB(t, dataDir)
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func waitMetric(t *testing.T, s *server, series string, want func(float64) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if want(metricsOf(t, s)[series]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, not as expected after 30s", series, metricsOf(t, s)[series])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

const bashOK = `{"language":"bash","code":"echo ok\n"}`

func TestAuditStoreFailureFailClosed(t *testing.T) {
	testutil.RequireRoot(t)
	s := startAuditServer(t, "")
	if code, _, b := apiDo(t, s, "POST", "/v1/execute", keyAlice, bashOK); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	release := holdLock(t, s.dataDir)
	// This execution runs (its record waits in the buffer)...
	if code, _, b := apiDo(t, s, "POST", "/v1/execute", keyAlice, bashOK); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	waitMetric(t, s, "moat_audit_store_failing", func(v float64) bool { return v == 1 })
	// ...and once the store is seen failing, new ones are refused, and say why.
	code, _, b := apiDo(t, s, "POST", "/v1/execute", keyAlice, bashOK)
	if code != 503 || errorCode(b) != "unavailable" || !strings.Contains(string(b), "audit store is failing") || !strings.Contains(string(b), "fail_closed") {
		t.Fatalf("execution on a failing store: %d %s", code, b)
	}
	if code, _, b := apiDo(t, s, "POST", "/v1/sessions", keyAlice, `{"language":"python"}`); code != 503 {
		t.Fatalf("session on a failing store: %d %s", code, b)
	}
	release()
	waitMetric(t, s, "moat_audit_store_failing", func(v float64) bool { return v == 0 })
	if code, _, b := apiDo(t, s, "POST", "/v1/execute", keyAlice, bashOK); code != 200 {
		t.Fatalf("after recovery: %d %s", code, b)
	}
	// Nothing was lost: the three executions that ran are all recorded.
	waitRecords(t, s, "kind=execute&status=ok", 3)
	if m := metricsOf(t, s); m["moat_audit_records_lost_total"] != 0 {
		t.Errorf("lost %v records", m["moat_audit_records_lost_total"])
	}
}

func TestAuditStoreFailureFailOpen(t *testing.T) {
	testutil.RequireRoot(t)
	s := startAuditServer(t, "  failure: fail_open\n  buffer: 2\n")
	release := holdLock(t, s.dataDir)
	for i := range 5 {
		if code, _, b := apiDo(t, s, "POST", "/v1/execute", keyAlice, bashOK); code != 200 {
			t.Fatalf("execution %d on a failing store, fail_open: %d %s", i, code, b)
		}
	}
	waitMetric(t, s, "moat_audit_store_failing", func(v float64) bool { return v == 1 })
	m := metricsOf(t, s)
	if m["moat_audit_records_lost_total"] != 3 {
		t.Errorf("lost %v records, want 3 (5 executions, a buffer of 2)", m["moat_audit_records_lost_total"])
	}
	if log := s.stderr.String(); strings.Count(log, "audit record lost") != 3 {
		t.Errorf("losses not logged:\n%s", log)
	}
	release()
	waitMetric(t, s, "moat_audit_store_failing", func(v float64) bool { return v == 0 })
	waitRecords(t, s, "kind=execute", 2)
}

func TestAuditMetricsAfterAKnownSequence(t *testing.T) {
	testutil.RequireRoot(t)
	s := startAuditServer(t, "")
	before := metricsOf(t, s)
	for range 3 {
		apiDo(t, s, "POST", "/v1/execute", keyAlice, `{"language":"python","code":"print(1)"}`)
	}
	for range 2 {
		apiDo(t, s, "POST", "/v1/execute", keyAlice, `{"language":"bash","code":"nc -l 80\n"}`)
	}
	apiDo(t, s, "POST", "/v1/execute", keyAlice, `{"language":"bash","code":"echo AKIA`+`ABCDEFGHIJKLMNOP\n","profile":"open"}`)
	apiDo(t, s, "POST", "/v1/execute", "nope-nope-nope-nope-nope", bashOK)
	_, _, b := apiDo(t, s, "POST", "/v1/sessions", keyAlice, `{"language":"bash"}`)
	var sess struct{ ID string }
	_ = json.Unmarshal(b, &sess)
	apiDo(t, s, "POST", "/v1/sessions/"+sess.ID+"/execute", keyAlice, `{"code":"exit 3"}`)
	apiDo(t, s, "DELETE", "/v1/sessions/"+sess.ID, keyAlice, "")
	waitRecords(t, s, "since=1h", 10)
	after := metricsOf(t, s)
	series := func(kind, lang, profile, status string) string {
		return fmt.Sprintf(`moat_executions_total{backend="native",front_end="api",kind="%s",language="%s",profile="%s",status="%s"}`, kind, lang, profile, status)
	}
	for name, want := range map[string]float64{
		series("execute", "python", "default", "ok"):              3,
		series("execute", "bash", "default", "blocked"):           2,
		series("execute", "bash", "open", "ok"):                   1,
		series("session_execute", "bash", "default", "error"):     1,
		`moat_policy_violations_total{rule="shell.command"}`:      2,
		`moat_redactions_total{rule="aws_access_key"}`:            1,
		`moat_audit_code_redactions_total`:                        1,
		`moat_gate_refusals_total{code="unauthenticated"}`:        1,
		`moat_sessions_created_total`:                             1,
		`moat_sessions_ended_total{reason="destroyed"}`:           1,
		`moat_stage_duration_seconds_count{stage="box"}`:          4,
		`moat_stage_duration_seconds_count{stage="box_start"}`:    5, // 4 one-shot boxes and a session's
		`moat_stage_duration_seconds_count{stage="run"}`:          5,
		`moat_stage_duration_seconds_count{stage="box_teardown"}`: 4,
		`moat_stage_duration_seconds_count{stage="policy"}`:       7,
		`moat_audit_records_written_total`:                        10,
	} {
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s rose by %v, want %v", name, got, want)
		}
	}
	if after["moat_sessions_active"] != 0 || after["moat_boxes_alive"] != 0 {
		t.Errorf("sessions active %v, boxes alive %v; want 0", after["moat_sessions_active"], after["moat_boxes_alive"])
	}
}

// TestAuditLoad records 10,000 executions (blocked by policy, so they are fast and
// still pass the whole pipeline), queries them by principal and time, and compares
// the executions' latency with a server that has no audit trail.
func TestAuditLoad(t *testing.T) {
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("load test")
	}
	on := startAuditServer(t, "")
	off := startAuditServer(t, "  disable: true\n")
	const n, clients = 10000, 4
	blocked := `{"language":"bash","code":"curl http://example.com/%d\n"}`
	// Interleaved rounds on both servers, so drift on this VM hits both alike.
	lat := map[*server][]time.Duration{}
	var mu sync.Mutex
	start := time.Now()
	for round := range 5 {
		for _, s := range []*server{on, off} {
			per := n / 5
			if s == off {
				per = n / 25
			}
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					var mine []time.Duration
					for i := c; i < per; i += clients {
						t0 := time.Now()
						code, _, b := apiDo(t, s, "POST", "/v1/execute", keyLoad, fmt.Sprintf(blocked, round*per+i))
						mine = append(mine, time.Since(t0))
						if code != 200 {
							t.Errorf("execution: %d %s", code, b)
							return
						}
					}
					mu.Lock()
					lat[s] = append(lat[s], mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
		}
	}
	wall := time.Since(start)
	p50 := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	pOn, pOff := p50(lat[on]), p50(lat[off])
	t.Logf("%d executions recorded in %v; p50 %v with the audit trail, %v without (%d runs): audit adds %v",
		len(lat[on]), wall.Round(time.Millisecond), pOn, pOff, len(lat[off]), pOn-pOff)
	if pOn-pOff > 500*time.Microsecond {
		t.Errorf("the audit trail adds %v to an execution's p50, over 0.5 ms", pOn-pOff)
	}
	waitRecords(t, on, "principal=load&kind=execute&limit=1", 1)
	for deadline := time.Now().Add(30 * time.Second); metricsOf(t, on)["moat_audit_queue_length"] > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	// Queries by principal and time, over HTTP and with moat audit.
	for _, q := range []string{
		"principal=load&since=1h&limit=100",
		"principal=load&since=" + url.QueryEscape(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)) + "&limit=100",
		"principal=load&until=" + url.QueryEscape(start.Add(wall/2).UTC().Format(time.RFC3339Nano)) + "&limit=100",
		"principal=alice&since=1h",
	} {
		best := time.Hour
		for range 5 {
			t0 := time.Now()
			code, _ := auditPage(t, on, keyAdmin, q)
			best = min(best, time.Since(t0))
			if code != 200 {
				t.Fatalf("query %s: %d", q, code)
			}
		}
		t.Logf("GET /v1/audit?%s: %v", q, best)
		if best > 50*time.Millisecond {
			t.Errorf("query %s took %v, over 50 ms", q, best)
		}
	}
	o := moatExec(t, "", "audit", "--data-dir", on.dataDir, "--principal", "load", "--since", "1h", "--limit", "20")
	if o.exit != 0 || strings.Count(o.stdout, "\n") != 21 {
		t.Errorf("moat audit: %s", o)
	}
	t.Logf("moat audit --principal load --since 1h --limit 20 (a process): %v", o.wall)
	t0 := time.Now()
	o = moatExec(t, "", "audit", "verify", "--data-dir", on.dataDir)
	if o.exit != 0 || !strings.Contains(o.stdout, fmt.Sprintf("ok: %d records", n)) {
		t.Errorf("verify: %s", o)
	}
	t.Logf("moat audit verify over %d records: %v", n, time.Since(t0))
	if _, err := os.Stat(filepath.Join(off.dataDir, audit.FileName)); err == nil {
		t.Error("a server with audit.disable made an audit store")
	}
}

package engine

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/metrics"
	"github.com/moat-sandbox/moat/internal/session"
)

// sessionRecorder is a recorder that also keeps sessions: each session box
// answers every call with the recorder's result.
type sessionRecorder struct {
	recorder
}

func (r *sessionRecorder) StartSession(_ context.Context, _ *box.SessionSpec) (box.Session, error) {
	return &fakeSession{res: r.res, done: make(chan struct{})}, nil
}

type fakeSession struct {
	res  box.Result
	once sync.Once
	done chan struct{}
}

func (s *fakeSession) Exec(_ context.Context, c *box.Call) (*box.Result, error) {
	select {
	case <-s.done:
		return nil, box.ErrSessionLost
	default:
	}
	res := s.res
	return &res, nil
}
func (s *fakeSession) PutFile(context.Context, string, io.Reader, int64) error { return nil }
func (s *fakeSession) GetFile(context.Context, string, io.Writer, int64) (int64, error) {
	return 0, nil
}
func (s *fakeSession) ListFiles(context.Context, string) ([]box.FileInfo, error) { return nil, nil }
func (s *fakeSession) RemoveFile(context.Context, string) error                  { return nil }
func (s *fakeSession) Done() <-chan struct{}                                     { return s.done }
func (s *fakeSession) Err() error                                                { return nil }
func (s *fakeSession) Isolation() []string                                       { return []string{"fake_isolation"} }
func (s *fakeSession) Warnings() []string                                        { return nil }
func (s *fakeSession) Close() error                                              { s.once.Do(func() { close(s.done) }); return nil }

// audited is an engine with an audit log and metrics on a fake backend.
type audited struct {
	e   *Engine
	log *audit.Log
	m   *metrics.Metrics
	rec *sessionRecorder
}

func newAudited(t *testing.T, opts audit.Options) *audited {
	t.Helper()
	rec := &sessionRecorder{recorder{res: box.Result{Status: box.StatusOK, Isolation: []string{"seccomp"}, Usage: box.Usage{CPUMS: 7, PeakMemoryBytes: 1 << 20}}, output: "hello\n"}}
	e := newTestEngine(t, "", &rec.recorder, "MOAT_DB_PASSWORD=hunter2hunter2")
	e.backend = rec
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), audit.FileName)
	}
	opts.Redact = e.Redact
	l, err := audit.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	m := metrics.New()
	e.EnableAudit(AuditOptions{Log: l, Metrics: m})
	if err := e.EnableSessions(SessionOptions{Store: session.Options{SweepEvery: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return &audited{e: e, log: l, m: m, rec: rec}
}

// records flushes the log and returns every record, oldest first.
func (a *audited) records(t *testing.T) []audit.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.log.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := a.log.Store().Query(ctx, audit.Filter{Limit: audit.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	out := p.Records
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

var alice = Caller{Principal: "alice", FrontEnd: audit.FrontEndAPI, RequestID: "req1", Remote: "127.0.0.1:5000"}

func TestAuditExecuteRecord(t *testing.T) {
	a := newAudited(t, audit.Options{})
	code := "import os\nkey = 'AKIA" + "ABCDEFGHIJKLMNOP'\nprint('hunter2hunter2')\n"
	res, err := a.e.Execute(context.Background(), &Request{Language: "python", Code: []byte(code), Caller: alice})
	if err != nil || res.Status != box.StatusOK {
		t.Fatal(res, err)
	}
	recs := a.records(t)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1: %+v", len(recs), recs)
	}
	r := recs[0]
	checks := []struct {
		name string
		ok   bool
	}{
		{"kind", r.Kind == audit.KindExecute},
		{"who", r.Principal == "alice" && r.FrontEnd == "api" && r.RequestID == "req1" && r.Remote == "127.0.0.1:5000"},
		{"what", r.Language == "python" && r.Profile == "default" && r.Backend == "recorder"},
		{"code hash", r.CodeSHA256 == audit.HashBody([]byte(code)) && r.CodeBytes == len(code)},
		{"code redacted", !strings.Contains(r.Code, "AKIA") && !strings.Contains(r.Code, "hunter2") && strings.Contains(r.Code, "[REDACTED:aws_access_key]") && r.CodeRedactions == 2},
		{"outcome", r.Status == "ok" && r.ExitCode != nil && *r.ExitCode == 0 && r.OutputBytes == int64(len("hello\n"))},
		{"usage", r.CPUMS == 7 && r.PeakMemoryBytes == 1<<20 && strings.Join(r.Isolation, ",") == "seccomp"},
		{"chain", r.Seq == 1 && r.PrevHash == audit.GenesisHash && len(r.Hash) == 64},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s wrong: %+v", c.name, r)
		}
	}
}

func TestAuditEveryOutcomeOnce(t *testing.T) {
	a := newAudited(t, audit.Options{})
	ctx := context.Background()
	// blocked by policy, before any box
	res, _ := a.e.Execute(ctx, &Request{Language: "bash", Code: []byte("curl http://x | sh\n"), Caller: alice})
	if res.Status != box.StatusBlocked {
		t.Fatal(res.Status)
	}
	// refused: unknown language, unknown profile
	if _, err := a.e.Execute(ctx, &Request{Language: "cobol", Code: []byte("x"), Caller: alice}); !errors.Is(err, ErrBadRequest) {
		t.Fatal(err)
	}
	if _, err := a.e.Execute(ctx, &Request{Language: "python", Code: []byte("x"), Profile: "nope", Caller: alice}); !errors.Is(err, ErrBadRequest) {
		t.Fatal(err)
	}
	// a session: create, a call, a call to another's session, delete
	info, err := a.e.CreateSession(ctx, &SessionRequest{Owner: "alice", Language: "python", Caller: alice})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.SessionExecute(ctx, "alice", info.ID, &CallRequest{Code: []byte("1+1"), Caller: alice}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.SessionExecute(ctx, "bob", info.ID, &CallRequest{Code: []byte("1+1")}); !errors.Is(err, session.ErrNotFound) {
		t.Fatal(err)
	}
	del := alice
	del.RequestID = "req-del"
	if err := a.e.DeleteSessionAs(del, "alice", info.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.e.DeleteSessionAs(del, "alice", info.ID); !errors.Is(err, session.ErrNotFound) {
		t.Fatal(err)
	}
	recs := a.records(t)
	want := []struct{ kind, principal, status, session, reason string }{
		{audit.KindExecute, "alice", "blocked", "", ""},
		{audit.KindExecute, "alice", "rejected", "", "unknown language"},
		{audit.KindExecute, "alice", "rejected", "", "nope"},
		{audit.KindSessionCreate, "alice", "ok", info.ID, ""},
		{audit.KindSessionExecute, "alice", "ok", info.ID, ""},
		{audit.KindSessionExecute, "bob", "rejected", info.ID, "session not found"},
		{audit.KindSessionDestroy, "alice", "ok", info.ID, "deleted by its owner"},
		{audit.KindSessionDestroy, "alice", "rejected", info.ID, "session not found"},
	}
	if len(recs) != len(want) {
		for _, r := range recs {
			t.Logf("%s %s %s %s", r.Kind, r.Principal, r.Status, r.Reason)
		}
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, w := range want {
		r := recs[i]
		if r.Kind != w.kind || r.Principal != w.principal || r.Status != w.status || r.Session != w.session || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("record %d = %s %s %s %s %q; want %+v", i, r.Kind, r.Principal, r.Status, r.Session, r.Reason, w)
		}
	}
	if v := recs[0].Violations; len(v) == 0 || v[0].Rule == "" || recs[0].ExitCode == nil {
		t.Errorf("blocked record: %+v", recs[0])
	}
	if r := recs[3]; r.Language != "python" || r.Profile != "default" || strings.Join(r.Isolation, ",") != "fake_isolation" {
		t.Errorf("create record: %+v", r)
	}
	if r := recs[4]; r.Language != "python" || r.Profile != "default" || r.CodeSHA256 == "" {
		t.Errorf("session call record: %+v", r)
	}
	if r := recs[6]; r.RequestID != "req-del" || r.FrontEnd != "api" || r.Language != "python" {
		t.Errorf("destroy record: %+v", r)
	}
	rep, err := a.log.Store().Verify(ctx)
	if err != nil || rep.Break != nil {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestAuditSessionEnds(t *testing.T) {
	a := newAudited(t, audit.Options{})
	ctx := context.Background()
	lost, _ := a.e.CreateSession(ctx, &SessionRequest{Owner: "mcp-1", Language: "python", Caller: Caller{Principal: "carol", FrontEnd: audit.FrontEndMCP}})
	kept, _ := a.e.CreateSession(ctx, &SessionRequest{Owner: "alice", Language: "bash", Caller: alice})
	// The box of the first dies: the store's watcher ends it.
	sess, release, err := a.e.sessions.Acquire("mcp-1", lost.ID)
	if err != nil {
		t.Fatal(err)
	}
	sess.Close()
	release(false)
	deadline := time.Now().Add(5 * time.Second)
	for a.e.sessions.Len() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	a.e.Close() // a shutdown destroys the other
	recs := a.records(t)
	if len(recs) != 4 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	if r := recs[2]; r.Kind != audit.KindSessionLost || r.Session != lost.ID || r.Principal != "carol" || r.Language != "python" || r.FrontEnd != audit.FrontEndServer {
		t.Errorf("lost record: %+v", r)
	}
	if r := recs[3]; r.Kind != audit.KindSessionDestroy || r.Session != kept.ID || r.Reason != "the server shut down" {
		t.Errorf("shutdown record: %+v", r)
	}
}

func TestAuditFailClosedRefusesBeforeAnyBox(t *testing.T) {
	dir := t.TempDir()
	a := newAudited(t, audit.Options{Path: filepath.Join(dir, audit.FileName), Buffer: 1})
	// A reservation held by a running execution fills the one-record buffer.
	p, err := a.log.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Commit(&audit.Record{Kind: audit.KindExecute})
	a.rec.spec = nil
	_, err = a.e.Execute(context.Background(), &Request{Language: "python", Code: []byte("print(1)"), Caller: alice})
	if !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "fail_closed") {
		t.Fatalf("Execute = %v, want audit.ErrUnavailable", err)
	}
	if a.rec.spec != nil {
		t.Fatal("a box was started although the audit trail refused the execution")
	}
	if _, err := a.e.CreateSession(context.Background(), &SessionRequest{Owner: "alice", Language: "python"}); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("CreateSession = %v", err)
	}
}

func TestMetricsAfterAKnownSequence(t *testing.T) {
	a := newAudited(t, audit.Options{})
	ctx := context.Background()
	for range 3 {
		_, _ = a.e.Execute(ctx, &Request{Language: "python", Code: []byte("print(1)"), Caller: alice})
	}
	for range 2 {
		_, _ = a.e.Execute(ctx, &Request{Language: "bash", Code: []byte("curl x\n"), Caller: alice})
	}
	_, _ = a.e.Execute(ctx, &Request{Language: "bash", Code: []byte("echo AKIA" + "ABCDEFGHIJKLMNOP\n"), Profile: "open", Caller: Caller{FrontEnd: audit.FrontEndCLI}})
	info, _ := a.e.CreateSession(ctx, &SessionRequest{Owner: "alice", Language: "python", Caller: alice})
	_, _ = a.e.SessionExecute(ctx, "alice", info.ID, &CallRequest{Code: []byte("x"), Caller: alice})
	_ = a.e.DeleteSessionAs(alice, "alice", info.ID)
	a.records(t)
	w := httptest.NewRecorder()
	a.m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	out := w.Body.String()
	for _, want := range []string{
		`moat_executions_total{backend="recorder",front_end="api",kind="execute",language="python",profile="default",status="ok"} 3`,
		`moat_executions_total{backend="recorder",front_end="api",kind="execute",language="bash",profile="default",status="blocked"} 2`,
		`moat_executions_total{backend="recorder",front_end="cli",kind="execute",language="bash",profile="open",status="ok"} 1`,
		`moat_executions_total{backend="recorder",front_end="api",kind="session_execute",language="python",profile="default",status="ok"} 1`,
		`moat_policy_violations_total{rule="shell.command"} 2`,
		`moat_sessions_created_total 1`,
		`moat_sessions_ended_total{reason="destroyed"} 1`,
		`moat_sessions_active 0`,
		`moat_boxes_alive 0`,
		`moat_stage_duration_seconds_count{stage="policy"} 7`,
		`moat_stage_duration_seconds_count{stage="box"} 4`,
		`moat_stage_duration_seconds_count{stage="box_start"} 5`, // 4 one-shot boxes and a session's
		`moat_stage_duration_seconds_count{stage="run"} 5`,
		`moat_stage_duration_seconds_count{stage="box_teardown"} 4`,
		`moat_audit_records_written_total 9`,
		`moat_audit_records_lost_total 0`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// BenchmarkExecuteAudit compares an execution through the engine (on a backend
// that answers at once) without and with the audit stage: the difference per
// op is what auditing adds to an execution's own path.
func BenchmarkExecuteAudit(b *testing.B) {
	code := []byte(strings.Repeat("print('hello, world')\n", 20))
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			rec := &recorder{res: box.Result{Status: box.StatusOK}, output: "hello\n"}
			e, err := New(defaultConfig(), rec, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			if on {
				l, err := audit.Open(audit.Options{Path: filepath.Join(b.TempDir(), audit.FileName), Redact: e.Redact, Buffer: 1 << 20})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				e.EnableAudit(AuditOptions{Log: l, Metrics: metrics.New()})
			}
			req := &Request{Language: "python", Code: code, Caller: alice}
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.Execute(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func defaultConfig() *config.Config { return config.Default() }

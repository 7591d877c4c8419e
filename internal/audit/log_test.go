package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func openTestLog(t *testing.T, opts Options) *Log {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), FileName)
	}
	l, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func flush(t *testing.T, l *Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// breakable makes a Log's store fail while broken is set.
func breakable(l *Log) *atomic.Bool {
	var broken atomic.Bool
	l.appendFn = func(ctx context.Context, recs []*Record) error {
		if broken.Load() {
			return errors.New("disk I/O error")
		}
		return l.store.Append(ctx, recs)
	}
	return &broken
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReserveCommitWrites(t *testing.T) {
	l := openTestLog(t, Options{})
	for i := range 10 {
		p, err := l.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		p.Commit(&Record{Kind: KindExecute, Principal: "alice", Status: "ok", Reason: fmt.Sprint(i)})
		p.Commit(&Record{Kind: KindExecute, Reason: "a second commit is ignored"})
	}
	flush(t, l)
	if st := l.Stats(); st.Written != 10 || st.Lost != 0 || st.Queued != 0 {
		t.Fatalf("stats %+v", st)
	}
	rep, err := l.Store().Verify(context.Background())
	if err != nil || rep.Break != nil || rep.Records != 10 {
		t.Fatalf("verify %+v %v", rep, err)
	}
}

func TestFailClosedRefusesAndRecovers(t *testing.T) {
	l := openTestLog(t, Options{Buffer: 8})
	broken := breakable(l)
	// An execution that started before the store failed keeps its place.
	running, err := l.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	l.Append(&Record{Kind: KindSessionExpire, Session: "s_1"})
	waitFor(t, "the store to be seen failing", func() bool { return l.Err() != nil })
	_, err = l.Reserve()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "disk I/O error") || !strings.Contains(err.Error(), "fail_closed") {
		t.Fatalf("Reserve on a failing store = %v", err)
	}
	running.Commit(&Record{Kind: KindExecute, Principal: "alice", Status: "ok"})
	if st := l.Stats(); st.Lost != 0 || st.Queued != 2 || !st.Failing {
		t.Fatalf("stats while failing %+v", st)
	}
	broken.Store(false)
	waitFor(t, "the store to recover", func() bool { return l.Err() == nil && l.Stats().Queued == 0 })
	if _, err := l.Reserve(); err != nil {
		t.Fatalf("Reserve after recovery = %v", err)
	}
	if st := l.Stats(); st.Written != 2 || st.Lost != 0 {
		t.Fatalf("stats after recovery %+v", st)
	}
}

func TestFailClosedFullBuffer(t *testing.T) {
	l := openTestLog(t, Options{Buffer: 3})
	broken := breakable(l)
	broken.Store(true)
	var ps []*Pending
	for range 3 {
		p, err := l.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if _, err := l.Reserve(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "buffer is full") {
		t.Fatalf("Reserve with a full buffer = %v", err)
	}
	// An event that cannot be refused is lost, counted and logged: not silently.
	l.Append(&Record{Kind: KindAuthFailure})
	for _, p := range ps {
		p.Commit(&Record{Kind: KindExecute})
	}
	if st := l.Stats(); st.Lost != 1 || st.Queued != 3 {
		t.Fatalf("stats %+v", st)
	}
	broken.Store(false)
	waitFor(t, "the queue to drain", func() bool { return l.Stats().Written == 3 })
}

func TestFailOpenKeepsServingAndCountsLosses(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	l := openTestLog(t, Options{Buffer: 4, FailOpen: true, Log: newTestLogger(&logged, &mu)})
	broken := breakable(l)
	broken.Store(true)
	for i := range 10 {
		p, err := l.Reserve()
		if err != nil {
			t.Fatalf("fail_open Reserve = %v", err)
		}
		p.Commit(&Record{Kind: KindExecute, Principal: "alice", RequestID: fmt.Sprint("r", i)})
	}
	waitFor(t, "the failure", func() bool { return l.Stats().Failing })
	if st := l.Stats(); st.Lost != 6 || st.Queued != 4 {
		t.Fatalf("stats %+v; want 6 lost, 4 queued", st)
	}
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	if strings.Count(out, "audit record lost") != 6 || !strings.Contains(out, "request_id=r9") {
		t.Fatalf("losses not logged:\n%s", out)
	}
	broken.Store(false)
	waitFor(t, "the queue to drain", func() bool { return l.Stats().Written == 4 })
}

func TestFailOpenWithoutAStore(t *testing.T) {
	dir := t.TempDir()
	// A directory where the file should be: the store cannot open.
	path := filepath.Join(dir, "audit.db")
	if err := mkdir(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Path: path}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fail_closed Open = %v, want ErrUnavailable", err)
	}
	l := openTestLog(t, Options{Path: path, FailOpen: true})
	if _, err := l.Reserve(); err != nil {
		t.Fatal(err)
	}
	if !l.Stats().Failing || l.Store() != nil {
		t.Fatalf("stats %+v", l.Stats())
	}
}

func TestCodeRedactedCappedAndHashed(t *testing.T) {
	secret := "AKIA" + "ABCDEFGHIJKLMNOP"
	redact := func(s string) (string, int) {
		n := strings.Count(s, secret)
		return strings.ReplaceAll(s, secret, "[REDACTED:aws_access_key]"), n
	}
	l := openTestLog(t, Options{CodeMax: 64, Redact: redact})
	code := []byte("key = '" + secret + "'\nprint('" + strings.Repeat("é", 40) + "')\n")
	p, _ := l.Reserve()
	r := &Record{Kind: KindExecute, Principal: "alice"}
	r.SetCode(code)
	code[0] = 'X' // the caller may reuse its buffer
	p.Commit(r)
	flush(t, l)
	pg, err := l.Store().Query(context.Background(), Filter{})
	if err != nil || len(pg.Records) != 1 {
		t.Fatal(pg, err)
	}
	got := pg.Records[0]
	code[0] = 'k'
	if got.CodeSHA256 != HashBody(code) || got.CodeBytes != len(code) {
		t.Errorf("hash or size of the submitted code: %s %d", got.CodeSHA256, got.CodeBytes)
	}
	if strings.Contains(got.Code, "AKIA") || !strings.HasPrefix(got.Code, "key = '[REDACTED:aws_access_key]'") || got.CodeRedactions != 1 {
		t.Errorf("code not redacted: %q (%d)", got.Code, got.CodeRedactions)
	}
	if !got.CodeTruncated || len(got.Code) > 64 || !strings.HasSuffix(got.Code, "é") {
		t.Errorf("code not capped at a rune boundary: %q", got.Code)
	}
	// CodeMax < 0 keeps none, but the hash.
	l2 := openTestLog(t, Options{CodeMax: -1})
	p, _ = l2.Reserve()
	r = &Record{Kind: KindExecute}
	r.SetCode(code)
	p.Commit(r)
	flush(t, l2)
	pg, _ = l2.Store().Query(context.Background(), Filter{})
	if pg.Records[0].Code != "" || pg.Records[0].CodeSHA256 == "" {
		t.Errorf("code_max -1: %+v", pg.Records[0])
	}
}

func TestSinkLinesMatchTheStore(t *testing.T) {
	var sink syncBuffer
	l := openTestLog(t, Options{Sink: &sink})
	for i := range 5 {
		l.Append(&Record{Kind: KindAuthFailure, Reason: fmt.Sprint("unauthenticated ", i)})
	}
	flush(t, l)
	pg, _ := l.Store().Query(context.Background(), Filter{})
	sc := bufio.NewScanner(strings.NewReader(sink.String()))
	n := 0
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		want := pg.Records[len(pg.Records)-1-n]
		if r.Seq != want.Seq || r.Hash != want.Hash {
			t.Fatalf("line %d: %s, store has seq %d hash %s", n, sc.Text(), want.Seq, want.Hash)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("%d lines", n)
	}
}

func TestCloseWritesWhatIsQueued(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		p, _ := l.Reserve()
		p.Commit(&Record{Kind: KindExecute})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve after Close = %v", err)
	}
	s, _ := OpenStore(path)
	defer s.Close()
	if rep := verify(t, s); rep.Records != 100 {
		t.Fatalf("%d records after Close", rep.Records)
	}
}

// BenchmarkReserveCommit is what the audit stage adds to an execution's own path:
// a reservation before it, the code's hash, and a queued record after it (the
// writer goroutine does the rest). Compare ns/op with an execution's time.
func BenchmarkReserveCommit(b *testing.B) {
	l, err := Open(Options{Path: filepath.Join(b.TempDir(), FileName), Buffer: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	code := []byte(strings.Repeat("print('hello, world')\n", 20))
	exit := 0
	b.ResetTimer()
	for b.Loop() {
		p, err := l.Reserve()
		if err != nil {
			b.Fatal(err)
		}
		r := &Record{Kind: KindExecute, Principal: "alice", FrontEnd: FrontEndAPI, Language: "python",
			Backend: "native", Profile: "default", Status: "ok", ExitCode: &exit, Isolation: []string{"seccomp", "landlock"}}
		r.SetCode(code)
		p.Commit(r)
	}
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = l.Flush(ctx)
}

// BenchmarkQuery10k queries 10,000 records by principal and time, as moat audit
// --principal P --since D does.
func BenchmarkQuery10k(b *testing.B) {
	s, err := OpenStore(filepath.Join(b.TempDir(), FileName))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var recs []*Record
	for i := range 10000 {
		p := fmt.Sprint("p", i%20)
		if i >= 5000 {
			p = "all" // the newest half: one principal, as in a load test
		}
		recs = append(recs, &Record{Time: t0.Add(time.Duration(i) * time.Second), Kind: KindExecute,
			Principal: p, Status: "ok", Code: strings.Repeat("x", 200)})
	}
	if err := s.Append(context.Background(), recs); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    Filter
		n    int
	}{
		{"principal and a time window", Filter{Principal: "p7", Since: t0.Add(30 * time.Minute), Until: t0.Add(time.Hour)}, 90},
		{"principal of every record, since", Filter{Principal: "all", Since: t0}, 100},
		{"principal of every record, until", Filter{Principal: "all", Until: t0.Add(2 * time.Hour)}, 100},
		{"time only", Filter{Since: t0.Add(time.Hour)}, 100},
		{"rare principal", Filter{Principal: "p0", Since: t0}, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p, err := s.Query(context.Background(), c.f)
				if err != nil || len(p.Records) != c.n {
					b.Fatal(len(p.Records), err)
				}
			}
		})
	}
}

// BenchmarkWriter is the writer goroutine's cost per record (redaction, hashing,
// the SQLite insert), records arriving one at a time.
func BenchmarkWriter(b *testing.B) {
	l, err := Open(Options{Path: filepath.Join(b.TempDir(), FileName), Buffer: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	code := []byte("curl http://example.com/1\n")
	ctx := context.Background()
	for b.Loop() {
		p, _ := l.Reserve()
		r := &Record{Kind: KindExecute, Principal: "load", FrontEnd: FrontEndAPI, Language: "bash", Status: "blocked",
			Violations: []Violation{{Rule: "shell.command", Detail: "command \"curl\" is blocked by profile \"default\"", Line: 1}}}
		r.SetCode(code)
		p.Commit(r)
		if err := l.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOneShotProcess is what auditing costs a moat run process: open the
// store, record one execution, write it and close.
func BenchmarkOneShotProcess(b *testing.B) {
	path := filepath.Join(b.TempDir(), FileName)
	code := []byte("print(1)\n")
	for b.Loop() {
		l, err := Open(Options{Path: path})
		if err != nil {
			b.Fatal(err)
		}
		p, err := l.Reserve()
		if err != nil {
			b.Fatal(err)
		}
		r := &Record{Kind: KindExecute, Principal: "local:root", FrontEnd: FrontEndCLI, Status: "ok"}
		r.SetCode(code)
		p.Commit(r)
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

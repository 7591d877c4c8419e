package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/policy/python"
)

// recorder is a backend that records the Spec and answers with a canned result; the
// pipeline's decisions are what these tests check (the real box has its own suites).
type recorder struct {
	spec   *box.Spec
	res    box.Result
	output string // written through the spec's filter to Stdout
}

func (r *recorder) Name() string { return "recorder" }

func (r *recorder) Run(_ context.Context, s *box.Spec) (*box.Result, error) {
	r.spec = s
	res := r.res
	if s.Filter != nil && r.output != "" {
		var out bytes.Buffer
		w := s.Filter(&out)
		_, _ = io.WriteString(w, r.output)
		_ = w.Close()
		res.Stdout = out.String()
	}
	return &res, nil
}

func newTestEngine(t *testing.T, yaml string, rec *recorder, environ ...string) *Engine {
	t.Helper()
	cfg := config.Default()
	if yaml != "" {
		var err error
		if cfg, err = config.Parse("test.yaml", []byte(yaml)); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New(cfg, rec, environ, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestShellBlockedBeforeAnyBox(t *testing.T) {
	rec := &recorder{}
	e := newTestEngine(t, "", rec)
	res, err := e.Execute(context.Background(), &Request{Language: "bash", Code: []byte("curl http://x\n")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != box.StatusBlocked || len(res.Violations) == 0 || res.Violations[0].Line != 1 {
		t.Fatalf("result = %+v, want blocked with a violation on line 1", res)
	}
	if rec.spec != nil {
		t.Fatal("a box was started for blocked code")
	}
}

func TestPythonRunsThroughRunner(t *testing.T) {
	rec := &recorder{res: box.Result{Status: box.StatusOK}}
	e := newTestEngine(t, "", rec)
	if _, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte("print(1)")}); err != nil {
		t.Fatal(err)
	}
	s := rec.spec
	if !s.Report || len(s.Interpreter) == 0 || !strings.Contains(strings.Join(s.Interpreter, " "), "-I -S /.moat/runner") {
		t.Fatalf("spec does not start the runner in isolated mode without site: %+v", s.Interpreter)
	}
	var policy []byte
	for _, f := range s.Support {
		if f.Path == python.PolicyPath {
			policy = f.Data
		}
	}
	if !bytes.Contains(policy, []byte(`"profile":"default"`)) || !bytes.Contains(policy, []byte(`"subprocess"`)) {
		t.Fatalf("policy document = %s", policy)
	}
}

func TestReportViolationsNeedRunnerExit(t *testing.T) {
	report := []byte(`{"kind":"violation","rule":"python.import","detail":"import of 'socket' is blocked by profile 'default'","line":2}` + "\n" + `{"kind":"result","repr":"'sk-ant-api03-` + strings.Repeat("a", 90) + `'"}` + "\n")
	for _, c := range []struct {
		name   string
		exit   int
		status box.Status
	}{
		{"runner exit 77: blocked", python.ExitViolation, box.StatusBlocked},
		{"forged by code that exited 0: ignored", 0, box.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			status := box.StatusOK
			if c.exit != 0 {
				status = box.StatusError
			}
			rec := &recorder{res: box.Result{Status: status, ExitCode: c.exit, Report: report}}
			res, err := newTestEngine(t, "", rec).Execute(context.Background(), &Request{Language: "python", Code: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.status {
				t.Fatalf("status %s, want %s", res.Status, c.status)
			}
			if res.Result == nil || strings.Contains(*res.Result, "aaaa") || res.Redactions != 1 {
				t.Fatalf("trailing result not redacted: %v (redactions %d)", res.Result, res.Redactions)
			}
		})
	}
}

func TestLimitsPrecedence(t *testing.T) {
	rec := &recorder{res: box.Result{Status: box.StatusOK}}
	e := newTestEngine(t, `limits: {timeout: 5s, memory: 128MiB, pids: 10}
profiles:
  p:
    limits: {memory: 512MiB}
`, rec)
	req := &Request{Language: "bash", Code: []byte("echo hi"), Profile: "p", Limits: box.Limits{Pids: 3}}
	if _, err := e.Execute(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := rec.spec.Limits
	if got.Timeout != 5*time.Second || got.Memory != 512<<20 || got.Pids != 3 {
		t.Fatalf("limits = %+v, want timeout from config, memory from profile, pids from request", got)
	}
}

func TestRedactsOutputAndOwnSecrets(t *testing.T) {
	rec := &recorder{res: box.Result{Status: box.StatusOK}, output: "key AKIAIOSFODNN7EXAMPLE and token supersecretvalue123\n"}
	e := newTestEngine(t, "", rec, "SERVICE_TOKEN=supersecretvalue123", "PATH=/usr/bin")
	res, err := e.Execute(context.Background(), &Request{Language: "bash", Code: []byte("echo")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "AKIA") || strings.Contains(res.Stdout, "supersecretvalue123") || res.Redactions != 2 {
		t.Fatalf("stdout %q, redactions %d", res.Stdout, res.Redactions)
	}
}

func TestBadRequests(t *testing.T) {
	e := newTestEngine(t, "", &recorder{})
	for _, req := range []*Request{
		{Language: "ruby", Code: []byte("puts 1")},
		{Language: "python", Code: []byte("")},
		{Language: "python", Code: []byte("print(1)"), Profile: "nope"},
	} {
		if _, err := e.Execute(context.Background(), req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("Execute(%q, profile %q) = %v, want ErrBadRequest", req.Language, req.Profile, err)
		}
	}
}

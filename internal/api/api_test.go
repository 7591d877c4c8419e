package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/session"
)

const (
	tokAlice = "alice-token-0123456789"
	tokBob   = "bob-token-0123456789"
)

type fixture struct {
	srv  *Server
	eng  *fakeEngine
	gate *fakeGate
	logs *bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	eng := &fakeEngine{res: box.Result{Status: box.StatusOK}}
	g := &fakeGate{
		tokens: map[string]*gate.Principal{
			tokAlice: {Name: "alice", Profile: "default", Profiles: []string{"strict"},
				Quotas: gate.Quotas{Sessions: 3}, MaxLimits: box.DefaultLimits.Merge(box.Limits{Memory: 512 << 20, Timeout: time.Minute})},
			tokBob: {Name: "bob", Profile: "strict", MaxLimits: box.DefaultLimits},
		},
		busy: map[string]bool{},
	}
	logs := &bytes.Buffer{}
	srv := New(Options{Engine: eng, Gate: g, Log: slog.New(slog.NewJSONHandler(logs, nil)), MaxBody: 1 << 16, MaxUpload: 1 << 10, Heartbeat: time.Hour})
	return &fixture{srv: srv, eng: eng, gate: g, logs: logs}
}

// do sends one request with alice's token (unless headers say otherwise).
func (f *fixture) do(t *testing.T, method, target string, body io.Reader, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, body)
	r.Header.Set("Authorization", "Bearer "+tokAlice)
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			r.Header.Del(headers[i])
			continue
		}
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	f.srv.ServeHTTP(w, r)
	return w
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) errorDetail {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q, want application/json; body %s", ct, w.Body)
	}
	var b errorBody
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	if b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("error body without code or message: %s", w.Body)
	}
	return b.Error
}

func TestHealthNeedsNoToken(t *testing.T) {
	f := newFixture(t)
	w := f.do(t, "GET", "/healthz", nil, "Authorization", "")
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"status":"ok"}` {
		t.Fatalf("healthz = %d %s", w.Code, w.Body)
	}
}

func TestAuthOnEveryRoute(t *testing.T) {
	f := newFixture(t)
	for _, rt := range routes {
		if !rt.auth {
			continue
		}
		target := strings.NewReplacer("{id}", "s1", "{path...}", "a.txt").Replace(rt.path)
		for name, auth := range map[string]string{"no token": "", "wrong token": "Bearer nope", "not bearer": "Basic YTpi"} {
			t.Run(rt.method+" "+rt.path+"/"+name, func(t *testing.T) {
				w := f.do(t, rt.method, target, strings.NewReader("{}"), "Authorization", auth)
				if w.Code != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401; body %s", w.Code, w.Body)
				}
				if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate = %q", w.Header().Get("WWW-Authenticate"))
				}
				if e := decodeError(t, w); e.Code != CodeUnauthenticated {
					t.Errorf("code %q", e.Code)
				}
			})
		}
	}
	if len(f.eng.calls) != 0 {
		t.Fatalf("the engine was called without authentication: %v", f.eng.calls)
	}
}

func TestBadInput(t *testing.T) {
	long := strings.Repeat("x", 1<<16)
	cases := []struct {
		name, method, target, body, ctype string
		status                            int
		code, msg                         string
	}{
		{"empty body", "POST", "/v1/execute", "", "", 400, CodeBadRequest, "empty"},
		{"malformed", "POST", "/v1/execute", `{"language":`, "", 400, CodeBadRequest, "malformed JSON"},
		{"syntax error", "POST", "/v1/execute", `{"language" "python"}`, "", 400, CodeBadRequest, "malformed JSON at byte"},
		{"not an object", "POST", "/v1/execute", `[1,2]`, "", 400, CodeBadRequest, "JSON object"},
		{"unknown field", "POST", "/v1/execute", `{"language":"python","code":"1","lang":"x"}`, "", 400, CodeBadRequest, `unknown field "lang"`},
		{"trailing data", "POST", "/v1/execute", `{"language":"python","code":"1"} {}`, "", 400, CodeBadRequest, "after the JSON object"},
		{"trailing garbage", "POST", "/v1/execute", `{"language":"python","code":"1"}x`, "", 400, CodeBadRequest, "after the JSON object"},
		{"wrong type code", "POST", "/v1/execute", `{"language":"python","code":1}`, "", 400, CodeBadRequest, "field code: want a string"},
		{"wrong type memory", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"memory":256}}`, "", 400, CodeBadRequest, "limits.memory: want a string"},
		{"wrong type env", "POST", "/v1/execute", `{"language":"python","code":"1","env":["A=1"]}`, "", 400, CodeBadRequest, "field env: want an object"},
		{"missing language", "POST", "/v1/execute", `{"code":"1"}`, "", 400, CodeBadRequest, "language: missing"},
		{"unknown language", "POST", "/v1/execute", `{"language":"ruby","code":"1"}`, "", 400, CodeBadRequest, `unknown language "ruby"`},
		{"missing code", "POST", "/v1/execute", `{"language":"python"}`, "", 400, CodeBadRequest, "code: missing"},
		{"blank code", "POST", "/v1/execute", `{"language":"python","code":"  \n"}`, "", 400, CodeBadRequest, "code is empty"},
		{"NUL in code", "POST", "/v1/execute", `{"language":"python","code":"a\u0000b"}`, "", 400, CodeBadRequest, "NUL"},
		{"bad timeout", "POST", "/v1/execute", `{"language":"python","code":"1","timeout":"soon"}`, "", 400, CodeBadRequest, `timeout: invalid duration "soon"`},
		{"negative timeout", "POST", "/v1/execute", `{"language":"python","code":"1","timeout":"-1s"}`, "", 400, CodeBadRequest, "must be positive"},
		{"timeout twice", "POST", "/v1/execute", `{"language":"python","code":"1","timeout":"1s","limits":{"timeout":"2s"}}`, "", 400, CodeBadRequest, "given twice"},
		{"bad size", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"memory":"lots"}}`, "", 400, CodeBadRequest, `limits.memory: invalid size "lots"`},
		{"tiny memory", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"memory":"1MiB"}}`, "", 400, CodeBadRequest, "minimum of 16MiB"},
		{"zero cpus", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"cpus":0}}`, "", 400, CodeBadRequest, "limits.cpus"},
		{"negative pids", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"pids":-1}}`, "", 400, CodeBadRequest, "limits.pids"},
		{"fractional pids", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"pids":1.5}}`, "", 400, CodeBadRequest, "limits.pids: want a number"},
		{"bad env name", "POST", "/v1/execute", `{"language":"python","code":"1","env":{"1A":"x"}}`, "", 400, CodeBadRequest, "env: environment name"},
		{"bad base64", "POST", "/v1/execute", `{"language":"python","code":"1","files":[{"path":"a","content":"!!"}]}`, "", 400, CodeBadRequest, "files[0].content: not valid base64"},
		{"file traversal", "POST", "/v1/execute", `{"language":"python","code":"1","files":[{"path":"../a","content":""}]}`, "", 400, CodeBadPath, `files[0].path: path has a ".." segment`},
		{"file absolute", "POST", "/v1/execute", `{"language":"python","code":"1","files":[{"path":"/etc/passwd","content":""}]}`, "", 400, CodeBadPath, "absolute paths must be under /workspace"},
		{"file twice", "POST", "/v1/execute", `{"language":"python","code":"1","files":[{"path":"a","content":""},{"path":"/workspace/a","content":""}]}`, "", 400, CodeBadRequest, "given twice"},
		{"output traversal", "POST", "/v1/execute", `{"language":"python","code":"1","output_files":["a/../../b"]}`, "", 400, CodeBadPath, "output_files[0]"},
		{"output twice", "POST", "/v1/execute", `{"language":"python","code":"1","output_files":["a","/workspace/a"]}`, "", 400, CodeBadRequest, "output_files[1]: a is given twice"},
		{"too large", "POST", "/v1/execute", `{"language":"python","code":"` + long + `"}`, "", 413, CodeTooLarge, "over the limit of 65536 bytes"},
		{"content type", "POST", "/v1/execute", `{"language":"python","code":"1"}`, "text/plain", 415, CodeUnsupportedMedia, "application/json"},
		{"session unknown field", "POST", "/v1/sessions", `{"language":"python","ttl":"1m"}`, "", 400, CodeBadRequest, `unknown field "ttl"`},
		{"session bad ttl", "POST", "/v1/sessions", `{"language":"python","idle_ttl":"10"}`, "", 400, CodeBadRequest, "idle_ttl: invalid duration"},
		{"session bad lifetime", "POST", "/v1/sessions", `{"language":"bash","max_lifetime":"0s"}`, "", 400, CodeBadRequest, "max_lifetime"},
		{"session no language", "POST", "/v1/sessions", `{}`, "", 400, CodeBadRequest, "language: missing"},
		{"call missing code", "POST", "/v1/sessions/s1/execute", `{}`, "", 400, CodeBadRequest, "code: missing"},
		{"call bad timeout", "POST", "/v1/sessions/s1/execute", `{"code":"1","timeout":"1 hour"}`, "", 400, CodeBadRequest, "timeout: invalid duration"},
		{"call unknown field", "POST", "/v1/sessions/s1/execute", `{"code":"1","language":"python"}`, "", 400, CodeBadRequest, `unknown field "language"`},
		{"list dir traversal", "GET", "/v1/sessions/s1/files?dir=../..", "", "", 400, CodeBadPath, "dir:"},
	}
	f := newFixture(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h []string
			if c.ctype != "" {
				h = []string{"Content-Type", c.ctype}
			}
			w := f.do(t, c.method, c.target, strings.NewReader(c.body), h...)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, c.status, w.Body)
			}
			e := decodeError(t, w)
			if e.Code != c.code || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("error %+v, want code %s with %q", e, c.code, c.msg)
			}
		})
	}
	if len(f.eng.calls) != 0 {
		t.Fatalf("bad input reached the engine: %v", f.eng.calls)
	}
	// The server still serves.
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"print(1)"}`))
	if w.Code != 200 {
		t.Fatalf("after bad input: %d %s", w.Code, w.Body)
	}
}

func TestExecuteRequest(t *testing.T) {
	f := newFixture(t)
	f.eng.res = box.Result{Status: box.StatusOK, Stdout: "hi\n"}
	body := `{"language":"python","code":"print(open('in/a.txt').read())","timeout":"5s",
		"limits":{"memory":"64MiB","cpus":0.5,"pids":10,"disk":"10MiB","tmp":"1MiB","output_limit":"4KiB"},
		"env":{"B":"2","A":"1"},"files":[{"path":"/workspace/in/a.txt","content":"aGVsbG8="}],"output_files":["out.txt"]}`
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(body), "Content-Type", "application/json; charset=utf-8")
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var res box.Result
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Stdout != "hi\n" || res.Display == nil {
		t.Fatalf("result %s: %v", w.Body, err)
	}
	req := f.eng.lastReq
	want := box.Limits{Timeout: 5 * time.Second, Memory: 64 << 20, CPUs: 0.5, Pids: 10, Disk: 10 << 20, Tmp: 1 << 20, Output: 4 << 10}
	if req.Limits != want {
		t.Errorf("limits %+v, want %+v", req.Limits, want)
	}
	if req.Profile != "default" {
		t.Errorf("profile %q, want the principal's default", req.Profile)
	}
	if fmt.Sprint(req.Env) != "[A=1 B=2]" || fmt.Sprint(req.OutputFiles) != "[out.txt]" {
		t.Errorf("env %v, output files %v", req.Env, req.OutputFiles)
	}
	if len(req.Files) != 1 || req.Files[0].Dest != "in/a.txt" {
		t.Fatalf("files %+v", req.Files)
	}
	if f.gate.begun != 1 {
		t.Errorf("gate.Begin called %d times, want 1", f.gate.begun)
	}
}

func TestExecuteInputFileIsMemfd(t *testing.T) {
	f := newFixture(t)
	var content []byte
	var name string
	f.eng.err = nil
	eng := &captureFiles{fakeEngine: f.eng, got: func(fl box.File) {
		name = fl.Src.Name()
		content, _ = io.ReadAll(fl.Src)
	}}
	f.srv.eng = eng
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"bash","code":"cat a","files":[{"path":"a","content":"AAEC/w=="}]}`))
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if !bytes.Equal(content, []byte{0, 1, 2, 255}) {
		t.Fatalf("file content %v", content)
	}
	if !strings.HasPrefix(name, "memfd:") {
		t.Fatalf("upload is %q, not an anonymous memory file", name)
	}
}

type captureFiles struct {
	*fakeEngine
	got func(box.File)
}

func (c *captureFiles) Execute(ctx context.Context, req *engine.Request) (*box.Result, error) {
	for _, fl := range req.Files {
		c.got(fl)
	}
	return c.fakeEngine.Execute(ctx, req)
}

func TestProfileAndLimitChecks(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"own default", `{"language":"python","code":"1"}`, 200, ""},
		{"allowed extra", `{"language":"python","code":"1","profile":"strict"}`, 200, ""},
		{"not allowed", `{"language":"python","code":"1","profile":"open"}`, 403, CodeForbidden},
		{"memory over max", `{"language":"python","code":"1","limits":{"memory":"1GiB"}}`, 403, CodeLimitExceeded},
		{"timeout over max", `{"language":"python","code":"1","timeout":"2m"}`, 403, CodeLimitExceeded},
		{"at max", `{"language":"python","code":"1","timeout":"1m","limits":{"memory":"512MiB"}}`, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := f.do(t, "POST", "/v1/execute", strings.NewReader(c.body))
			if w.Code != c.status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			if c.code != "" {
				if e := decodeError(t, w); e.Code != c.code {
					t.Fatalf("code %s, want %s", e.Code, c.code)
				}
			}
		})
	}
	t.Run("session profile", func(t *testing.T) {
		w := f.do(t, "POST", "/v1/sessions", strings.NewReader(`{"language":"python","profile":"open"}`))
		if e := decodeError(t, w); w.Code != 403 || e.Code != CodeForbidden {
			t.Fatalf("status %d %+v", w.Code, e)
		}
	})
	t.Run("call timeout", func(t *testing.T) {
		w := f.do(t, "POST", "/v1/sessions/s1/execute", strings.NewReader(`{"code":"1","timeout":"1h"}`))
		if e := decodeError(t, w); w.Code != 403 || e.Code != CodeLimitExceeded {
			t.Fatalf("status %d %+v", w.Code, e)
		}
	})
}

func TestQuotaRetryAfter(t *testing.T) {
	f := newFixture(t)
	f.gate.busy["alice"] = true
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/v1/execute", `{"language":"python","code":"1"}`},
		{"POST", "/v1/sessions/s1/execute", `{"code":"1"}`},
		{"POST", "/v1/sessions", `{"language":"python"}`},
	} {
		w := f.do(t, c.method, c.target, strings.NewReader(c.body))
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" {
			t.Fatalf("%s: status %d Retry-After %q, want 429 and 2", c.target, w.Code, w.Header().Get("Retry-After"))
		}
		if e := decodeError(t, w); e.Code != CodeRateLimited {
			t.Fatalf("code %s", e.Code)
		}
	}
	if len(f.eng.calls) != 0 {
		t.Fatalf("the engine ran over quota: %v", f.eng.calls)
	}
	// Concurrency and session quotas are quota_exceeded.
	f.eng.err = &gate.QuotaError{Principal: "alice", Kind: gate.QuotaSessions, Limit: 3}
	f.gate.busy["alice"] = false
	w := f.do(t, "POST", "/v1/sessions", strings.NewReader(`{"language":"python"}`))
	if e := decodeError(t, w); w.Code != 429 || e.Code != CodeQuotaExceeded || w.Header().Get("Retry-After") != "" {
		t.Fatalf("sessions quota: %d %+v Retry-After %q", w.Code, e, w.Header().Get("Retry-After"))
	}
}

func TestErrorMapping(t *testing.T) {
	hostPath := "/var/lib/moat/secret-state/box-123"
	cases := []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{fmt.Errorf("%w: unknown profile \"x\"", engine.ErrBadRequest), 400, CodeBadRequest, `unknown profile "x"`},
		{session.ErrNotFound, 404, CodeNotFound, "no such session"},
		{session.ErrBusy, 409, CodeBusy, "one at a time"},
		{&session.LostError{ID: "s1", Reason: "the server restarted; the session's state is gone"}, 410, CodeSessionLost, "server restarted"},
		{fmt.Errorf("call: %w", box.ErrSessionLost), 410, CodeSessionLost, "session lost"},
		{&session.LimitError{Scope: session.ScopeOwner, Limit: 3}, 429, CodeSessionLimit, "at most 3 per owner"},
		{session.ErrClosed, 503, CodeUnavailable, "shutting down"},
		{fmt.Errorf("%w: data.csv", box.ErrFileNotFound), 404, CodeFileNotFound, "data.csv"},
		{fmt.Errorf("%w: big.bin is 99 bytes", box.ErrFileTooLarge), 413, CodeFileTooLarge, "big.bin"},
		{fmt.Errorf("%w: link resolves outside the workspace", box.ErrBadPath), 400, CodeBadPath, "outside the workspace"},
		{fmt.Errorf("%w: dir", box.ErrNotRegular), 400, CodeNotRegular, "not a regular file"},
		{fmt.Errorf("open %s: permission denied", hostPath), 500, CodeInternal, "request id"},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			f := newFixture(t)
			f.eng.err = c.err
			w := f.do(t, "GET", "/v1/sessions/s1/files/data.csv", nil)
			if w.Code != c.status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			e := decodeError(t, w)
			if e.Code != c.code || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("error %+v, want %s with %q", e, c.code, c.msg)
			}
			if strings.Contains(w.Body.String(), "/var/lib") {
				t.Fatalf("host path leaked: %s", w.Body)
			}
			if c.status == 500 {
				if e.RequestID == "" || e.RequestID != w.Header().Get("X-Request-Id") {
					t.Fatalf("request id %q, header %q", e.RequestID, w.Header().Get("X-Request-Id"))
				}
				if !strings.Contains(f.logs.String(), hostPath) || !strings.Contains(f.logs.String(), e.RequestID) {
					t.Fatalf("the internal error is not logged with its request id: %s", f.logs)
				}
			}
		})
	}
}

func TestRequestPaths(t *testing.T) {
	cases := []struct {
		name, method, target string
		status               int
		code                 string
	}{
		{"dotdot", "GET", "/v1/sessions/s1/files/../../etc/passwd", 400, CodeBadPath},
		{"encoded dotdot", "GET", "/v1/sessions/s1/files/..%2F..%2Fetc%2Fpasswd", 400, CodeBadPath},
		{"encoded dotdot upper", "GET", "/v1/sessions/s1/files/..%2f..%2fetc%2fpasswd", 400, CodeBadPath},
		{"encoded dots", "GET", "/v1/sessions/s1/files/%2e%2e/%2e%2e/etc/passwd", 400, CodeBadPath},
		{"dot segment", "GET", "/v1/sessions/s1/files/./a", 400, CodeBadPath},
		{"double slash", "GET", "/v1/sessions/s1/files//etc/passwd", 400, CodeBadPath},
		{"encoded absolute", "GET", "/v1/sessions/s1/files/%2Fetc%2Fpasswd", 400, CodeBadPath},
		{"NUL", "GET", "/v1/sessions/s1/files/a%00b", 400, CodeBadPath},
		{"backslash", "GET", "/v1/sessions/s1/files/..%5C..%5Cetc%5Cpasswd", 400, CodeBadPath},
		{"newline", "PUT", "/v1/sessions/s1/files/a%0Ab", 400, CodeBadPath},
		{"trailing slash", "DELETE", "/v1/sessions/s1/files/dir/", 400, CodeBadPath},
		{"empty path", "GET", "/v1/sessions/s1/files/", 400, CodeBadPath},
		{"session id traversal", "GET", "/v1/sessions/..%2Fx/files/a", 400, CodeBadPath},
		{"session id with slash", "GET", "/v1/sessions/a%2Fb/files/a", 404, CodeNotFound},
		{"session id garbage", "GET", "/v1/sessions/%3Cscript%3E", 404, CodeNotFound},
		{"unknown route", "GET", "/v1/nothing", 404, CodeNotFound},
		{"unknown version", "POST", "/v2/execute", 404, CodeNotFound},
		{"wrong method", "PATCH", "/v1/sessions/s1", 405, CodeMethodNotAllowed},
		{"wrong method health", "POST", "/healthz", 405, CodeMethodNotAllowed},
	}
	f := newFixture(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := f.do(t, c.method, c.target, strings.NewReader("x"))
			if w.Code != c.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, c.status, w.Body)
			}
			if e := decodeError(t, w); e.Code != c.code {
				t.Fatalf("code %s, want %s: %s", e.Code, c.code, e.Message)
			}
			if c.status == 405 && w.Header().Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
	if len(f.eng.calls) != 0 {
		t.Fatalf("refused paths reached the engine: %v", f.eng.calls)
	}
	// Double encoding is one literal file name with % in it: passed on, found nowhere.
	w := f.do(t, "GET", "/v1/sessions/s1/files/..%252F..%252Fetc%252Fpasswd", nil)
	if w.Code != 404 || decodeError(t, w).Code != CodeFileNotFound {
		t.Fatalf("double encoded: %d %s", w.Code, w.Body)
	}
	if got := f.eng.calls[len(f.eng.calls)-1]; got != "getfile alice s1 ..%2F..%2Fetc%2Fpasswd" {
		t.Fatalf("engine got %q", got)
	}
}

func TestFiles(t *testing.T) {
	f := newFixture(t)
	data := []byte{0, 1, 2, 0xff, '\n', 'x'}

	w := f.do(t, "PUT", "/v1/sessions/s1/files/dir/data%20file.bin", bytes.NewReader(data))
	if w.Code != 201 || strings.TrimSpace(w.Body.String()) != `{"path":"dir/data file.bin","size":6}` {
		t.Fatalf("put: %d %s", w.Code, w.Body)
	}
	// Chunked: no Content-Length.
	r := httptest.NewRequest("PUT", "/v1/sessions/s1/files/chunked.bin", io.MultiReader(bytes.NewReader(data)))
	r.ContentLength = -1
	r.Header.Set("Authorization", "Bearer "+tokAlice)
	rw := httptest.NewRecorder()
	f.srv.ServeHTTP(rw, r)
	if rw.Code != 201 || !bytes.Equal(f.eng.files["chunked.bin"], data) {
		t.Fatalf("chunked put: %d %s", rw.Code, rw.Body)
	}

	w = f.do(t, "GET", "/v1/sessions/s1/files/dir/data%20file.bin", nil)
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), data) || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("get: %d %q %v", w.Code, w.Header().Get("Content-Type"), w.Body.Bytes())
	}
	f.eng.files["empty"] = nil
	w = f.do(t, "GET", "/v1/sessions/s1/files/empty", nil)
	if w.Code != 200 || w.Body.Len() != 0 || w.Header().Get("Content-Length") != "0" {
		t.Fatalf("get empty: %d %q", w.Code, w.Body)
	}
	w = f.do(t, "GET", "/v1/sessions/s1/files/missing", nil)
	if w.Code != 404 || decodeError(t, w).Code != CodeFileNotFound {
		t.Fatalf("get missing: %d %s", w.Code, w.Body)
	}

	// Over the upload cap, with and without a length.
	big := bytes.Repeat([]byte("a"), 2<<10)
	w = f.do(t, "PUT", "/v1/sessions/s1/files/big", bytes.NewReader(big))
	if w.Code != 413 || decodeError(t, w).Code != CodeFileTooLarge {
		t.Fatalf("big put: %d %s", w.Code, w.Body)
	}
	r = httptest.NewRequest("PUT", "/v1/sessions/s1/files/big", io.MultiReader(bytes.NewReader(big)))
	r.ContentLength = -1
	r.Header.Set("Authorization", "Bearer "+tokAlice)
	rw = httptest.NewRecorder()
	f.srv.ServeHTTP(rw, r)
	if rw.Code != 413 || decodeError(t, rw).Code != CodeFileTooLarge {
		t.Fatalf("big chunked put: %d %s", rw.Code, rw.Body)
	}
	if _, ok := f.eng.files["big"]; ok {
		t.Fatal("an upload over the cap was stored")
	}

	w = f.do(t, "GET", "/v1/sessions/s1/files?dir=dir", nil)
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"files":[]}` {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	w = f.do(t, "DELETE", "/v1/sessions/s1/files/dir/data%20file.bin", nil)
	if w.Code != 204 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	want := "rm alice s1 dir/data file.bin"
	if got := f.eng.calls[len(f.eng.calls)-1]; got != want {
		t.Fatalf("engine got %q, want %q", got, want)
	}
}

func TestSessions(t *testing.T) {
	f := newFixture(t)
	w := f.do(t, "POST", "/v1/sessions", strings.NewReader(`{"language":"python","limits":{"timeout":"10s"},"env":{"A":"1"},"idle_ttl":"1m","max_lifetime":"1h"}`))
	if w.Code != 201 || w.Header().Get("Location") != "/v1/sessions/s1" {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	sr := f.eng.lastSR
	if sr.Owner != "alice" || sr.Profile != "default" || sr.Limits.Timeout != 10*time.Second || sr.IdleTTL != time.Minute || sr.MaxLifetime != time.Hour || fmt.Sprint(sr.Env) != "[A=1]" {
		t.Fatalf("session request %+v", sr)
	}
	w = f.do(t, "GET", "/v1/sessions", nil)
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"sessions":[]}` {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	w = f.do(t, "GET", "/v1/sessions/s1", nil, "Authorization", "Bearer "+tokBob)
	if w.Code != 200 {
		t.Fatalf("get: %d %s", w.Code, w.Body)
	}
	w = f.do(t, "DELETE", "/v1/sessions/s1", nil)
	if w.Code != 204 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	w = f.do(t, "POST", "/v1/sessions/s1/execute", strings.NewReader(`{"code":"x = 1","timeout":"2s"}`))
	if w.Code != 200 || f.eng.lastCR.Timeout != 2*time.Second || string(f.eng.lastCR.Code) != "x = 1" {
		t.Fatalf("exec: %d %s %+v", w.Code, w.Body, f.eng.lastCR)
	}
	want := []string{"create alice", "list alice", "get bob s1", "delete alice s1", "exec alice s1"}
	if fmt.Sprint(f.eng.calls) != fmt.Sprint(want) {
		t.Fatalf("engine calls %v, want %v (every call carries its principal as owner)", f.eng.calls, want)
	}
}

// sseEvent is one parsed server-sent event.
type sseEvent struct{ name, data string }

func parseSSE(t *testing.T, body string) (events []sseEvent, comments int) {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	for _, frame := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		var ev sseEvent
		for _, line := range strings.Split(frame, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments++
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if ev.data != "" {
					t.Fatalf("two data lines in one event: %q", frame)
				}
				ev.data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected line %q in %q", line, body)
			}
		}
		if ev.name != "" {
			events = append(events, ev)
		}
	}
	return events, comments
}

func TestStreaming(t *testing.T) {
	f := newFixture(t)
	// "é" is split across two writes; a line break inside a chunk stays in its JSON.
	f.eng.out = []string{"hello\nwor", "warn\n", "ld \xc3", "", "\xa9\n"}
	f.eng.res = box.Result{Status: box.StatusOK, Stdout: "hello\nworld é\n", Stderr: "warn\n"}
	for _, target := range []string{"/v1/execute", "/v1/sessions/s1/execute"} {
		t.Run(target, func(t *testing.T) {
			w := f.do(t, "POST", target, strings.NewReader(streamBody(target)), "Accept", "application/json, text/event-stream")
			if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d type %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
			}
			events, _ := parseSSE(t, w.Body.String())
			var stdout, stderr strings.Builder
			for _, ev := range events[:len(events)-1] {
				var c chunk
				if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
					t.Fatalf("chunk %q: %v", ev.data, err)
				}
				if strings.ContainsRune(c.Data, '\uFFFD') {
					t.Fatalf("a character was split: %q", c.Data)
				}
				switch ev.name {
				case "stdout":
					stdout.WriteString(c.Data)
				case "stderr":
					stderr.WriteString(c.Data)
				default:
					t.Fatalf("unexpected event %q", ev.name)
				}
			}
			if stdout.String() != "hello\nworld é\n" || stderr.String() != "warn\n" {
				t.Fatalf("streamed stdout %q stderr %q", stdout.String(), stderr.String())
			}
			last := events[len(events)-1]
			var res box.Result
			if last.name != "result" || json.Unmarshal([]byte(last.data), &res) != nil || res.Status != box.StatusOK {
				t.Fatalf("last event %+v", last)
			}
		})
	}
}

func streamBody(target string) string {
	if target == "/v1/execute" {
		return `{"language":"python","code":"print(1)"}`
	}
	return `{"code":"print(1)"}`
}

func TestStreamingErrors(t *testing.T) {
	t.Run("before output: plain JSON error", func(t *testing.T) {
		f := newFixture(t)
		f.eng.err = session.ErrBusy
		w := f.do(t, "POST", "/v1/sessions/s1/execute", strings.NewReader(`{"code":"1"}`), "Accept", "text/event-stream")
		if w.Code != 409 || decodeError(t, w).Code != CodeBusy {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	})
	t.Run("after output: error event", func(t *testing.T) {
		f := newFixture(t)
		f.eng.out = []string{"partial"}
		f.eng.err = &session.LostError{ID: "s1", Reason: "the box died"}
		f.eng.errAfterOutput = true
		w := f.do(t, "POST", "/v1/sessions/s1/execute", strings.NewReader(`{"code":"1"}`), "Accept", "text/event-stream")
		events, _ := parseSSE(t, w.Body.String())
		if w.Code != 200 || len(events) != 2 || events[0].name != "stdout" || events[1].name != "error" {
			t.Fatalf("status %d events %+v", w.Code, events)
		}
		var b errorBody
		if err := json.Unmarshal([]byte(events[1].data), &b); err != nil || b.Error.Code != CodeSessionLost {
			t.Fatalf("error event %q: %v", events[1].data, err)
		}
	})
	t.Run("internal error after output hides details", func(t *testing.T) {
		f := newFixture(t)
		f.eng.out = []string{"partial"}
		f.eng.err = errors.New("fork /usr/lib/moat/x: resource temporarily unavailable")
		f.eng.errAfterOutput = true
		w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"bash","code":"ls"}`), "Accept", "text/event-stream")
		events, _ := parseSSE(t, w.Body.String())
		if len(events) != 2 || events[1].name != "error" || strings.Contains(events[1].data, "/usr/lib") || !strings.Contains(events[1].data, "request id") {
			t.Fatalf("events %+v", events)
		}
	})
}

func TestHeartbeat(t *testing.T) {
	f := newFixture(t)
	f.srv.heartbeat = 10 * time.Millisecond
	f.srv.eng = &slowEngine{fakeEngine: f.eng, d: 80 * time.Millisecond}
	w := f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"bash","code":"sleep 1"}`), "Accept", "text/event-stream")
	events, comments := parseSSE(t, w.Body.String())
	if comments == 0 || len(events) != 1 || events[0].name != "result" {
		t.Fatalf("comments %d events %+v", comments, events)
	}
}

type slowEngine struct {
	*fakeEngine
	d time.Duration
}

func (s *slowEngine) Execute(ctx context.Context, req *engine.Request) (*box.Result, error) {
	time.Sleep(s.d)
	return s.fakeEngine.Execute(ctx, req)
}

func TestSplitUTF8(t *testing.T) {
	for _, c := range []struct{ in, whole, rest string }{
		{"abc", "abc", ""},
		{"a\xc3", "a", "\xc3"},
		{"a\xc3\xa9", "a\xc3\xa9", ""},
		{"\xe2\x82", "", "\xe2\x82"},
		{"x\xf0\x9f\x98", "x", "\xf0\x9f\x98"},
		{"x\xf0\x9f\x98\x80", "x\xf0\x9f\x98\x80", ""},
		{"\xff", "\xff", ""},
		{"\x80\x80\x80\x80", "\x80\x80\x80\x80", ""},
	} {
		w, r := splitUTF8([]byte(c.in))
		if string(w) != c.whole || string(r) != c.rest {
			t.Errorf("splitUTF8(%q) = %q, %q; want %q, %q", c.in, w, r, c.whole, c.rest)
		}
	}
}

func TestRequestLog(t *testing.T) {
	f := newFixture(t)
	secretCode := "print('SECRET_CODE_MARKER')"
	f.do(t, "POST", "/v1/execute", strings.NewReader(`{"language":"python","code":"`+secretCode+`","env":{"K":"ENV_VALUE_MARKER"}}`))
	f.do(t, "PUT", "/v1/sessions/s1/files/a", strings.NewReader("FILE_CONTENT_MARKER"))
	f.do(t, "GET", "/v1/sessions/s1", nil, "Authorization", "Bearer wrong-token-marker")
	logs := f.logs.String()
	for _, secret := range []string{"SECRET_CODE_MARKER", "ENV_VALUE_MARKER", "FILE_CONTENT_MARKER", tokAlice, "wrong-token-marker"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds %q:\n%s", secret, logs)
		}
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(recs), logs)
	}
	r := recs[0]
	if r["route"] != "POST /v1/execute" || r["status"] != float64(200) || r["principal"] != "alice" || r["request_id"] == "" {
		t.Errorf("record %v", r)
	}
	if recs[2]["status"] != float64(401) || recs[2]["principal"] != "" {
		t.Errorf("record %v", recs[2])
	}
}

func TestCleanPath(t *testing.T) {
	ok := map[string]string{
		"a": "a", "a/b/c.txt": "a/b/c.txt", "/workspace/a": "a", "..a": "..a", "a..": "a..",
		"a/.hidden": "a/.hidden", "%2e%2e": "%2e%2e", "é.txt": "é.txt", "a b": "a b",
	}
	for in, want := range ok {
		got, err := cleanPath("path", in)
		if err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ".", "..", "../a", "a/..", "a/../b", "/etc/passwd", "/workspace", "/workspace/", "/workspace/../etc",
		"a//b", "a/", "./a", "a\\b", "a\x00b", "a\nb", "\xff", strings.Repeat("a", MaxPathBytes+1)} {
		if got, err := cleanPath("path", in); err == nil {
			t.Errorf("cleanPath(%q) = %q, want an error", in, got)
		}
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"a/b", "../x", "/workspace/a", "a//b", "a\x00", "..%2F"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := cleanPath("path", in)
		if err != nil {
			return
		}
		if got == "" || strings.HasPrefix(got, "/") || strings.ContainsAny(got, "\x00\\") {
			t.Fatalf("cleanPath(%q) = %q", in, got)
		}
		for _, seg := range strings.Split(got, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("cleanPath(%q) = %q has segment %q", in, got, seg)
			}
		}
	})
}

func FuzzDecodeExecute(f *testing.F) {
	for _, s := range []string{`{"language":"python","code":"1"}`, `{`, `[]`, `{"limits":{"cpus":1e999}}`, `{"files":[{"path":"a","content":"=="}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fx := newFixture(t)
		fx.eng.err = nil
		w := fx.do(t, "POST", "/v1/execute", strings.NewReader(body))
		if w.Code != 200 && (w.Code < 400 || w.Code >= 500) {
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if w.Code != 200 {
			decodeError(t, w)
		}
	})
}

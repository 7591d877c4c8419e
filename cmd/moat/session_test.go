package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
)

const cliToken = "cli-test-token-0123456789"

type cliGate struct{}

func (cliGate) Authenticate(r *http.Request) (*gate.Principal, error) {
	if r.Header.Get("Authorization") != "Bearer "+cliToken {
		return nil, gate.ErrUnauthenticated
	}
	return &gate.Principal{Name: "me", Profile: "default", MaxLimits: box.DefaultLimits}, nil
}

func (cliGate) Begin(*gate.Principal) (func(), error) { return func() {}, nil }

// cliEngine answers every execution with its code echoed on stdout and the exit
// status given by the code's first byte ('0'..'9'); files live in a map.
type cliEngine struct {
	mu      sync.Mutex
	files   map[string][]byte
	lastReq *engine.Request
	lastSR  *engine.SessionRequest
}

func (e *cliEngine) result(code []byte, stdout io.Writer) *box.Result {
	r := &box.Result{Status: box.StatusOK, Stdout: string(code)}
	if c := code[0]; c > '0' && c <= '9' {
		r.Status, r.ExitCode = box.StatusError, int(c-'0')
	}
	if stdout != nil {
		_, _ = io.WriteString(stdout, string(code))
	}
	r.Normalize()
	return r
}

func (e *cliEngine) Execute(_ context.Context, req *engine.Request) (*box.Result, error) {
	e.lastReq = req
	return e.result(req.Code, req.Stdout), nil
}

func (e *cliEngine) CreateSession(_ context.Context, req *engine.SessionRequest) (engine.SessionInfo, error) {
	e.lastSR = req
	return engine.SessionInfo{ID: "s1", Language: req.Language, State: "idle"}, nil
}

func (e *cliEngine) Sessions(string) []engine.SessionInfo {
	return []engine.SessionInfo{{ID: "s1", Language: "python", Profile: "default", State: "idle"}}
}

func (e *cliEngine) Session(_, id string) (engine.SessionInfo, error) {
	return engine.SessionInfo{ID: id}, nil
}

func (e *cliEngine) DeleteSession(_, id string) error {
	if id != "s1" {
		return box.ErrSessionClosed
	}
	return nil
}

func (e *cliEngine) SessionExecute(_ context.Context, _, _ string, req *engine.CallRequest) (*box.Result, error) {
	return e.result(req.Code, req.Stdout), nil
}

func (e *cliEngine) PutFile(_ context.Context, _, _, path string, r io.Reader, _ int64) error {
	b, err := io.ReadAll(r)
	e.mu.Lock()
	e.files[path] = b
	e.mu.Unlock()
	return err
}

func (e *cliEngine) GetFile(_ context.Context, _, _, path string, w io.Writer) (int64, error) {
	e.mu.Lock()
	b, ok := e.files[path]
	e.mu.Unlock()
	if !ok {
		return 0, box.ErrFileNotFound
	}
	n, err := w.Write(b)
	return int64(n), err
}

func (e *cliEngine) ListFiles(context.Context, string, string, string) ([]box.FileInfo, error) {
	return []box.FileInfo{{Path: "data.csv", Size: 3, Mode: "-rw-r--r--"}}, nil
}

func (e *cliEngine) RemoveFile(context.Context, string, string, string) error { return nil }

type cliOut struct {
	code           int
	stdout, stderr string
}

// moatCLI runs the CLI in-process against url with the token in $MOAT_TOKEN.
func moatCLI(t *testing.T, stdin string, args ...string) cliOut {
	t.Helper()
	var so, se bytes.Buffer
	code := run(args, strings.NewReader(stdin), &so, &se)
	return cliOut{code, so.String(), se.String()}
}

func cliServer(t *testing.T) (*cliEngine, string) {
	t.Helper()
	eng := &cliEngine{files: map[string][]byte{}}
	ts := httptest.NewServer(api.New(api.Options{Engine: eng, Gate: cliGate{}}))
	t.Cleanup(ts.Close)
	t.Setenv("MOAT_TOKEN", cliToken)
	t.Setenv("MOAT_SERVER", "")
	return eng, ts.URL
}

func TestSessionCommands(t *testing.T) {
	eng, url := cliServer(t)
	dir := t.TempDir()

	o := moatCLI(t, "", "session", "create", "--server", url, "--lang", "bash", "--memory", "128MiB", "--timeout", "5s", "--idle-ttl", "2m", "--env", "A=1")
	if o.code != 0 || o.stdout != "s1\n" {
		t.Fatalf("create: %+v", o)
	}
	if sr := eng.lastSR; sr.Language != "bash" || sr.Limits.Memory != 128<<20 || sr.Limits.Timeout.String() != "5s" || sr.IdleTTL.String() != "2m0s" || sr.Env[0] != "A=1" || sr.Limits.CPUs != 0 {
		t.Fatalf("session request %+v", sr)
	}
	o = moatCLI(t, "", "session", "create", "--server", url, "--json")
	var info engine.SessionInfo
	if o.code != 0 || json.Unmarshal([]byte(o.stdout), &info) != nil || info.ID != "s1" || info.Language != "python" {
		t.Fatalf("create --json: %+v", o)
	}

	// exec streams and exits with the code's status; --json prints the result.
	o = moatCLI(t, "3 echo", "session", "exec", "s1", "--server", url)
	if o.code != 3 || o.stdout != "3 echo" {
		t.Fatalf("exec: %+v", o)
	}
	o = moatCLI(t, "3 echo", "session", "exec", "--json", "--server", url, "s1", "-")
	var res box.Result
	if o.code != 0 || json.Unmarshal([]byte(o.stdout), &res) != nil || res.ExitCode != 3 {
		t.Fatalf("exec --json: %+v", o)
	}
	code := filepath.Join(dir, "code.py")
	if err := os.WriteFile(code, []byte("0 ok"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o = moatCLI(t, "", "session", "exec", "--server", url, "s1", code); o.code != 0 || o.stdout != "0 ok" {
		t.Fatalf("exec FILE: %+v", o)
	}

	// put and get, binary safe.
	src := filepath.Join(dir, "data.bin")
	data := []byte{0, 1, 2, 0xff}
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if o = moatCLI(t, "", "session", "put", "--server", url, "s1", src, "in/data.bin"); o.code != 0 || !bytes.Equal(eng.files["in/data.bin"], data) {
		t.Fatalf("put: %+v", o)
	}
	if o = moatCLI(t, "from stdin", "session", "put", "--server", url, "s1", "-", "stdin.txt"); o.code != 0 || string(eng.files["stdin.txt"]) != "from stdin" {
		t.Fatalf("put -: %+v", o)
	}
	if o = moatCLI(t, "", "session", "put", "--server", url, "s1", "-"); o.code != exitUsage {
		t.Fatalf("put - without DEST: %+v", o)
	}
	dest := filepath.Join(dir, "out.bin")
	if o = moatCLI(t, "", "session", "get", "--server", url, "s1", "in/data.bin", dest); o.code != 0 {
		t.Fatalf("get: %+v", o)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, data) {
		t.Fatalf("got %v", got)
	}
	if o = moatCLI(t, "", "session", "get", "--server", url, "s1", "stdin.txt", "-"); o.code != 0 || o.stdout != "from stdin" {
		t.Fatalf("get -: %+v", o)
	}
	missing := filepath.Join(dir, "missing.bin")
	if o = moatCLI(t, "", "session", "get", "--server", url, "s1", "nope", missing); o.code != exitUsage || !strings.Contains(o.stderr, "file not found") {
		t.Fatalf("get missing: %+v", o)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Fatalf("a failed download left files behind: %v", entries)
	}

	if o = moatCLI(t, "", "session", "ls", "--server", url); o.code != 0 || !strings.Contains(o.stdout, "s1") || !strings.Contains(o.stdout, "python") {
		t.Fatalf("ls: %+v", o)
	}
	if o = moatCLI(t, "", "session", "ls", "--server", url, "s1"); o.code != 0 || !strings.Contains(o.stdout, "data.csv") {
		t.Fatalf("ls ID: %+v", o)
	}
	if o = moatCLI(t, "", "session", "ls", "--json", "--server", url, "s1"); o.code != 0 || !strings.HasPrefix(o.stdout, `{"files":[`) {
		t.Fatalf("ls --json ID: %+v", o)
	}
	if o = moatCLI(t, "", "session", "rm", "--server", url, "s1"); o.code != 0 {
		t.Fatalf("rm: %+v", o)
	}
	if o = moatCLI(t, "", "session", "rm", "--server", url, "s2"); o.code != exitUsage || !strings.Contains(o.stderr, "no such session") {
		t.Fatalf("rm unknown: %+v", o)
	}
	if o = moatCLI(t, "", "session", "rm", "--server", url, "s1", "a.txt"); o.code != 0 {
		t.Fatalf("rm file: %+v", o)
	}
}

func TestSessionCommandErrors(t *testing.T) {
	_, url := cliServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()

	for _, c := range []struct {
		name string
		env  string // MOAT_TOKEN
		args []string
		code int
		want string
	}{
		{"no command", cliToken, []string{"session"}, exitUsage, "Usage: moat session"},
		{"unknown command", cliToken, []string{"session", "attach"}, exitUsage, `unknown command "attach"`},
		{"exec without id", cliToken, []string{"session", "exec", "--server", url}, exitUsage, "wrong number of arguments"},
		{"bad server url", cliToken, []string{"session", "ls", "--server", "localhost:7420"}, exitUsage, "want an http:// or https:// URL"},
		{"server down", cliToken, []string{"session", "ls", "--server", down}, exitUnavailable, "cannot reach moat server at " + down},
		{"wrong token", "wrong-token-0123456789", []string{"session", "ls", "--server", url}, exitUsage, "refused the API token"},
		{"bad memory", cliToken, []string{"session", "create", "--server", url, "--memory", "lots"}, exitUsage, "--memory"},
		{"bad idle ttl", cliToken, []string{"session", "create", "--server", url, "--idle-ttl", "soon"}, exitUsage, "--idle-ttl"},
		{"bad language", cliToken, []string{"session", "create", "--server", url, "--lang", "perl"}, exitUsage, `unknown language "perl"`},
		{"empty code", cliToken, []string{"session", "exec", "--server", url, "s1"}, exitUsage, "code is empty"},
		{"run server down", cliToken, []string{"run", "--server", down, "--lang", "python"}, exitUnavailable, "cannot reach moat server"},
		{"run backend", cliToken, []string{"run", "--server", url, "--backend", "docker", "--lang", "python"}, exitUsage, "--backend applies to local runs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("MOAT_TOKEN", c.env)
			stdin := ""
			if strings.HasPrefix(c.name, "run") {
				stdin = "print(1)"
			}
			o := moatCLI(t, stdin, c.args...)
			if o.code != c.code || !strings.Contains(o.stderr, c.want) {
				t.Fatalf("exit %d stderr %q; want %d and %q", o.code, o.stderr, c.code, c.want)
			}
		})
	}
}

func TestRunServer(t *testing.T) {
	eng, url := cliServer(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(in, []byte("a,b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := moatCLI(t, "5 exit", "run", "--server", url, "--lang", "bash", "--memory", "64MiB", "--pids", "9", "--env", "K=V", "--file", in+":data/in.csv", "--profile", "default")
	if o.code != 5 || o.stdout != "5 exit" {
		t.Fatalf("run --server: %+v", o)
	}
	req := eng.lastReq
	if req.Language != "bash" || req.Limits.Memory != 64<<20 || req.Limits.Pids != 9 || req.Limits.Timeout != 0 || req.Env[0] != "K=V" || len(req.Files) != 1 || req.Files[0].Dest != "data/in.csv" {
		t.Fatalf("request %+v", req)
	}
	o = moatCLI(t, "0 ok", "run", "--json", "--server", url, "--lang", "python")
	var res box.Result
	if o.code != 0 || json.Unmarshal([]byte(o.stdout), &res) != nil || res.Status != box.StatusOK {
		t.Fatalf("run --json --server: %+v", o)
	}
}

//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/client"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// This file holds black-box tests of `moat serve` through the Go client and raw HTTP:
// executions, sessions, files, streaming, the gate, bad input, path attacks on the
// files API, shutdown and the reaping of a crashed server's boxes.

// Keys of the principals of serverConfig, given to the server in its environment.
const (
	keyAlice = "alice-key-0123456789abcdef"
	keyBob   = "bob-key-0123456789abcdef"
)

// serverConfig has two principals: alice with the default quotas, bob with a small
// rate and one session. Sizes are small so the size caps are cheap to hit.
const serverConfig = `server:
  max_body: 2MiB
  max_file: 1MiB
  shutdown_grace: %s
  api_keys:
    - principal: alice
      key_env: MOAT_TEST_KEY_ALICE
      profiles: [strict, open]
    - principal: bob
      key_env: MOAT_TEST_KEY_BOB
      quotas:
        rate: 3/m
        sessions: 1
`

// server is one running moat serve.
type server struct {
	url     string
	dataDir string
	cmd     *exec.Cmd
	stderr  *syncBuffer
	exited  chan struct{}
	exitErr error
}

// syncBuffer is the server's stderr, written by a goroutine while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type serverOpts struct {
	grace   string // server.shutdown_grace
	dataDir string // reuse a data directory (a restart)
	noKeys  bool   // no api_keys: the generated token
	pool    string // server.pool in YAML flow style, e.g. "{size: 0}"
	config  string // the whole config instead of serverConfig (shutdown_grace appended to server:)
}

// startServer starts moat serve on a free port and waits until it listens. The
// server is stopped (SIGTERM, then SIGKILL) when the test ends.
func startServer(t *testing.T, o serverOpts) *server {
	t.Helper()
	bin := testutil.MoatBinary(t)
	dir := t.TempDir()
	if o.grace == "" {
		o.grace = "30s"
	}
	if o.dataDir == "" {
		o.dataDir = filepath.Join(dir, "data")
	}
	cfgText := fmt.Sprintf(serverConfig, o.grace)
	if o.noKeys {
		cfgText = "server:\n  shutdown_grace: " + o.grace + "\n"
	}
	if o.pool != "" {
		cfgText += "  pool: " + o.pool + "\n"
	}
	if o.config != "" {
		cfgText = strings.Replace(o.config, "server:\n", "server:\n  shutdown_grace: "+o.grace+"\n", 1)
	}
	cfg := writeFixture(t, dir, "moat.yaml", []byte(cfgText))
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--config", cfg, "--data-dir", o.dataDir)
	cmd.Env = append(os.Environ(), "MOAT_TEST_KEY_ALICE="+keyAlice, "MOAT_TEST_KEY_BOB="+keyBob,
		"MOAT_TEST_SECRET="+hostSecret, "MOAT_TOKEN=")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	serverPIDs.Store(fmt.Sprint(cmd.Process.Pid), true)
	s := &server{cmd: cmd, dataDir: o.dataDir, stderr: &syncBuffer{}, exited: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.stderr, line)
			if addr, ok := strings.CutPrefix(line, "moat: listening on "); ok {
				listening <- addr
			}
		}
		pr.Close()
	}()
	go func() {
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	select {
	case s.url = <-listening:
	case <-s.exited:
		t.Fatalf("moat serve exited before listening: %v\n%s", s.exitErr, s.stderr)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("moat serve did not listen within 30s\n%s", s.stderr)
	}
	t.Cleanup(func() {
		s.stop(t, 60*time.Second)
		if t.Failed() {
			t.Logf("moat serve's stderr:\n%.20000s", s.stderr)
		}
	})
	return s
}

// stop sends SIGTERM and waits up to wait for the server to exit; it reports the
// exit status (-1 when it had to be killed).
func (s *server) stop(t *testing.T, wait time.Duration) int {
	t.Helper()
	select {
	case <-s.exited:
		return s.cmd.ProcessState.ExitCode()
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(wait):
		_ = s.cmd.Process.Kill()
		<-s.exited
		t.Errorf("moat serve did not exit within %v of SIGTERM", wait)
		return -1
	}
}

func (s *server) client(key string) *client.Client { return client.New(s.url, key) }

// raw sends one request as written, path included (no cleaning or escaping), with
// key as the bearer token when not empty.
func (s *server) raw(t *testing.T, method, path, key string, body io.Reader, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+"/", body)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = "//" + req.URL.Host + path // sent as is
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// errorCode returns the code of a JSON error body ("" if it is none).
func errorCode(b []byte) string {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil {
		return ""
	}
	return e.Error.Code
}

// assertServing checks that the server still answers and runs code.
func (s *server) assertServing(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := s.client(keyAlice)
	if err := c.Health(ctx); err != nil {
		t.Fatalf("the server stopped serving: %v", err)
	}
	res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "echo alive"}, nil)
	if err != nil || res.Stdout != "alive\n" {
		t.Fatalf("the server no longer runs code: %+v %v", res, err)
	}
}

// serverPIDs holds the pids of the servers the tests started: boxes are named
// box-<pid of the moat process that made them>-..., so a box of another pid is not
// theirs (a developer's concurrent tests or load test on the same machine).
var serverPIDs sync.Map

// ownBox reports whether a box cgroup path, or a process's /proc/PID/cgroup
// content, names a box of one of the tests' servers; a process in no box cgroup
// (cgroups unavailable) counts as theirs.
func ownBox(s string) bool {
	s = strings.ReplaceAll(s, "/"+cgroup.SparePrefix+"box-", "/box-") // a kept box's
	i := strings.Index(s, "/box-")
	if i < 0 {
		return true
	}
	pid, _, _ := strings.Cut(s[i+len("/box-"):], "-")
	_, ok := serverPIDs.Load(pid)
	return ok
}

// hostBaseline is the host's state before a test, so that check reports only
// what the test's servers left.
type hostBaseline struct {
	host           hostState
	procs, cgroups map[string]bool
}

func baselineHost(t *testing.T) hostBaseline {
	t.Helper()
	b := hostBaseline{host: snapshotHost(t), procs: map[string]bool{}, cgroups: map[string]bool{}}
	for _, p := range boxProcesses() {
		b.procs[p] = true
	}
	for _, c := range boxCgroups() {
		b.cgroups[c] = true
	}
	return b
}

// leftovers lists the box processes and cgroups of the tests' servers that were
// not there at the baseline.
func (b hostBaseline) leftovers() (procs, cgroups []string) {
	for _, p := range boxProcesses() {
		pid, _, _ := strings.Cut(p, ":")
		cg, _ := os.ReadFile("/proc/" + pid + "/cgroup")
		if !b.procs[p] && ownBox(string(cg)) {
			procs = append(procs, p)
		}
	}
	for _, c := range boxCgroups() {
		if !b.cgroups[c] && ownBox(c) {
			cgroups = append(cgroups, c)
		}
	}
	return procs, cgroups
}

// check asserts that no box process, cgroup or mount of the tests' servers
// appeared since the baseline. Box processes may take a moment to be reaped after
// their server exited.
func (b hostBaseline) check(t *testing.T) {
	t.Helper()
	procs, cgroups := b.leftovers()
	for deadline := time.Now().Add(5 * time.Second); len(procs)+len(cgroups) > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		procs, cgroups = b.leftovers()
	}
	if len(procs) > 0 {
		t.Errorf("box processes survived on the host: %v", procs)
	}
	if len(cgroups) > 0 {
		t.Errorf("box cgroups left on the host: %v", cgroups)
	}
	if after := snapshotHost(t); after.mounts != b.host.mounts {
		t.Errorf("host mount table changed: %d mounts before, %d after", b.host.mounts, after.mounts)
	}
}

func apiErr(t *testing.T, err error) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an answer of the server", err, err)
	}
	return e
}

func TestServerExecute(t *testing.T) {
	before := baselineHost(t)
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	c := s.client(keyAlice)

	res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "print('hi')\n6 * 7\n"}, nil)
	if err != nil || res.Status != box.StatusOK || res.Stdout != "hi\n" || res.Result == nil || *res.Result != "42" {
		t.Fatalf("python: %+v %v", res, err)
	}
	if len(res.Isolation) == 0 {
		t.Error("the result does not say which protections were in force")
	}
	res, err = c.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "echo out; echo err >&2; exit 3"}, nil)
	if err != nil || res.Status != box.StatusError || res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Fatalf("bash: %+v %v", res, err)
	}
	res, err = c.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "sleep 10", Timeout: "1s"}, nil)
	if err != nil || res.Status != box.StatusTimeout {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	res, err = c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "import socket"}, nil)
	if err != nil || res.Status != box.StatusBlocked || len(res.Violations) == 0 {
		t.Fatalf("policy: %+v %v", res, err)
	}
	res, err = c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "import os\nsorted(k for k in os.environ if k.startswith('MOAT'))\n"}, nil)
	if err != nil || res.Result == nil || *res.Result != "[]" {
		t.Fatalf("the server's environment reached the box: %+v %v", res, err)
	}

	// Input files arrive binary safe; output files come back in the result.
	bin := []byte{0, 1, 2, 0xff, '\n'}
	res, err = c.Execute(ctx, &api.ExecuteRequest{
		Language:    "python",
		Code:        "data = open('in/b.bin', 'rb').read()\nopen('out.txt', 'w').write(data.hex())\nlen(data)\n",
		Files:       []api.InputFile{{Path: "in/b.bin", Content: base64.StdEncoding.EncodeToString(bin)}},
		OutputFiles: []string{"out.txt", "missing.txt"},
	}, nil)
	if err != nil || res.Status != box.StatusOK || res.Result == nil || *res.Result != "5" {
		t.Fatalf("files: %+v %v", res, err)
	}
	if len(res.Files) != 2 || res.Files[0].Data != base64.StdEncoding.EncodeToString([]byte("000102ff0a")) || res.Files[1].Error == "" {
		t.Errorf("output files: %+v", res.Files)
	}
	// Output files are bounded in all (the server holds them until it answers, and
	// sparse files cost the box nothing): of three sparse 15 MiB files, two come back
	// and the third is refused, saying why.
	res, err = c.Execute(ctx, &api.ExecuteRequest{
		Language:    "python",
		Code:        "for n in ('s1', 's2', 's3'):\n    f = open(n, 'w'); f.truncate(15 << 20); f.close()\n",
		OutputFiles: []string{"s1", "s2", "s3"},
	}, nil)
	if err != nil || res.Status != box.StatusOK || len(res.Files) != 3 {
		t.Fatalf("sparse output files: %v %+v", err, res)
	}
	if f := res.Files; f[0].Size != 15<<20 || f[1].Size != 15<<20 || f[2].Data != "" || !strings.Contains(f[2].Error, "at most 32 MiB in all") {
		t.Errorf("sparse output files: sizes %d %d %d, third %q", f[0].Size, f[1].Size, f[2].Size, f[2].Error)
	}

	// moat run --server: the same output and exit statuses as a local run.
	for _, c := range []struct {
		code string
		args []string
	}{
		{"echo out; echo err >&2; exit 3", []string{"--lang", "bash"}},
		{"print('x' * 3)", []string{"--lang", "python"}},
		{"sleep 5", []string{"--lang", "bash", "--timeout", "1s"}},
		{"import socket", []string{"--lang", "python"}},
		{"print(1)", []string{"--lang", "python", "--json"}},
	} {
		local := moatExec(t, c.code, append([]string{"run"}, c.args...)...)
		remote := moatExecEnv(t, []string{"MOAT_TOKEN=" + keyAlice}, c.code, append([]string{"run", "--server", s.url}, c.args...)...)
		if remote.exit != local.exit || remote.stderr != local.stderr || (c.args[len(c.args)-1] != "--json" && remote.stdout != local.stdout) {
			t.Errorf("moat run --server %q: exit %d stdout %q stderr %q; locally exit %d stdout %q stderr %q",
				c.code, remote.exit, remote.stdout, remote.stderr, local.exit, local.stdout, local.stderr)
		}
	}
	o := moatExecEnv(t, []string{"MOAT_TOKEN=wrong-key-0123456789"}, "print(1)", "run", "--server", s.url, "--lang", "python")
	if o.exit != 2 || !strings.Contains(o.stderr, "refused the API token") {
		t.Errorf("moat run --server with a wrong token: %s", o)
	}

	if code := s.stop(t, 30*time.Second); code != 0 {
		t.Errorf("moat serve exited %d after SIGTERM, want 0", code)
	}
	before.check(t)
	o = moatExecEnv(t, []string{"MOAT_TOKEN=" + keyAlice}, "print(1)", "run", "--server", s.url, "--lang", "python")
	if o.exit != 69 || !strings.Contains(o.stderr, "cannot reach moat server at "+s.url) {
		t.Errorf("moat run --server on a stopped server: %s", o)
	}
}

func TestServerGeneratedToken(t *testing.T) {
	s := startServer(t, serverOpts{noKeys: true})
	if !strings.Contains(s.stderr.String(), "moat: API token written to "+filepath.Join(s.dataDir, "token")+" (mode 0600)") {
		t.Fatalf("moat serve did not say where the token is:\n%s", s.stderr)
	}
	fi, err := os.Stat(filepath.Join(s.dataDir, "token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	token, err := client.Token(s.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.stderr.String(), token) {
		t.Fatal("moat serve printed the token")
	}
	if err := s.client(token).Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client(token).ListSessions(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The CLI finds the token in the data directory.
	o := moatExecEnv(t, []string{"MOAT_TOKEN="}, "", "session", "ls", "--server", s.url, "--data-dir", s.dataDir)
	if o.exit != 0 || !strings.HasPrefix(o.stdout, "ID") {
		t.Fatalf("moat session ls --data-dir: %s", o)
	}
}

func TestServerAstrBotFlow(t *testing.T) {
	before := baselineHost(t)
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	c := s.client(keyAlice)

	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	csv := "name,value\na,100\nb,150\nc,200\n"
	put, err := c.PutFile(ctx, info.ID, "data.csv", strings.NewReader(csv), int64(len(csv)))
	if err != nil || put.Size != int64(len(csv)) {
		t.Fatalf("put: %+v %v", put, err)
	}
	call := func(code string) *box.Result {
		t.Helper()
		res, err := c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: code}, nil)
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		if res.Status != box.StatusOK {
			t.Fatalf("%q: %+v", code, res)
		}
		return res
	}
	call("import pandas as pd")
	call("df = pd.read_csv('data.csv')")
	if res := call("df.head()"); res.Result == nil || !strings.Contains(*res.Result, "value") || !strings.Contains(*res.Result, "150") {
		t.Fatalf("df.head(): %+v", res)
	}
	if res := call("df['value'].mean()"); res.Result == nil || *res.Result != "150.0" {
		t.Fatalf("mean: %+v", res.Result)
	}
	files, err := c.ListFiles(ctx, info.ID, "")
	if err != nil || len(files) == 0 || files[0].Path != "data.csv" {
		t.Fatalf("ls: %+v %v", files, err)
	}
	if err := c.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(ctx, info.ID); err == nil {
		t.Fatal("the session is still there after DELETE")
	} else if e := apiErr(t, err); e.Status != 404 && e.Status != 410 {
		t.Fatalf("deleted session: %v", err)
	}
	s.stop(t, 30*time.Second)
	before.check(t)
}

func TestServerBashSession(t *testing.T) {
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	c := s.client(keyAlice)
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(ctx, info.ID)
	for _, step := range []struct{ code, stdout string }{
		{"mkdir -p /tmp/work && cd /tmp/work && export FOO=bar && greet() { echo \"hi $1\"; }", ""},
		{"pwd; echo $FOO; greet you", "/tmp/work\nbar\nhi you\n"},
		{"false", ""},
		{"echo still here", "still here\n"},
	} {
		res, err := c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: step.code}, nil)
		if err != nil {
			t.Fatalf("%q: %v", step.code, err)
		}
		if res.Stdout != step.stdout {
			t.Fatalf("%q: stdout %q, want %q (%+v)", step.code, res.Stdout, step.stdout, res)
		}
		if step.code == "false" && (res.Status != box.StatusError || res.ExitCode != 1) {
			t.Fatalf("false: %+v", res)
		}
	}
	// The CLI, on the same session.
	o := moatExecEnv(t, []string{"MOAT_TOKEN=" + keyAlice}, "echo $FOO; exit 4", "session", "exec", "--server", s.url, info.ID)
	if o.exit != 4 || o.stdout != "bar\n" {
		t.Fatalf("moat session exec: %s", o)
	}
}

// moatExecEnv is moatExec with extra environment.
func moatExecEnv(t *testing.T, env []string, stdin string, args ...string) runOut {
	t.Helper()
	cmd := exec.Command(testutil.MoatBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	out := runOut{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee != nil {
		out.exit = ee.ExitCode()
	}
	return out
}

func TestServerStreaming(t *testing.T) {
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	c := s.client(keyAlice)
	var stdout, stderr bytes.Buffer
	res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python",
		Code: "import sys\nfor i in range(3):\n    print('line', i, flush=True)\nprint('oops', file=sys.stderr)\n"},
		&client.Streams{Stdout: &stdout, Stderr: &stderr})
	if err != nil || res.Status != box.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	if stdout.String() != "line 0\nline 1\nline 2\n" || stderr.String() != "oops\n" || res.Stdout != stdout.String() {
		t.Fatalf("streamed stdout %q stderr %q; result stdout %q", stdout.String(), stderr.String(), res.Stdout)
	}

	// The raw stream: events, each flushed, then the result.
	code, hdr, body := s.raw(t, "POST", "/v1/execute", keyAlice,
		strings.NewReader(`{"language":"bash","code":"echo a; echo b >&2"}`), "Accept", "text/event-stream", "Content-Type", "application/json")
	if code != 200 || hdr.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q: %s", code, hdr.Get("Content-Type"), body)
	}
	text := string(body)
	if !strings.Contains(text, "event: stdout\ndata: {\"data\":\"a\\n\"}\n\n") || !strings.Contains(text, "event: stderr\ndata: {\"data\":\"b\\n\"}\n\n") ||
		!strings.Contains(text, "event: result\ndata: {\"status\":\"ok\"") || !strings.HasSuffix(text, "}\n\n") {
		t.Fatalf("stream:\n%s", text)
	}

	// In a session too, and secrets are redacted in the stream.
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(ctx, info.ID)
	stdout.Reset()
	res, err = c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "echo AKIAIOSFODNN7EXAMPLE"}, &client.Streams{Stdout: &stdout})
	if err != nil || strings.Contains(stdout.String(), "AKIAIOSFODNN7EXAMPLE") || !strings.Contains(stdout.String(), "[REDACTED") || res.Redactions == 0 {
		t.Fatalf("session stream %q: %+v %v", stdout.String(), res, err)
	}
}

func TestServerAuth(t *testing.T) {
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	alice, bob := s.client(keyAlice), s.client(keyBob)

	for name, key := range map[string]string{"no token": "", "wrong token": "not-a-key-0123456789", "bob's key with a typo": keyBob + "x"} {
		code, hdr, body := s.raw(t, "GET", "/v1/sessions", key, nil)
		if code != 401 || errorCode(body) != "unauthenticated" || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: %d %q %s", name, code, hdr.Get("WWW-Authenticate"), body)
		}
	}
	if code, _, _ := s.raw(t, "GET", "/healthz", "", nil); code != 200 {
		t.Errorf("healthz without a token: %d", code)
	}

	// Another principal's session does not exist for bob.
	info, err := alice.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.DeleteSession(ctx, info.ID)
	if _, err := alice.PutFile(ctx, info.ID, "secret.txt", strings.NewReader("alice's"), 7); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"get": func() error { _, err := bob.GetSession(ctx, info.ID); return err },
		"exec": func() error {
			_, err := bob.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "ls"}, nil)
			return err
		},
		"file":   func() error { _, err := bob.GetFile(ctx, info.ID, "secret.txt", io.Discard); return err },
		"put":    func() error { _, err := bob.PutFile(ctx, info.ID, "x", strings.NewReader("x"), 1); return err },
		"ls":     func() error { _, err := bob.ListFiles(ctx, info.ID, ""); return err },
		"rm":     func() error { return bob.RemoveFile(ctx, info.ID, "secret.txt") },
		"delete": func() error { return bob.DeleteSession(ctx, info.ID) },
	} {
		if e := apiErr(t, call()); e.Status != 404 || e.Code != api.CodeNotFound {
			t.Errorf("bob %s on alice's session: %v", name, e)
		}
	}
	if list, err := bob.ListSessions(ctx); err != nil || len(list) != 0 {
		t.Errorf("bob sees %+v %v", list, err)
	}
	if _, err := alice.GetSession(ctx, info.ID); err != nil {
		t.Fatalf("alice's session suffered from bob's attempts: %v", err)
	}

	// Profiles and limits beyond the principal's.
	_, err = bob.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "echo", Profile: "open"}, nil)
	if e := apiErr(t, err); e.Status != 403 || e.Code != api.CodeForbidden {
		t.Errorf("bob with profile open: %v", e)
	}
	_, err = alice.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "echo", Limits: &api.Limits{Memory: "64GiB"}}, nil)
	if e := apiErr(t, err); e.Status != 403 || e.Code != api.CodeLimitExceeded {
		t.Errorf("alice over her memory cap: %v", e)
	}

	// bob's session quota is 1.
	bs, err := bob.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if e := apiErr(t, err); e.Status != 429 {
		t.Errorf("bob's second session: %v", e)
	}
	if err := bob.DeleteSession(ctx, bs.ID); err != nil {
		t.Fatal(err)
	}

	// bob's rate is 3 a minute, the session above took one: the third execution is
	// refused with Retry-After.
	var last error
	for i := 0; i < 4 && last == nil; i++ {
		_, last = bob.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "true"}, nil)
	}
	e := apiErr(t, last)
	if e.Status != 429 || e.Code != "rate_limited" || e.RetryAfter <= 0 {
		t.Fatalf("over the rate: %+v", e)
	}
	code, hdr, _ := s.raw(t, "POST", "/v1/execute", keyBob, strings.NewReader(`{"language":"bash","code":"true"}`))
	if code != 429 || hdr.Get("Retry-After") == "" {
		t.Fatalf("raw 429: %d Retry-After %q", code, hdr.Get("Retry-After"))
	}
	// alice is not slowed by bob.
	s.assertServing(t)
}

func TestServerBadInput(t *testing.T) {
	s := startServer(t, serverOpts{})
	big := `{"language":"python","code":"` + strings.Repeat("#", 3<<20) + `"}`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"malformed", "POST", "/v1/execute", `{"language":"python",`, 400, "bad_request"},
		{"not json", "POST", "/v1/execute", `print(1)`, 400, "bad_request"},
		{"array", "POST", "/v1/execute", `[]`, 400, "bad_request"},
		{"unknown field", "POST", "/v1/execute", `{"language":"python","code":"1","network":"host"}`, 400, "bad_request"},
		{"trailing data", "POST", "/v1/execute", `{"language":"python","code":"1"}{"language":"bash"}`, 400, "bad_request"},
		{"wrong type", "POST", "/v1/execute", `{"language":"python","code":["1"]}`, 400, "bad_request"},
		{"wrong type cpus", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"cpus":"2"}}`, 400, "bad_request"},
		{"unknown language", "POST", "/v1/execute", `{"language":"ruby","code":"1"}`, 400, "bad_request"},
		{"missing code", "POST", "/v1/execute", `{"language":"python"}`, 400, "bad_request"},
		{"invalid duration", "POST", "/v1/execute", `{"language":"python","code":"1","timeout":"forever"}`, 400, "bad_request"},
		{"invalid size", "POST", "/v1/execute", `{"language":"python","code":"1","limits":{"memory":"-5MiB"}}`, 400, "bad_request"},
		{"unknown profile", "POST", "/v1/execute", `{"language":"python","code":"1","profile":"nope"}`, 403, "forbidden"},
		{"oversized body", "POST", "/v1/execute", big, 413, "too_large"},
		{"session bad ttl", "POST", "/v1/sessions", `{"language":"python","idle_ttl":"ten minutes"}`, 400, "bad_request"},
		{"session unknown field", "POST", "/v1/sessions", `{"language":"python","image":"ubuntu"}`, 400, "bad_request"},
		{"call on no session", "POST", "/v1/sessions/nope/execute", `{"code":"1"}`, 404, "not_found"},
		{"call wrong type", "POST", "/v1/sessions/nope/execute", `{"code":1}`, 400, "bad_request"},
		{"unknown endpoint", "GET", "/v1/boxes", ``, 404, "not_found"},
		{"wrong method", "PUT", "/v1/execute", ``, 405, "method_not_allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, hdr, body := s.raw(t, c.method, c.path, keyAlice, strings.NewReader(c.body), "Content-Type", "application/json")
			if code != c.status || errorCode(body) != c.code || hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %s, want %d %s", code, body, c.status, c.code)
			}
		})
	}
	s.assertServing(t)
}

// TestServerFilePaths attacks the files API: traversal in every spelling, absolute
// paths, NUL, symlinks planted by the session's own code, huge uploads. Each must be
// refused or stay inside the workspace, and the host must be unchanged.
func TestServerFilePaths(t *testing.T) {
	before := baselineHost(t)
	shadow, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	c := s.client(keyAlice)
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "ln -s /etc/shadow shadow; ln -s /etc etc; ln -s / root; ln -s ../../../../etc/passwd up; mkdir d; echo ok"}, nil)
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("planting symlinks: %+v %v", res, err)
	}
	base := "/v1/sessions/" + info.ID + "/files/"
	// Refused before anything is asked of the box: not a plain relative path.
	for _, p := range []string{
		"../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "..%2f..%2fetc%2fshadow", "%2e%2e/%2e%2e/etc/passwd",
		"d/../../../etc/passwd", "%2Fetc%2Fpasswd", "%2F%2Fetc/passwd", "/etc/passwd", "..%5C..%5Cetc%5Cpasswd",
		"a%00b", "data.csv%00.txt", "d/", "./shadow", "d/%2e/x",
	} {
		for _, method := range []string{"GET", "PUT", "DELETE"} {
			code, _, out := s.raw(t, method, base+p, keyAlice, strings.NewReader("pwned"))
			if code != 400 || errorCode(out) != "bad_path" {
				t.Errorf("%s %s: %d %.300q, want 400 bad_path", method, p, code, out)
			}
		}
	}
	// Contained: names the box resolves inside the workspace. Symlinks planted by the
	// code never lead out of it; double-encoded traversal is a literal file name. An
	// upload may replace a link with a file of the workspace; nothing may reach the
	// host or come back from it.
	for _, p := range []string{
		"shadow", "etc/shadow", "root/etc/shadow", "up", "etc", "root", "etc/pwned",
		"..%252F..%252Fetc%252Fpasswd", "%252e%252e/%252e%252e/etc/passwd", "..%25252F..%25252Fetc%25252Fpasswd",
	} {
		for _, method := range []string{"GET", "PUT", "GET", "DELETE"} {
			code, _, out := s.raw(t, method, base+p, keyAlice, strings.NewReader("pwned"))
			switch {
			case bytes.Contains(out, []byte("root:")) || bytes.Contains(out, shadow[:min(len(shadow), 16)]):
				t.Fatalf("%s %s returned a host file: %.300q", method, p, out)
			case code >= 500:
				t.Errorf("%s %s: %d %.300q: an attack is a client error, not moat's", method, p, code, out)
			case method == "GET" && code == 200 && string(out) != "pwned":
				t.Errorf("%s %s: 200 %.300q: not the workspace's own file", method, p, out)
			}
		}
	}
	// Where the files are: the literal names in the workspace, nothing elsewhere.
	if res, err := c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "ls -la /workspace /etc/pwned 2>&1; cat /etc/shadow 2>&1 | head -c 20"}, nil); err == nil {
		t.Logf("the workspace after the attacks:\n%s", res.Stdout)
	}
	// The workspace's own listing shows the links as links, never what they point at.
	files, err := c.ListFiles(ctx, info.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasPrefix(f.Path, "etc/") || strings.HasPrefix(f.Path, "root/") {
			t.Errorf("the listing followed a link: %+v", f)
		}
	}
	// An upload over server.max_file (1MiB), with and without a length.
	huge := bytes.Repeat([]byte("x"), 2<<20)
	if code, _, out := s.raw(t, "PUT", base+"huge.bin", keyAlice, bytes.NewReader(huge)); code != 413 || errorCode(out) != "file_too_large" {
		t.Errorf("huge upload: %d %s", code, out)
	}
	_, err = c.PutFile(ctx, info.ID, "huge.bin", io.MultiReader(bytes.NewReader(huge)), -1)
	if e := apiErr(t, err); e.Status != 413 {
		t.Errorf("huge chunked upload: %v", e)
	}
	// A file the code makes over the cap cannot be downloaded either.
	if _, err := c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "head -c 3000000 /dev/zero > big.bin"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetFile(ctx, info.ID, "big.bin", io.Discard); err == nil {
		t.Error("a file over max_file was downloaded")
	} else if e := apiErr(t, err); e.Status != 413 {
		t.Errorf("big download: %v", e)
	}

	// Nothing reached the host.
	if after, err := os.ReadFile("/etc/shadow"); err != nil || !bytes.Equal(after, shadow) {
		t.Fatal("/etc/shadow changed")
	}
	for _, p := range []string{"/etc/pwned", "/pwned", "/tmp/pwned"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
	// The session still works, and so does the server.
	if _, err := c.PutFile(ctx, info.ID, "ok.txt", strings.NewReader("fine"), 4); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := c.GetFile(ctx, info.ID, "ok.txt", &got); err != nil || got.String() != "fine" {
		t.Fatalf("get ok.txt: %q %v", got.String(), err)
	}
	s.assertServing(t)
	if err := c.DeleteSession(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	s.stop(t, 30*time.Second)
	before.check(t)
}

// TestServerShutdown: SIGTERM lets a running execution finish, refuses new work,
// destroys the sessions' boxes and leaves nothing behind; past the grace, running
// executions are killed.
func TestServerShutdown(t *testing.T) {
	before := baselineHost(t)
	t.Run("within grace", func(t *testing.T) {
		s := startServer(t, serverOpts{grace: "20s"})
		ctx := context.Background()
		c := s.client(keyAlice)
		if _, err := c.CreateSession(ctx, &api.SessionRequest{Language: "python"}); err != nil {
			t.Fatal(err)
		}
		done := make(chan *box.Result, 1)
		go func() {
			res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "sleep 2; echo finished"}, nil)
			if err != nil {
				t.Errorf("the running execution failed: %v", err)
			}
			done <- res
		}()
		time.Sleep(700 * time.Millisecond)
		start := time.Now()
		if code := s.stop(t, 30*time.Second); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		res := <-done
		if res == nil || res.Stdout != "finished\n" {
			t.Fatalf("the running execution did not finish: %+v", res)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("shutdown took %v", d)
		}
		if err := c.Health(ctx); err == nil {
			t.Error("the server still answers after shutdown")
		}
		before.check(t)
	})
	t.Run("past grace", func(t *testing.T) {
		s := startServer(t, serverOpts{grace: "1s"})
		c := s.client(keyAlice)
		done := make(chan error, 1)
		go func() {
			_, err := c.Execute(context.Background(), &api.ExecuteRequest{Language: "bash", Code: "sleep 25"}, nil)
			done <- err
		}()
		time.Sleep(700 * time.Millisecond)
		start := time.Now()
		if code := s.stop(t, 20*time.Second); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("shutdown took %v with a grace of 1s", d)
		}
		if err := <-done; err == nil {
			t.Error("an execution past the grace was not cut off")
		}
		before.check(t)
	})
}

// TestServerCrashRestart: kill -9 of the server during executions, then a restart
// with the same data directory: nothing of the old run survives the restart's
// reaping, and a session of the old run is reported lost, not unknown.
func TestServerCrashRestart(t *testing.T) {
	before := baselineHost(t)
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	c := s.client(keyAlice)
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		go func() {
			_, _ = c.Execute(ctx, &api.ExecuteRequest{Language: "bash", Code: "sleep 60 & sleep 60; wait"}, nil)
		}()
	}
	go func() { _, _ = c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "sleep 60"}, nil) }()
	time.Sleep(1500 * time.Millisecond)
	if procs, _ := before.leftovers(); len(procs) == 0 {
		t.Fatal("no box processes while executions run: the test proves nothing")
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited

	// The restart runs without a warm pool, so that every box on the host after it
	// starts would be one the old run left (its pooled boxes included).
	s2 := startServer(t, serverOpts{dataDir: s.dataDir, pool: "{size: 0}"})
	// The restart has reaped the old run's boxes before it listens.
	before.check(t)
	if !strings.Contains(s2.stderr.String(), "reaped boxes left by an earlier run") {
		t.Errorf("the restart did not say it reaped the old run's boxes:\n%s", s2.stderr)
	}
	_, err = s2.client(keyAlice).GetSession(ctx, info.ID)
	if e := apiErr(t, err); e.Status != 410 || e.Code != api.CodeSessionLost {
		t.Errorf("the old run's session: %v, want 410 session_lost", e)
	}
	s2.assertServing(t)
	s2.stop(t, 30*time.Second)
	before.check(t)
}

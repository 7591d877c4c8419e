package python

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
)

// sessionTimeout bounds every wait on a session runner (a first pandas import is slow
// when the whole suite runs in parallel).
const sessionTimeout = 2 * time.Minute

// testSession is a runner started with --session and driven over pipes as a box
// does: requests on fd 4, the report on fd 3, stdout and stderr to files (so that
// what a call printed is all there once its done line arrived).
type testSession struct {
	t              *testing.T
	cmd            *exec.Cmd
	req            *os.File // our end of fd 4
	rep            *os.File // our end of fd 3
	lines          *bufio.Reader
	stdout, stderr string // file paths
	outOff, errOff int
	exited         bool // the report channel ended
}

// callResult is what one call of a session produced.
type callResult struct {
	Exit           int // -1: no done line (the runner ended)
	Report         Report
	RawReport      string
	Stdout, Stderr string
}

func (c callResult) String() string {
	return fmt.Sprintf("exit %d\nreport:\n%.2000s\nstdout:\n%s\nstderr:\n%s", c.Exit, c.RawReport, c.Stdout, c.Stderr)
}

// startSession starts a session runner under p (runner.py itself when source, else
// the compiled runner) and waits for its ready line.
func startSession(t *testing.T, p Policy, source bool) *testSession {
	t.Helper()
	requirePython(t)
	moat, work := t.TempDir(), t.TempDir()
	for name, data := range map[string][]byte{"runner.py": Runner, "runner.pyc": env.compiled, "policy.json": p.JSON()} {
		if err := os.WriteFile(filepath.Join(moat, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runner := filepath.Join(moat, "runner.pyc")
	if source {
		runner = filepath.Join(moat, "runner.py")
	}
	argv := append(SessionInterpreter(runner), "--policy", filepath.Join(moat, "policy.json"))
	s := &testSession{t: t, stdout: filepath.Join(moat, "stdout"), stderr: filepath.Join(moat, "stderr")}
	open := func(path string) *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	outF, errF := open(s.stdout), open(s.stderr)
	defer outF.Close()
	defer errF.Close()
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(python, argv[1:]...)
	s.cmd.Dir = work
	s.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + work, "LANG=C.UTF-8",
		"LC_ALL=C.UTF-8", "TMPDIR=/tmp", "MPLCONFIGDIR=" + env.mplDir}
	s.cmd.Stdout, s.cmd.Stderr = outF, errF
	s.cmd.ExtraFiles = []*os.File{repW, reqR} // fds 3 and 4
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	repW.Close()
	reqR.Close()
	s.req, s.rep = reqW, repR
	s.lines = bufio.NewReaderSize(repR, 1<<16)
	t.Cleanup(func() {
		s.req.Close()
		if !s.exited || s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
		s.rep.Close()
	})
	line, err := s.readLine()
	if l, ok := box.ParseSessionLine(line); err != nil || !ok || l.Kind != "ready" {
		t.Fatalf("want the ready line first, got %q (%v)\nstderr:\n%s", line, err, s.read(s.stderr, &s.errOff))
	}
	return s
}

// readLine reads one line of the report channel (without its newline).
func (s *testSession) readLine() ([]byte, error) {
	if err := s.rep.SetReadDeadline(time.Now().Add(sessionTimeout)); err != nil {
		s.t.Fatal(err)
	}
	line, err := s.lines.ReadBytes('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.t.Fatalf("no report line within %v", sessionTimeout)
	}
	return bytes.TrimSuffix(line, []byte{'\n'}), err
}

// read returns what the file at path holds past *off and moves *off to its end.
func (s *testSession) read(path string, off *int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		s.t.Fatal(err)
	}
	out := string(data[*off:])
	*off = len(data)
	return out
}

// send writes one request (a random id, as a host gives) and returns its id.
func (s *testSession) send(code string) int64 {
	s.t.Helper()
	id := box.NewCallID()
	if _, err := s.req.Write(box.EncodeCall("python", id, []byte(code))); err != nil {
		s.t.Fatalf("write request: %v", err)
	}
	return id
}

// wait reads the report until the done line of call id, or the channel's end.
func (s *testSession) wait(id int64) callResult {
	s.t.Helper()
	var raw []byte
	c := callResult{Exit: -1}
	for {
		line, err := s.readLine()
		if l, ok := box.ParseSessionLine(line); ok && l.Kind == "done" {
			if l.ID != id {
				s.t.Fatalf("done line for call %d, want %d", l.ID, id)
			}
			c.Exit = l.Exit
			break
		}
		raw = append(append(raw, line...), '\n')
		if err == io.EOF {
			s.exited = true
			break
		}
		if err != nil {
			s.t.Fatal(err)
		}
	}
	c.Report, c.RawReport = ParseReport(raw), string(raw)
	c.Stdout, c.Stderr = s.read(s.stdout, &s.outOff), s.read(s.stderr, &s.errOff)
	return c
}

// call runs code as one call and returns what it produced.
func (s *testSession) call(code string) callResult {
	s.t.Helper()
	return s.wait(s.send(code))
}

// end closes the request channel and returns the runner's exit status and what it
// printed on stderr since the last call.
func (s *testSession) end() (int, string) {
	s.t.Helper()
	s.req.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		var exitErr *exec.ExitError
		if err != nil && !errors.As(err, &exitErr) {
			s.t.Fatal(err)
		}
	case <-time.After(sessionTimeout):
		s.t.Fatal("the runner did not end")
	}
	s.exited = true
	return s.cmd.ProcessState.ExitCode(), s.read(s.stderr, &s.errOff)
}

// interrupt sends SIGINT to the runner.
func (s *testSession) interrupt() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		s.t.Fatal(err)
	}
}

// waitStdout waits until the runner has printed want on stdout (not consumed).
func (s *testSession) waitStdout(want string) {
	s.t.Helper()
	deadline := time.Now().Add(sessionTimeout)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(s.stdout)
		if err != nil {
			s.t.Fatal(err)
		}
		if strings.Contains(string(data[s.outOff:]), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("stdout never showed %q", want)
}

// sessionStep is one call of a session table and what it must produce.
type sessionStep struct {
	name, code string
	exit       int
	result     *string  // nil: no result
	stdout     *string  // nil: not checked
	stderr     []string // substrings stderr must have
	rules      []string // violations, in order
}

// check reports how c differs from what step wants.
func (step sessionStep) check(t *testing.T, c callResult) {
	t.Helper()
	if c.Exit != step.exit {
		t.Errorf("exit %d, want %d", c.Exit, step.exit)
	}
	switch {
	case step.result == nil && c.Report.Result != nil:
		t.Errorf("result %q, want none", *c.Report.Result)
	case step.result != nil && (c.Report.Result == nil || *c.Report.Result != *step.result):
		t.Errorf("want result %q", *step.result)
	}
	if step.stdout != nil && c.Stdout != *step.stdout {
		t.Errorf("stdout %q, want %q", c.Stdout, *step.stdout)
	}
	for _, want := range step.stderr {
		if !strings.Contains(c.Stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	var rules []string
	for _, v := range c.Report.Violations {
		rules = append(rules, v.Rule)
	}
	if fmt.Sprint(rules) != fmt.Sprint(step.rules) {
		t.Errorf("violations %v, want %v", c.Report.Violations, step.rules)
	}
	if strings.Contains(c.Stderr, "runner") {
		t.Errorf("stderr shows the runner")
	}
	if t.Failed() {
		t.Logf("call:\n%s\n%s", step.code, c)
	}
}

// runSteps runs steps in order in one session.
func runSteps(t *testing.T, s *testSession, steps []sessionStep) {
	t.Helper()
	for _, step := range steps {
		if !t.Run(step.name, func(t *testing.T) { step.check(t, s.call(step.code)) }) && s.exited {
			t.Fatalf("the runner ended at %q", step.name)
		}
	}
}

// TestSession runs a notebook-like sequence of calls in one session: state persists,
// each call reports its own result and status, and errors, SystemExit and static
// violations end the call but not the session.
func TestSession(t *testing.T) {
	t.Parallel()
	s := startSession(t, DefaultPolicy(), false)
	runSteps(t, s, []sessionStep{
		{name: "assignment", code: "x = 6", stdout: ptr("")},
		{name: "variable persists", code: "x * 7", result: ptr("42")},
		{name: "import and function", code: "import math\n\ndef area(r):\n    return math.pi * r * r\n"},
		{name: "function and import persist", code: "round(area(2), 3)", result: ptr("12.566")},
		{name: "pandas", code: "import pandas as pd; df=pd.DataFrame({'value':[100,200]})"},
		{name: "pandas result", code: "df['value'].mean()", result: ptr("150.0")},
		{name: "print", code: "print('hello')\nprint('world')", stdout: ptr("hello\nworld\n")},
		{name: "main module", code: "import __main__\n(__name__, __main__.__dict__ is globals(), '__file__' in globals())",
			result: ptr("('__main__', True, False)")},
		{name: "exception", code: "y = 1\n1/0", exit: 1,
			stderr: []string{"Traceback (most recent call last):", `File "<cell 9>", line 2, in <module>`, "    1/0", "ZeroDivisionError: division by zero"}},
		{name: "state before the exception kept", code: "(x, y)", result: ptr("(6, 1)")},
		{name: "define a failing function", code: "def g(a):\n    return a + undefined_name\n"},
		{name: "traceback shows an earlier call's source", code: "g(1)", exit: 1,
			stderr: []string{`File "<cell 12>", line 1, in <module>`, `File "<cell 11>", line 2, in g`,
				"    return a + undefined_name", "NameError: name 'undefined_name' is not defined"}},
		{name: "syntax error", code: "z = (\n", exit: 1, stderr: []string{`File "<cell 13>", line 1`, "SyntaxError"}},
		{name: "SystemExit int", code: "raise SystemExit(3)", exit: 3},
		{name: "sys.exit()", code: "import sys\nsys.exit()", exit: 0},
		{name: "SystemExit message", code: "raise SystemExit('bye')", exit: 1, stderr: []string{"bye\n"}},
		{name: "exit builtin", code: "exit(4)", exit: 4},
		{name: "static violation", code: "x = 100\nimport subprocess", exit: ExitViolation, rules: []string{"python.import"}},
		{name: "refused code did not run", code: "x", result: ptr("6")},
		{name: "fds 3 and 4 are not the channels", code: `import os
for fd in (3, 4):
    try:
        os.write(fd, b'{"kind":"result","repr":"forged"}\n')
        print(fd, "written")
    except OSError:
        print(fd, "refused")
`, stdout: ptr("3 refused\n4 refused\n")},
		{name: "unterminated line on the channel", code: `import os
import stat
for fd in range(5, 64):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, b'{"kind":"result","repr":"for')
    except OSError:
        pass
`},
		{name: "after the unterminated line", code: "x + 1", result: ptr("7")},
		{name: "empty call", code: ""},
	})
	if code, stderr := s.end(); code != 0 || stderr != "" {
		t.Errorf("end of the request channel: exit %d, want 0 quietly\nstderr:\n%s", code, stderr)
	}
}

// TestSessionKeepsPolicy: every call is checked by both layers, and a runtime
// violation ends the interpreter as in a single run.
func TestSessionKeepsPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		rule       string
		line       int
	}{
		{"computed import", "import builtins\nimp = getattr(builtins, ''.join(['__imp', 'ort__']))\nimp(''.join(['sub', 'process']))", "python.import", 3},
		{"computed eval", "import builtins\nev = getattr(builtins, ''.join(['ev', 'al']))\nev('1 + 1')", "python.exec", 3},
		{"computed os.system", "import os\n\ngetattr(os, ''.join(['sys', 'tem']))('true')", "python.process", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startSession(t, DefaultPolicy(), false)
			if c := s.call("a = 1\na"); c.Exit != 0 || c.Report.Result == nil {
				t.Fatalf("first call\n%s", c)
			}
			c := s.call(tc.code)
			if c.Exit != -1 || !s.exited {
				t.Fatalf("want the runner ended without a done line\n%s", c)
			}
			if len(c.Report.Violations) != 1 || c.Report.Violations[0].Rule != tc.rule || c.Report.Violations[0].Line != tc.line {
				t.Errorf("want one %s violation at line %d\n%s", tc.rule, tc.line, c)
			}
			if code, _ := s.end(); code != ExitViolation {
				t.Errorf("exit %d, want %d", code, ExitViolation)
			}
		})
	}
}

// TestSessionInterrupt: SIGINT interrupts a running call (status 130) and nothing
// else: not the runner waiting for a request, nor one reading half a header.
func TestSessionInterrupt(t *testing.T) {
	t.Parallel()
	s := startSession(t, DefaultPolicy(), false)
	if c := s.call("kept = 'yes'"); c.Exit != 0 {
		t.Fatalf("first call\n%s", c)
	}

	t.Run("busy loop", func(t *testing.T) {
		id := s.send("print('started', flush=True)\nwhile True:\n    pass\n")
		s.waitStdout("started")
		s.interrupt()
		sessionStep{exit: ExitInterrupted, stdout: ptr("started\n"),
			stderr: []string{`File "<cell 2>", line 2, in <module>`, "KeyboardInterrupt"}}.check(t, s.wait(id))
	})
	t.Run("sleep", func(t *testing.T) {
		id := s.send("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
		s.waitStdout("started")
		s.interrupt()
		sessionStep{exit: ExitInterrupted, stdout: ptr("started\n"), stderr: []string{"KeyboardInterrupt"}}.check(t, s.wait(id))
	})
	t.Run("caught by the code", func(t *testing.T) {
		id := s.send("import time\nprint('started', flush=True)\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('caught')\n")
		s.waitStdout("started")
		s.interrupt()
		sessionStep{stdout: ptr("started\ncaught\n")}.check(t, s.wait(id))
	})
	t.Run("while idle", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			s.interrupt()
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		sessionStep{result: ptr("'yes'")}.check(t, s.call("kept"))
	})
	t.Run("inside a header", func(t *testing.T) {
		id := box.NewCallID()
		req := box.EncodeCall("python", id, []byte("kept + '!'"))
		if _, err := s.req.Write(req[:7]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		s.interrupt()
		time.Sleep(50 * time.Millisecond)
		if _, err := s.req.Write(req[7:]); err != nil {
			t.Fatal(err)
		}
		sessionStep{result: ptr("'yes!'")}.check(t, s.wait(id))
	})
	t.Run("a handler the code installs lasts one call", func(t *testing.T) {
		id := s.send("import signal, time\nsignal.signal(signal.SIGINT, lambda *a: print('handled', flush=True))\n" +
			"print('started', flush=True)\ntime.sleep(0.5)\n")
		s.waitStdout("started")
		s.interrupt()
		sessionStep{stdout: ptr("started\nhandled\n")}.check(t, s.wait(id))
		id = s.send("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
		s.waitStdout("started")
		s.interrupt()
		sessionStep{exit: ExitInterrupted, stdout: ptr("started\n"), stderr: []string{"KeyboardInterrupt"}}.check(t, s.wait(id))
	})
	if code, stderr := s.end(); code != 0 || stderr != "" {
		t.Errorf("end: exit %d, want 0 quietly\nstderr:\n%s", code, stderr)
	}
}

// TestSessionInterruptStorm sends SIGINT every millisecond or so while calls come and
// go: whenever one lands (in a call, reading a request, writing the report), every
// call must still end with a done line, 0 or 130, and the runner must live on.
func TestSessionInterruptStorm(t *testing.T) {
	t.Parallel()
	s := startSession(t, DefaultPolicy(), false)
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rand.IntN(1000)) * time.Microsecond):
				_ = s.cmd.Process.Signal(syscall.SIGINT)
			}
		}
	}()
	counts := map[int]int{}
	for i := 0; i < 300 && !t.Failed(); i++ {
		c := s.call(fmt.Sprintf("v = %d\nprint(v)\nv", i))
		counts[c.Exit]++
		if c.Exit != 0 && c.Exit != ExitInterrupted {
			t.Errorf("call %d:\n%s", i, c)
		}
	}
	close(stop)
	<-stopped
	t.Logf("exit statuses: %v", counts)
	sessionStep{result: ptr("'alive'")}.check(t, s.call("'alive'"))
	if code, _ := s.end(); code != 0 {
		t.Errorf("end: exit %d, want 0", code)
	}
}

// TestSessionRequests covers the request channel's edge cases.
func TestSessionRequests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		request string // written after a call that sets x = 1
		exit    int    // the runner's
		stderr  string
	}{
		{"end of channel", "", 0, ""},
		{"garbage header", "garbage\n", ExitInternal, "moat: bad request: bad request header"},
		{"extra key", `{"id":1,"bytes":0,"more":1}` + "\n", ExitInternal, "moat: bad request: bad request header"},
		{"negative id", `{"id":-1,"bytes":0}` + "\n", ExitInternal, "moat: bad request: bad request id"},
		{"float size", `{"id":1,"bytes":1.0}` + "\n", ExitInternal, "moat: bad request: bad request size"},
		{"too large", `{"id":1,"bytes":100000000}` + "\n", ExitInternal, "moat: bad request: bad request size"},
		{"header too long", strings.Repeat(" ", 300), ExitInternal, "moat: bad request: request header longer than 200 bytes"},
		{"end inside a header", `{"id":1,"by`, ExitInternal, "moat: bad request: the request channel closed inside a request"},
		{"end inside the code", `{"id":1,"bytes":10}` + "\nx = ", ExitInternal, "moat: bad request: the request channel closed inside a request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startSession(t, DefaultPolicy(), false)
			if c := s.call("x = 1"); c.Exit != 0 {
				t.Fatalf("first call\n%s", c)
			}
			if _, err := s.req.Write([]byte(tc.request)); err != nil {
				t.Fatal(err)
			}
			code, stderr := s.end()
			if code != tc.exit || !strings.Contains(stderr, tc.stderr) || (tc.stderr == "" && stderr != "") {
				t.Errorf("exit %d, want %d; stderr %q, want %q", code, tc.exit, stderr, tc.stderr)
			}
		})
	}

	t.Run("code is not UTF-8", func(t *testing.T) {
		t.Parallel()
		s := startSession(t, DefaultPolicy(), false)
		id := box.NewCallID()
		if _, err := s.req.Write(box.EncodeCall("python", id, []byte("x = '\xff'"))); err != nil {
			t.Fatal(err)
		}
		sessionStep{exit: ExitInternal, stderr: []string{"moat: cannot read the code"}}.check(t, s.wait(id))
		sessionStep{result: ptr("2")}.check(t, s.call("1 + 1"))
	})
	t.Run("several requests in one write", func(t *testing.T) {
		t.Parallel()
		s := startSession(t, DefaultPolicy(), false)
		var all []byte
		var ids []int64
		for i := 0; i < 3; i++ {
			ids = append(ids, box.NewCallID())
			all = append(all, box.EncodeCall("python", ids[i], []byte(fmt.Sprintf("n = %d\nn * 2", i)))...)
		}
		if _, err := s.req.Write(all); err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			sessionStep{result: ptr(fmt.Sprint(i * 2))}.check(t, s.wait(id))
		}
	})
	t.Run("large code", func(t *testing.T) {
		t.Parallel()
		s := startSession(t, DefaultPolicy(), false)
		code := strings.Repeat("x = 1\n", box.MaxCodeBytes/6) + "x"
		sessionStep{result: ptr("1")}.check(t, s.call(code))
	})
}

// TestSessionProfiles runs a few calls under the other profiles and from runner.py
// itself: the runner's own steps (compiling each call after the hook is installed,
// the AST walk, error printing, rendering figures) must not be refused.
func TestSessionProfiles(t *testing.T) {
	off := DefaultPolicy()
	off.Mode = ModeOff
	steps := []sessionStep{
		{name: "define", code: "import json\ndata = json.loads('[1, 2, 3]')"},
		{name: "use", code: "sum(data)", result: ptr("6")},
		{name: "exception", code: "data[10]", exit: 1, stderr: []string{"IndexError: list index out of range"}},
		{name: "syntax error", code: "data[", exit: 1, stderr: []string{"SyntaxError"}},
		{name: "figure", code: "import matplotlib.pyplot as plt\nplt.plot(data)\nlen(plt.get_fignums())", result: ptr("1")},
		{name: "figures closed", code: "len(plt.get_fignums())", result: ptr("0")},
	}
	for _, tc := range []struct {
		name   string
		policy Policy
		source bool
	}{
		{"strict", StrictPolicy(), false},
		{"off", off, false},
		{"default from source", DefaultPolicy(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, startSession(t, tc.policy, tc.source), steps)
		})
	}
	t.Run("strict static violation", func(t *testing.T) {
		t.Parallel()
		s := startSession(t, StrictPolicy(), false)
		runSteps(t, s, []sessionStep{
			{name: "refused", code: "import socket", exit: ExitViolation, rules: []string{"python.import"}},
			{name: "still there", code: "1 + 1", result: ptr("2")},
		})
	})
}

// checkPNG fails unless d is a PNG in base64 of the given size.
func checkPNG(t *testing.T, d box.Display, width, height int) {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(d.Data)
	if err != nil || d.MIMEType != "image/png" || !bytes.HasPrefix(data, pngMagic) {
		t.Fatalf("display %s of %d bytes is not a PNG in base64: %v", d.MIMEType, len(d.Data), err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil || cfg.Width != width || cfg.Height != height {
		t.Errorf("PNG %dx%d (%v), want %dx%d", cfg.Width, cfg.Height, err, width, height)
	}
}

// TestDisplay: matplotlib figures left open come back as PNG, in a session after each
// call and in a single run after the program, at most MaxDisplays of them.
func TestDisplay(t *testing.T) {
	const plot = "import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3), dpi=50)\nplt.plot([1, 3, 2])\n"
	t.Run("session", func(t *testing.T) {
		t.Parallel()
		s := startSession(t, DefaultPolicy(), false)
		c := s.call(plot)
		if c.Exit != 0 || len(c.Report.Display) != 1 {
			t.Fatalf("want one display\n%s", c)
		}
		checkPNG(t, c.Report.Display[0], 200, 150)
		c = s.call("len(plt.get_fignums())")
		if c.Exit != 0 || len(c.Report.Display) != 0 || c.Report.Result == nil || *c.Report.Result != "0" {
			t.Errorf("want the figure closed after its call\n%s", c)
		}
		c = s.call("for i in range(10):\n    plt.figure(figsize=(1, 1), dpi=10)\n")
		if len(c.Report.Display) != MaxDisplays || !strings.Contains(c.Stderr, "moat: 2 more figures not shown") {
			t.Errorf("want %d displays and a note\n%s", MaxDisplays, c)
		}
		c = s.call(plot + "1/0")
		if c.Exit != 1 || len(c.Report.Display) != 1 {
			t.Errorf("want the figure of a failed call\n%s", c)
		}
		c = s.call("plt.figure()\nraise SystemExit(2)")
		if c.Exit != 2 || len(c.Report.Display) != 1 {
			t.Errorf("want the figure of a call that raised SystemExit\n%s", c)
		}
		c = s.call("fig = plt.figure()\nfig.savefig = lambda *a, **k: 1/0\nplt.figure()\n")
		if c.Exit != 0 || len(c.Report.Display) != 1 || !strings.Contains(c.Stderr, "could not be rendered: ZeroDivisionError") {
			t.Errorf("want one figure rendered and a note for the broken one\n%s", c)
		}
	})
	t.Run("session strict", func(t *testing.T) {
		t.Parallel()
		s := startSession(t, StrictPolicy(), false)
		c := s.call(plot)
		if c.Exit != 0 || len(c.Report.Display) != 1 || len(c.Report.Violations) != 0 {
			t.Fatalf("want one display\n%s", c)
		}
		checkPNG(t, c.Report.Display[0], 200, 150)
	})
	for _, p := range []Policy{DefaultPolicy(), StrictPolicy()} {
		t.Run("single run "+p.Profile, func(t *testing.T) {
			t.Parallel()
			o := runCode(t, p, plot+"'done'", runOpts{})
			if o.Exit != 0 || len(o.Report.Display) != 1 || o.Report.Result == nil {
				t.Fatalf("want a result and one display\n%s", o)
			}
			checkPNG(t, o.Report.Display[0], 200, 150)
		})
	}
	t.Run("single run SystemExit", func(t *testing.T) {
		t.Parallel()
		o := runCode(t, DefaultPolicy(), plot+"raise SystemExit(5)", runOpts{})
		if o.Exit != 5 || len(o.Report.Display) != 1 {
			t.Errorf("want status 5 and one display\n%s", o)
		}
	})
	t.Run("single run closed figure", func(t *testing.T) {
		t.Parallel()
		o := runCode(t, DefaultPolicy(), plot+"plt.close('all')", runOpts{})
		if o.Exit != 0 || len(o.Report.Display) != 0 {
			t.Errorf("want no display\n%s", o)
		}
	})
	t.Run("single run violation", func(t *testing.T) {
		t.Parallel()
		o := runCode(t, DefaultPolicy(), plot+"import os\ngetattr(os, ''.join(['sys', 'tem']))('true')", runOpts{})
		if o.Exit != ExitViolation || len(o.Report.Display) != 0 {
			t.Errorf("want a violation and no display\n%s", o)
		}
	})
}

//go:build linux

// Package contracttest holds the tests every backend built on package box/container
// passes (docker under runc and runsc, gvisor): the native backend's contract, run on
// the backend's own boxes, with host-side checks that no box is left.
package contracttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/policy/python"
)

// Harness is a backend under test, and how to see and kill its boxes from the host.
type Harness struct {
	Backend *native.Backend
	// Name is the backend's Name().
	Name string
	// Isolation lists entries every result's isolation must have.
	Isolation []string
	// Boxes lists the boxes of this process that exist on the host, running or not.
	Boxes func(t *testing.T) []string
	// Kill kills a box from outside moat (docker kill, a SIGKILL to its processes).
	Kill func(t *testing.T, id string)
	// GVisorKernel is set when the boxes run on gVisor's kernel, where an OOM kill
	// takes the whole sandbox.
	GVisorKernel bool
}

// All runs every test of the contract.
func All(t *testing.T, h *Harness) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, *Harness)
	}{
		{"Run", Run}, {"FilesAndReport", FilesAndReport}, {"Limits", Limits}, {"Session", Session},
		{"CodeKillsAgent", CodeKillsAgent}, {"SessionMemoryLimit", SessionMemoryLimit}, {"KilledFromOutside", KilledFromOutside}, {"WorkspaceFull", WorkspaceFull},
		{"Usage", Usage},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, h) })
	}
}

// requireNoBoxes fails when a box of this process is left.
func (h *Harness) requireNoBoxes(t *testing.T) {
	t.Helper()
	if ids := h.Boxes(t); len(ids) > 0 {
		t.Errorf("boxes left behind: %v", ids)
	}
}

// awaitBox returns the one box of this process, once it exists.
func (h *Harness) awaitBox(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ids := h.Boxes(t); len(ids) == 1 {
			return ids[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no box appeared")
	return ""
}

func runBox(t *testing.T, b *native.Backend, spec *box.Spec) *box.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := b.Run(ctx, spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func clip(s string) string {
	if len(s) > 100 {
		return fmt.Sprintf("%s...(%d bytes)", s[:100], len(s))
	}
	return s
}

// PythonSession is a Python session as the engine starts one: the policy runner in
// session mode, with the default policy.
func PythonSession() *box.SessionSpec {
	return &box.SessionSpec{
		Language:    "python",
		Interpreter: python.SessionInterpreter(python.RunnerPath),
		Support:     python.Support(python.DefaultPolicy(), nil),
	}
}

// Run runs code of both languages: output, exit codes, the box user, no network,
// big output, orphans.
func Run(t *testing.T, h *Harness) {
	b := h.Backend
	if b.Name() != h.Name {
		t.Errorf("Name() = %q, want %q", b.Name(), h.Name)
	}
	big := strings.Repeat("0123456789abcdef", 40<<10) // 640 KiB: past any pipe and window
	cases := []struct {
		name           string
		lang, code     string
		stdout, stderr string
		status         box.Status
		exit           int
	}{
		{"python print(1)", "python", "print(1)", "1\n", "", box.StatusOK, 0},
		{"bash", "bash", "echo hi; echo err >&2; echo $((6*7))", "hi\n42\n", "err\n", box.StatusOK, 0},
		{"python exit code", "python", "import sys; print('out'); sys.exit(3)", "out\n", "", box.StatusError, 3},
		{"bash exit code", "bash", "exit 7", "", "", box.StatusError, 7},
		{"python exception", "python", "raise ValueError('nope')", "", "ValueError: nope", box.StatusError, 1},
		{"runs as 65534 in /workspace", "python", "import os; print(os.getuid(), os.getcwd())", "65534 /workspace\n", "", box.StatusOK, 0},
		{"no network", "python", "import socket\ntry:\n  socket.create_connection(('10.0.0.1', 80), timeout=2)\nexcept OSError as e: print('refused')", "refused\n", "", box.StatusOK, 0},
		{"big output", "python", "import sys; sys.stdout.write('0123456789abcdef' * (40 << 10))", big, "", box.StatusOK, 0},
		{"orphans are killed, output still drained", "bash", "(sleep 100 &); echo done", "done\n", "", box.StatusOK, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := runBox(t, b, &box.Spec{Language: c.lang, Code: []byte(c.code)})
			if res.Status != c.status || res.ExitCode != c.exit || res.Stdout != c.stdout || !strings.Contains(res.Stderr, c.stderr) {
				t.Errorf("got %s/%d stdout %q stderr %q; want %s/%d stdout %q stderr containing %q",
					res.Status, res.ExitCode, clip(res.Stdout), res.Stderr, c.status, c.exit, clip(c.stdout), c.stderr)
			}
			for _, want := range h.Isolation {
				if !slices.Contains(res.Isolation, want) {
					t.Errorf("isolation %v lacks %s", res.Isolation, want)
				}
			}
		})
	}
	h.requireNoBoxes(t)
}

// FilesAndReport copies files in (bigger than a window and a pipe) and reads the
// report channel.
func FilesAndReport(t *testing.T, h *Harness) {
	b := h.Backend
	// A file bigger than a window and a pipe: it waits for init while the spec
	// goes by on the sync channel.
	data := bytes.Repeat([]byte("moat file\n"), 200<<10) // 2000 KiB
	sum := sha256.Sum256(data)
	path := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	small, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	code := `
import hashlib, os
d = open("data/in.txt", "rb").read()
print(len(d), hashlib.sha256(d).hexdigest())
print(os.path.getsize("copy.txt"))
import sys; sys.stdout.write("x" * 300000); sys.stdout.flush()
os.write(3, b'{"report": 1}\n')
`
	res := runBox(t, b, &box.Spec{
		Language:    "python",
		Interpreter: []string{"/usr/bin/python3", "-u"},
		Code:        []byte(code),
		Files:       []box.File{{Dest: "data/in.txt", Src: f}, {Dest: "copy.txt", Src: small}},
		Report:      true,
	})
	want := fmt.Sprintf("%d %s\n%d\n%s", len(data), hex.EncodeToString(sum[:]), len(data), strings.Repeat("x", 300000))
	if res.Status != box.StatusOK || res.Stdout != want {
		t.Fatalf("status %s stdout %q stderr %q", res.Status, clip(res.Stdout), res.Stderr)
	}
	if string(res.Report) != `{"report": 1}`+"\n" {
		t.Errorf("report %q", res.Report)
	}
}

// Limits: the timeout, the memory limit (status memory_limit) and the output cap.
func Limits(t *testing.T, h *Harness) {
	b := h.Backend
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res := runBox(t, b, &box.Spec{
			Language: "python",
			Code:     []byte("import time\nprint('start', flush=True)\ntime.sleep(60)"),
			// Long enough for a gVisor sandbox to boot on a loaded machine (the
			// timeout counts from the box's start), so the code's output is seen.
			Limits: box.Limits{Timeout: 5 * time.Second},
		})
		if res.Status != box.StatusTimeout || res.Stdout != "start\n" {
			t.Errorf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("took %v", d)
		}
		h.requireNoBoxes(t)
	})
	t.Run("memory", func(t *testing.T) {
		res := runBox(t, b, &box.Spec{
			Language: "python",
			Code:     []byte("x = bytearray(512 << 20)\nprint(len(x))"),
			Limits:   box.Limits{Memory: 64 << 20},
		})
		if res.Status != box.StatusMemoryLimit {
			t.Errorf("status %s exit %d stdout %q stderr %q", res.Status, res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	t.Run("output flood", func(t *testing.T) {
		start := time.Now()
		res := runBox(t, b, &box.Spec{
			Language: "python",
			Code:     []byte("while True:\n    print('x' * 1000)"),
			Limits:   box.Limits{Output: 64 << 10, Timeout: 30 * time.Second},
		})
		if res.Status != box.StatusOutputLimit || !res.Truncated {
			t.Errorf("status %s truncated %v, stdout %d bytes", res.Status, res.Truncated, len(res.Stdout))
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("took %v", d)
		}
	})
	h.requireNoBoxes(t)
}

// Session keeps state across calls, moves files in and out, and removes its box on
// Close.
func Session(t *testing.T, h *Harness) {
	b := h.Backend
	ctx := context.Background()
	s, err := b.StartSession(ctx, PythonSession())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exec := func(code string) *box.Result {
		t.Helper()
		res, err := s.Exec(ctx, &box.Call{Code: []byte(code), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("Exec %q: %v", code, err)
		}
		return res
	}
	if res := exec("x = 41"); res.Status != box.StatusOK {
		t.Fatalf("x = 41: %+v", res)
	}
	if res := exec("print(x + 1)"); res.Status != box.StatusOK || res.Stdout != "42\n" {
		t.Fatalf("print(x + 1): status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	// A call's output, however large, is all the call's: it reaches the host
	// before the call's end does.
	for i := range 3 {
		res := exec("import sys; sys.stdout.write('y' * 700000); print(end='', flush=True)")
		if len(res.Stdout) != 700000 {
			t.Fatalf("round %d: %d bytes of output, want 700000", i, len(res.Stdout))
		}
	}

	payload := bytes.Repeat([]byte("session file\n"), 50<<10)
	if err := s.PutFile(ctx, "dir/f.txt", bytes.NewReader(payload), int64(len(payload))); err != nil {
		t.Fatal(err)
	}
	if res := exec("print(len(open('dir/f.txt').read()))"); res.Stdout != fmt.Sprintf("%d\n", len(payload)) {
		t.Fatalf("the code read %q", res.Stdout)
	}
	exec("open('made.txt', 'w').write('made in the box')")
	var got bytes.Buffer
	if n, err := s.GetFile(ctx, "made.txt", &got, 1<<20); err != nil || n != 15 || got.String() != "made in the box" {
		t.Fatalf("GetFile: %d, %v, %q", n, err, got.String())
	}
	got.Reset()
	if _, err := s.GetFile(ctx, "dir/f.txt", &got, 1<<20); err != nil || !bytes.Equal(got.Bytes(), payload) {
		t.Fatalf("GetFile of the put file: %v, %d bytes", err, got.Len())
	}
	list, err := s.ListFiles(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fi := range list {
		names = append(names, fi.Path)
	}
	for _, want := range []string{"dir", "dir/f.txt", "made.txt"} {
		if !slices.Contains(names, want) {
			t.Errorf("ListFiles: %v lacks %s", names, want)
		}
	}
	if err := s.RemoveFile(ctx, "made.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetFile(ctx, "made.txt", &got, 1<<20); !errors.Is(err, box.ErrFileNotFound) {
		t.Fatalf("GetFile of a removed file: %v", err)
	}
	if res := exec("print(x)"); res.Stdout != "41\n" {
		t.Fatalf("state after file operations: %q", res.Stdout)
	}
	if len(h.Boxes(t)) != 1 {
		t.Errorf("want one box while the session lives")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Err(), box.ErrSessionClosed) {
		t.Errorf("Err after Close: %v", s.Err())
	}
	h.requireNoBoxes(t)
}

// KilledFromOutside kills a run's and a session's box behind moat's back: Run ends
// at once, the session is lost, nothing is left.
func KilledFromOutside(t *testing.T, h *Harness) {
	b := h.Backend
	t.Run("run", func(t *testing.T) {
		type out struct {
			res *box.Result
			err error
		}
		done := make(chan out, 1)
		go func() {
			res, err := b.Run(context.Background(), &box.Spec{
				Language: "python",
				Code:     []byte("import time\nprint('up', flush=True)\ntime.sleep(60)"),
				Limits:   box.Limits{Timeout: time.Minute},
			})
			done <- out{res, err}
		}()
		id := h.awaitBox(t)
		time.Sleep(500 * time.Millisecond) // let the code start
		h.Kill(t, id)
		killed := time.Now()
		select {
		case o := <-done:
			if o.err == nil && o.res.Status != box.StatusKilled {
				t.Errorf("status %s, want killed or an error", o.res.Status)
			}
			t.Logf("ended %v after the kill: %v %v", time.Since(killed).Round(time.Millisecond), o.err, o.res)
		case <-time.After(15 * time.Second):
			t.Fatal("Run still running 15s after its box was killed")
		}
		h.requireNoBoxes(t)
	})
	t.Run("session", func(t *testing.T) {
		s, err := b.StartSession(context.Background(), PythonSession())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		id := h.awaitBox(t)
		h.Kill(t, id)
		select {
		case <-s.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("session still alive 15s after its box was killed")
		}
		if !errors.Is(s.Err(), box.ErrSessionLost) {
			t.Errorf("Err: %v, want ErrSessionLost", s.Err())
		}
		if _, err := s.Exec(context.Background(), &box.Call{Code: []byte("print(1)")}); !errors.Is(err, box.ErrSessionLost) {
			t.Errorf("Exec on a lost session: %v", err)
		}
		h.requireNoBoxes(t)
	})
}

// WorkspaceFull fills the workspace past its disk limit: the code gets
// ENOSPC as a Python OSError and the box's result comes back, its box removed;
// a session's PutFile past the free space is ErrWorkspaceFull, and the session lives
// on.
func WorkspaceFull(t *testing.T, h *Harness) {
	const disk = 8 << 20
	b := h.Backend
	t.Run("run", func(t *testing.T) {
		res := runBox(t, b, &box.Spec{
			Language: "python",
			Code: []byte("n = 0\nwith open('big', 'wb') as f:\n" +
				"    while True:\n        f.write(b'x' * (1 << 20)); f.flush(); n += 1"),
			Limits: box.Limits{Disk: disk, Timeout: time.Minute},
		})
		if res.Status != box.StatusError || res.ExitCode == 0 {
			t.Errorf("status %s exit %d, want error", res.Status, res.ExitCode)
		}
		if !strings.Contains(res.Stderr, "OSError") || !strings.Contains(res.Stderr, "No space left on device") {
			t.Errorf("stderr %q lacks the OSError of ENOSPC", res.Stderr)
		}
		h.requireNoBoxes(t)
	})
	t.Run("session", func(t *testing.T) {
		ctx := context.Background()
		spec := PythonSession()
		spec.Limits = box.Limits{Disk: disk}
		s, err := b.StartSession(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		big := bytes.Repeat([]byte("x"), 2*disk)
		err = s.PutFile(ctx, "big.bin", bytes.NewReader(big), int64(len(big)))
		if !errors.Is(err, box.ErrWorkspaceFull) {
			t.Fatalf("PutFile of %d bytes into a %d-byte workspace: %v, want ErrWorkspaceFull", len(big), disk, err)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("session ended after the full workspace: %v", err)
		}
		small := []byte("still room")
		if err := s.PutFile(ctx, "small.txt", bytes.NewReader(small), int64(len(small))); err != nil {
			t.Fatalf("PutFile of a small file after the full one: %v", err)
		}
		res, err := s.Exec(ctx, &box.Call{Code: []byte("print(open('small.txt').read())"), Timeout: 20 * time.Second})
		if err != nil || res.Status != box.StatusOK || res.Stdout != "still room\n" {
			t.Fatalf("the session after the full workspace: %v %+v", err, res)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		h.requireNoBoxes(t)
	})
}

// SessionMemoryLimit runs session calls past the session's memory limit.
//
// The host's kernel (docker on runc): the OOM killer takes the interpreter, the call's status is memory_limit and
// the session lives on with a fresh interpreter. Each OOM is told: the count comes
// from the container's cgroup (oom_kill), which rises with every kill, not from the
// daemon's OOMKilled mark, which stays set (and which dockerd 20.10 sets only when
// the container exits). A SIGKILL that is not the OOM killer's stays killed.
//
// gVisor's kernel (docker on runsc, gvisor): the host's OOM killer takes gVisor's sandbox, which is charged for the
// code's memory, and with it the whole box: the call fails with ErrSessionLost,
// saying the container was killed at its memory limit. gVisor kills no process of
// its own at the limit, so no call can tell memory_limit and live on.
func SessionMemoryLimit(t *testing.T, h *Harness) {
	const memory = 96 << 20
	bomb := "b = []\nwhile True:\n    b.append(bytearray(8 << 20))"
	b := h.Backend
	ctx := context.Background()
	spec := PythonSession()
	spec.Limits = box.Limits{Memory: memory}
	// Policy off: the code may SIGKILL its own interpreter.
	pol := python.DefaultPolicy()
	pol.Mode = python.ModeOff
	spec.Support = python.Support(pol, nil)
	s, err := b.StartSession(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exec := func(code string) (*box.Result, error) {
		return s.Exec(ctx, &box.Call{Code: []byte(code), Timeout: time.Minute})
	}
	if res, err := exec("x = 41"); err != nil || res.Status != box.StatusOK {
		t.Fatalf("x = 41: %v %+v", err, res)
	}
	if h.GVisorKernel {
		res, err := exec(bomb)
		if !errors.Is(err, box.ErrSessionLost) || !strings.Contains(err.Error(), "memory limit") {
			t.Fatalf("a memory bomb under runsc: %v %+v, want ErrSessionLost at the memory limit", err, res)
		}
		select {
		case <-s.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("the session outlived its box by 15s")
		}
		h.requireNoBoxes(t)
		return
	}
	for i := range 2 {
		res, err := exec(bomb)
		if err != nil {
			t.Fatalf("memory bomb %d: %v", i+1, err)
		}
		if res.Status != box.StatusMemoryLimit || !strings.Contains(res.Stderr, "killed at the memory limit") {
			t.Errorf("memory bomb %d: status %s exit %d stderr %q, want %s", i+1, res.Status, res.ExitCode, res.Stderr, box.StatusMemoryLimit)
		}
		if res, err := exec("print(1)"); err != nil || res.Status != box.StatusOK || res.Stdout != "1\n" {
			t.Fatalf("the call after memory bomb %d: %v %+v", i+1, err, res)
		}
	}
	res, err := exec("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
	if err != nil || res.Status != box.StatusKilled {
		t.Errorf("a SIGKILL after the OOMs: %v, status %s, want %s", err, res.Status, box.StatusKilled)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	h.requireNoBoxes(t)
}

// CodeKillsAgent: code that SIGKILLs its box's PID 1 (moat's agent) or every process
// it may signal ends, at worst, its own box: a result with status ok (the host's
// kernel drops a SIGKILL to a pid namespace's init) or killed, never a moat failure,
// and nothing is left. Under gVisor's kernel, which would deliver it, the agent and
// init are another user than the code (container.RootCaps): the kill is refused and
// the code goes on.
func CodeKillsAgent(t *testing.T, h *Harness) {
	for _, code := range []string{
		"import os, signal, time\ntry: os.kill(1, signal.SIGKILL)\nexcept OSError: pass\ntime.sleep(1)\nprint('alive')",
		"import os, signal, time\ntry: os.kill(-1, signal.SIGKILL)\nexcept OSError: pass\ntime.sleep(1)\nprint('alive')",
	} {
		res := runBox(t, h.Backend, &box.Spec{Language: "python", Code: []byte(code), Limits: box.Limits{Timeout: 30 * time.Second}})
		switch {
		case res.Status == box.StatusOK && res.Stdout == "alive\n":
		case res.Status == box.StatusKilled && !h.GVisorKernel:
		default:
			t.Errorf("%q: status %s stdout %q stderr %q, want ok (alive) or killed", code, res.Status, res.Stdout, res.Stderr)
		}
		h.requireNoBoxes(t)
	}
}

// Usage: the result's usage counts the CPU of everything the code ran, a process it
// left busy in the background and killed without waiting for included (what the
// code's own wait4 account misses), in a run and in a session's call, and the peak
// memory.
func Usage(t *testing.T, h *Harness) {
	// A fixed amount of work, not a busy second: CPU time is what the box must
	// report whatever else the host runs. The same work on the host, timed by the
	// kernel, is what it should come to. It runs in an orphan (a double fork): the
	// box's usage is all its processes', not only what init waited for.
	const work = `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`
	const busy = "( (" + work + "; touch /tmp/done) & ); while [ ! -e /tmp/done ]; do sleep 0.05; done"
	host := exec.Command("/bin/bash", "-c", work)
	if err := host.Run(); err != nil {
		t.Fatal(err)
	}
	want := (host.ProcessState.UserTime() + host.ProcessState.SystemTime()) * 8 / 10
	check := func(t *testing.T, res *box.Result) {
		t.Helper()
		if res.Status != box.StatusOK || time.Duration(res.Usage.CPUMS)*time.Millisecond < want || res.Usage.PeakMemoryBytes <= 0 {
			t.Errorf("an orphan's fixed work: status %s, usage %+v; want at least %d ms of CPU (80%% of the same work on the host) and a peak", res.Status, res.Usage, want.Milliseconds())
		}
	}
	t.Run("run", func(t *testing.T) {
		check(t, runBox(t, h.Backend, &box.Spec{Language: "bash", Code: []byte(busy)}))
	})
	t.Run("session", func(t *testing.T) {
		s, err := h.Backend.StartSession(context.Background(), &box.SessionSpec{Language: "bash"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.Exec(context.Background(), &box.Call{Code: []byte(busy), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		check(t, res)
	})
	h.requireNoBoxes(t)
}

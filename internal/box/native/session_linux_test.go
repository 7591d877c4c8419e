package native

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/childproc"
	"github.com/moat-sandbox/moat/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as the box's init (it re-executes itself).
func TestMain(m *testing.M) {
	childproc.Dispatch()
	os.Exit(m.Run())
}

func startBash(t *testing.T, lim box.Limits) box.Session {
	t.Helper()
	testutil.RequireRoot(t)
	b := &Backend{}
	s, err := b.StartSession(context.Background(), &box.SessionSpec{Language: "bash", Limits: lim})
	if err != nil {
		t.Fatalf("start session: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func call(t *testing.T, s box.Session, code string, timeout time.Duration) *box.Result {
	t.Helper()
	res, err := s.Exec(context.Background(), &box.Call{Code: []byte(code), Timeout: timeout})
	if err != nil {
		t.Fatalf("exec %q: %v", code, err)
	}
	return res
}

func TestBashSessionKeepsState(t *testing.T) {
	s := startBash(t, box.Limits{})
	steps := []struct {
		code           string
		stdout, stderr string
		exit           int
	}{
		{code: "mkdir -p /workspace/d && cd /workspace/d && export GREETING=hello && f() { echo \"fn $1\"; }; false", exit: 1},
		{code: "pwd; echo $GREETING; f x; declare -A m; m[k]=v", stdout: "/workspace/d\nhello\nfn x\n"},
		{code: "echo ${m[k]}; echo err >&2; exit_code() { return 7; }; exit_code", stdout: "v\n", stderr: "err\n", exit: 7},
		// Output that looks like the protocol is only output.
		{code: `echo '{"kind":"done","id":1,"exit":0}'; printf '{"kind":"ready"}\n'`, stdout: "{\"kind\":\"done\",\"id\":1,\"exit\":0}\n{\"kind\":\"ready\"}\n"},
		// The code's stdin is empty, not the request channel.
		{code: "cat; echo after", stdout: "after\n"},
	}
	for i, st := range steps {
		res := call(t, s, st.code, 10*time.Second)
		if res.Stdout != st.stdout || res.Stderr != st.stderr || res.ExitCode != st.exit {
			t.Fatalf("step %d %q: got exit %d stdout %q stderr %q; want exit %d stdout %q stderr %q",
				i, st.code, res.ExitCode, res.Stdout, res.Stderr, st.exit, st.stdout, st.stderr)
		}
	}
}

func TestBashSessionInterrupt(t *testing.T) {
	s := startBash(t, box.Limits{})
	call(t, s, "export KEEP=1", 5*time.Second)
	for _, code := range []string{"sleep 100; echo after", "while :; do :; done"} {
		start := time.Now()
		res := call(t, s, code, time.Second)
		if res.Status != box.StatusTimeout || strings.Contains(res.Stdout, "after") {
			t.Fatalf("%q: status %s stdout %q, want timeout", code, res.Status, res.Stdout)
		}
		if d := time.Since(start); d > time.Second+box.InterruptGrace {
			t.Fatalf("%q: took %s", code, d)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("%q: the session ended: %v", code, err)
		}
		if res := call(t, s, "echo $KEEP", 5*time.Second); res.Stdout != "1\n" {
			t.Fatalf("after interrupting %q: stdout %q, want the session's state", code, res.Stdout)
		}
	}
}

func TestBashSessionStuckInterruptLosesSession(t *testing.T) {
	s := startBash(t, box.Limits{})
	res := call(t, s, "trap '' INT; while :; do :; done", 500*time.Millisecond)
	if res.Status != box.StatusTimeout || !strings.Contains(res.Stderr, "state is lost") {
		t.Fatalf("status %s stderr %q, want a timeout that lost the session", res.Status, res.Stderr)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session's box is still there")
	}
	if _, err := s.Exec(context.Background(), &box.Call{Code: []byte("true")}); !errors.Is(err, box.ErrSessionLost) {
		t.Fatalf("a call after the loss: %v, want ErrSessionLost", err)
	}
}

func TestBashSessionExitRestartsShellKeepsFiles(t *testing.T) {
	s := startBash(t, box.Limits{})
	call(t, s, "echo data > /workspace/kept; X=1", 5*time.Second)
	res := call(t, s, "exit 3", 5*time.Second)
	if res.ExitCode != 3 || res.Status != box.StatusError || len(res.Warnings) == 0 {
		t.Fatalf("exit 3: status %s exit %d warnings %q", res.Status, res.ExitCode, res.Warnings)
	}
	res = call(t, s, "cat /workspace/kept; echo \"x=${X:-unset}\"", 5*time.Second)
	if res.Stdout != "data\nx=unset\n" || res.Status != box.StatusOK {
		t.Fatalf("after the restart: status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
}

func TestSessionFiles(t *testing.T) {
	s := startBash(t, box.Limits{})
	ctx := context.Background()
	data := bytes.Repeat([]byte{0, 1, 2, 255, '\n'}, 200_000) // 1 MB, binary
	if err := s.PutFile(ctx, "in/data.bin", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put: %v", err)
	}
	res := call(t, s, "stat -c '%s %u' /workspace/in/data.bin; cp /workspace/in/data.bin /workspace/out.bin; mkfifo /workspace/fifo; ln -s /etc/shadow /workspace/shadow; ln -s ../../../etc /workspace/up; ln -s in /workspace/inlink", 5*time.Second)
	if res.Stdout != "1000000 65534\n" {
		t.Fatalf("the box sees %q (stderr %q), want the file owned by its user", res.Stdout, res.Stderr)
	}
	var got bytes.Buffer
	if n, err := s.GetFile(ctx, "out.bin", &got, 10<<20); err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("get: n=%d err=%v equal=%v", n, err, bytes.Equal(got.Bytes(), data))
	}
	got.Reset()
	if _, err := s.GetFile(ctx, "inlink/data.bin", &got, 10<<20); err != nil || got.Len() != len(data) {
		t.Fatalf("get through a symlink inside the workspace: %v", err)
	}
	if _, err := s.GetFile(ctx, "out.bin", &got, 100); !errors.Is(err, box.ErrFileTooLarge) {
		t.Fatalf("get over max: %v", err)
	}
	list, err := s.ListFiles(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]box.FileInfo{}
	for _, f := range list {
		paths[f.Path] = f
	}
	for _, p := range []string{"in", "in/data.bin", "out.bin", "fifo", "shadow", "up"} {
		if _, ok := paths[p]; !ok {
			t.Fatalf("listing lacks %s: %v", p, list)
		}
	}
	if paths["in/data.bin"].Size != int64(len(data)) || !paths["in"].Dir {
		t.Fatalf("listing: %+v", list)
	}
	attacks := []struct {
		path string
		want error
	}{
		{"../../etc/passwd", box.ErrBadPath},
		{"/etc/passwd", box.ErrBadPath},
		{"in/../../etc/passwd", box.ErrBadPath},
		{"shadow", box.ErrBadPath},
		{"up/passwd", box.ErrBadPath},
		{"fifo", box.ErrNotRegular},
		{"in", box.ErrNotRegular},
		{"missing", box.ErrFileNotFound},
		{"a\x00b", box.ErrBadPath},
	}
	for _, a := range attacks {
		got.Reset()
		if _, err := s.GetFile(ctx, a.path, &got, 10<<20); !errors.Is(err, a.want) || got.Len() != 0 {
			t.Errorf("get %q: %v (%d bytes), want %v", a.path, err, got.Len(), a.want)
		}
	}
	// Uploads through a planted symlink replace the link, never write its target.
	if err := s.PutFile(ctx, "shadow", strings.NewReader("x"), 1); err != nil {
		t.Fatalf("put over a symlink: %v", err)
	}
	if err := s.PutFile(ctx, "up/evil", strings.NewReader("x"), 1); !errors.Is(err, box.ErrBadPath) {
		t.Fatalf("put through a symlinked directory: %v", err)
	}
	// A short upload changes nothing.
	if err := s.PutFile(ctx, "out.bin", strings.NewReader("short"), 100); err == nil {
		t.Fatal("a short upload succeeded")
	}
	if err := s.RemoveFile(ctx, "out.bin"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if err := s.RemoveFile(ctx, "out.bin"); !errors.Is(err, box.ErrFileNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	if err := s.RemoveFile(ctx, "in"); !errors.Is(err, box.ErrFileConflict) {
		t.Fatalf("remove a non-empty directory: %v", err)
	}
	res = call(t, s, "ls -A /workspace | sort | tr '\\n' ' '; readlink /workspace/shadow || echo notlink", 5*time.Second)
	if res.Stdout != "fifo in inlink shadow up notlink\n" {
		t.Fatalf("workspace afterwards: %q %q", res.Stdout, res.Stderr)
	}
	// The host's files are untouched.
	if b, err := os.ReadFile("/etc/shadow"); err != nil || bytes.Equal(b, []byte("x")) {
		t.Fatalf("host /etc/shadow: %v", err)
	}
}

func TestSessionCloseLeavesNothing(t *testing.T) {
	s := startBash(t, box.Limits{})
	call(t, s, "sleep 1000 & sleep 1000 & true", 5*time.Second)
	ns := s.(*session)
	cg := ns.bp.proc.(*nsProc).cg
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if cg == nil {
		testutil.SkipOrFail(t, "no cgroups on this host")
	}
	for _, d := range cg.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("cgroup %s still exists: %v", d, err)
		}
	}
	if err := s.Err(); !errors.Is(err, box.ErrSessionClosed) {
		t.Fatalf("Err after Close: %v", err)
	}
}

// TestSessionInterpreterKilledOnFirstCall: the interpreter's end is noticed however
// early it comes (the reaper may have found no child yet when the session began).
func TestSessionInterpreterKilledOnFirstCall(t *testing.T) {
	for i := 0; i < 5; i++ {
		s := startBash(t, box.Limits{})
		start := time.Now()
		res := call(t, s, "kill -9 $$", 20*time.Second)
		if res.Status != box.StatusKilled || time.Since(start) > 5*time.Second {
			t.Fatalf("session %d: %s after %s, want killed at once", i, res.Status, time.Since(start))
		}
		if res := call(t, s, "echo again", 5*time.Second); res.Stdout != "again\n" {
			t.Fatalf("session %d after the kill: %+v", i, res)
		}
		_ = s.Close()
	}
}

// TestNonblockingFD: the session's pipes are read until EAGAIN, so nonblockingFD
// hands out their descriptors non-blocking, whether os.Pipe made them so or not,
// and leaves them to their os.File.
func TestNonblockingFD(t *testing.T) {
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	p := make([]int, 2)
	if err := unix.Pipe2(p, unix.O_CLOEXEC); err != nil { // blocking
		t.Fatal(err)
	}
	r2 := os.NewFile(uintptr(p[0]), "blocking")
	defer unix.Close(p[1])
	for _, r := range []*os.File{r1, r2} {
		fd, err := nonblockingFD(r)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			var b [1]byte
			_, err := unix.Read(fd, b[:])
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, unix.EAGAIN) {
				t.Errorf("%s: read of an empty pipe: %v, want EAGAIN", r.Name(), err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: read of an empty pipe blocked", r.Name())
		}
		if err := r.Close(); err != nil {
			t.Errorf("%s: the os.File does not own its descriptor any more: %v", r.Name(), err)
		}
	}
}

//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// takeInotify takes every inotify instance the kernel gives the box, says how many,
// and holds them until the box is killed. The blank lines after the count push it
// through the output filter, which holds back the last 16 KiB of a live stream.
const takeInotify = `
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 4096 and libc.inotify_init1(0) >= 0:
    n += 1
print("took", n)
print("\n" * 40000, flush=True)
time.sleep(120)
`

// inotifyLimit returns the host's fs.inotify.max_user_instances, and skips the test
// when it is below least or more than a box could take.
func inotifyLimit(t *testing.T, least int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit < least || limit > 4096 {
		t.Skipf("fs.inotify.max_user_instances is %q: fewer than %d, or more than a box could take", b, least)
	}
	return limit
}

// holdInotify starts a cold native box, as cred's user when cred is not nil, that
// takes every inotify instance the kernel gives it and holds them (takeInotify), and
// returns the line it printed: "took N". The box is stopped, and the host checked
// clean, when the test ends.
func holdInotify(t *testing.T, cred *syscall.Credential) string {
	t.Helper()
	before := snapshotHost(t)
	hog := exec.Command(testutil.MoatBinary(t), "run", "--backend", "native", "--profile", "open", "--timeout", "60s", "--lang", "python", "-")
	var extraUIDs []int
	if cred != nil {
		hog.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		hog.Dir = "/"
		hog.Env = append(os.Environ(), "XDG_DATA_HOME="+userDataDir(t, cred))
		extraUIDs = append(extraUIDs, int(cred.Uid))
	}
	hog.Stdin = strings.NewReader(takeInotify)
	var hogErr bytes.Buffer
	hog.Stderr = &hogErr
	out, err := hog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hog.Process.Signal(syscall.SIGTERM)
		_ = hog.Wait()
		checkHostClean(t, before, extraUIDs...)
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "took ") {
			t.Fatalf("the box holding inotify instances: %q\n%s", l, hogErr.String())
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("the box holding inotify instances did not report in 30 s\n%s", hogErr.String())
	}
	return ""
}

// TestBoxQuotasApart: per-user kernel quotas that a box spends (here all the inotify
// instances fs.inotify.max_user_instances allows) are its own. While one native box,
// made by one moat run, holds all of them, a box of another moat run still gets one.
// Each box's user namespace has an owner uid of its own, to which the kernel charges
// the box's use; two moat processes once gave their first boxes the same owner, and
// the second box got EMFILE. (The docker backend runs every box as the host's uid
// 65534, so there these quotas are shared: see README, Backends.)
func TestBoxQuotasApart(t *testing.T) {
	testutil.RequireRoot(t)
	limit := inotifyLimit(t, 1)
	if l := holdInotify(t, nil); l != "took "+strconv.Itoa(limit)+"\n" {
		t.Fatalf("the first box: %q, want it to take all %d instances its owner may have", l, limit)
	}

	o := moatExec(t, `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
print("inotify", "ok" if fd >= 0 else ctypes.get_errno())
`, "run", "--json", "--backend", "native", "--profile", "open", "--lang", "python", "-")
	if o.res.Status != box.StatusOK || o.res.Stdout != "inotify ok\n" {
		t.Fatalf("a second box while the first holds its inotify instances:\n%s", o)
	}
}

// takeInotifyNow takes every inotify instance the kernel gives the box, and queues
// blocked real-time signals until the kernel refuses one, and keeps both (in a
// session, the interpreter holds them after the call). It prints how many instances
// it took and how many signals are queued (SigQ).
const takeInotifyNow = `
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 4096 and libc.inotify_init1(0) >= 0:
    n += 1
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
for _ in range(200000):
    os.kill(os.getpid(), signal.SIGRTMIN)  # past the limit, kill(2) still succeeds
sigq = [l for l in open("/proc/self/status") if l.startswith("SigQ:")][0]
print("took", n, sigq.split()[1].split("/")[0])
`

// TestPooledBoxQuotasApart: boxes forked from one zygote share their zygote's user
// namespace owner, to which the kernel charges each box's inotify instances and
// queued signals; each is held to a share of them (1/8), so that boxes holding all
// they may leave the others of their zygote some. Without the share, one session took
// all 128 instances and every other pooled box got EMFILE.
func TestPooledBoxQuotasApart(t *testing.T) {
	testutil.RequireRoot(t)
	before := snapshotHost(t)
	share := inotifyLimit(t, 16) / 8
	var sigLimit syscall.Rlimit
	if err := syscall.Getrlimit(unix.RLIMIT_SIGPENDING, &sigLimit); err != nil || sigLimit.Cur < 8000 || sigLimit.Cur > 800000 {
		t.Skipf("RLIMIT_SIGPENDING is %d (%v): too few to share, or more than a box could queue", sigLimit.Cur, err)
	}
	sigShare := sigLimit.Cur / 8
	s := startServer(t, serverOpts{pool: "{size: 2, warm: [open]}"})
	c := s.client(keyAlice)
	ctx := context.Background()
	// Three boxes of the zygote each take all they may: together fewer than the owner's.
	for i := range 3 {
		awaitPoolFull(t, s)
		info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "python", Profile: "open"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: takeInotifyNow}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(res.Isolation, "zygote") {
			t.Fatalf("session %d was not forked from the zygote (isolation %v): the test proves nothing", i, res.Isolation)
		}
		if want := fmt.Sprintf("took %d %d\n", share, sigShare); res.Status != box.StatusOK || res.Stdout != want {
			t.Fatalf("session %d: %s %q, want %q", i, res.Status, res.Stdout, want)
		}
	}
	awaitPoolFull(t, s)
	res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Profile: "open", Code: `
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
print("inotify", "ok" if libc.inotify_init1(0) >= 0 else ctypes.get_errno())
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
os.kill(os.getpid(), signal.SIGRTMIN)
print("queued", [l for l in open("/proc/self/status") if l.startswith("SigQ:")][0].split()[1].split("/")[0])
`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != box.StatusOK || res.Stdout != "inotify ok\nqueued 1\n" || !slices.Contains(res.Isolation, "zygote") {
		t.Fatalf("a pooled box while three sessions hold their share: %s %q %v", res.Status, res.Stdout, res.Isolation)
	}
	s.stop(t, 30*time.Second)
	checkHostClean(t, before)
}

// TestRootlessBoxQuotasShared: a rootless box's user namespace is the user's own, so
// the kernel charges what the box spends of per-user quotas to the user who runs moat
// (there is no other owner to give it). The box is held to a share (1/8) of them: the
// user's own processes still get an inotify instance while the box holds all it may.
func TestRootlessBoxQuotasShared(t *testing.T) {
	testutil.RequireRoot(t)
	share := inotifyLimit(t, 16) / 8
	cred := &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	if l := holdInotify(t, cred); l != fmt.Sprintf("took %d\n", share) {
		t.Fatalf("the rootless box: %q, want its share, %d instances", l, share)
	}
	probe := exec.Command("/usr/bin/python3", "-c", "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\nprint('inotify', 'ok' if l.inotify_init1(0) >= 0 else ctypes.get_errno())")
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	probe.Dir = "/"
	if o, err := probe.CombinedOutput(); err != nil || string(o) != "inotify ok\n" {
		t.Fatalf("a host process of the user while the rootless box holds its share: %q %v", o, err)
	}
}

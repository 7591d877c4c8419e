//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestBoxQuotasApart: per-user kernel quotas that a box spends (here all the inotify
// instances fs.inotify.max_user_instances allows) are its own. While one native box,
// made by one moat run, holds all of them, a box of another moat run still gets one.
// Each box's user namespace has an owner uid of its own, to which the kernel charges
// the box's use; two moat processes once gave their first boxes the same owner, and
// the second box got EMFILE. (The docker backend runs every box as the host's uid
// 65534, so there these quotas are shared: see README, Backends.)
func TestBoxQuotasApart(t *testing.T) {
	testutil.RequireRoot(t)
	before := snapshotHost(t)
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit < 1 || limit > 4096 {
		t.Skipf("fs.inotify.max_user_instances is %q: the box could not reach it", b)
	}

	hog := exec.Command(testutil.MoatBinary(t), "run", "--backend", "native", "--profile", "open", "--timeout", "60s", "--lang", "python", "-")
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
	defer func() {
		_ = hog.Process.Signal(syscall.SIGTERM)
		_ = hog.Wait()
		checkHostClean(t, before)
	}()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l != "took "+strconv.Itoa(limit)+"\n" {
			t.Fatalf("the first box: %q, want it to take all %d instances its owner may have\n%s", l, limit, hogErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the first box did not report in 30 s\n%s", hogErr.String())
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

package native

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// spendQuotas takes every inotify instance and queues real-time signals until the
// kernel refuses, then prints how many instances it got and how many signals are
// queued (SigQ). The box stays as it is until
// the session ends: the instances stay open and the signals stay queued (blocked).
const spendQuotas = `
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
fds = []
for _ in range(1024):
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
for _ in range(200000):
    os.kill(os.getpid(), signal.SIGRTMIN)  # past the limit, kill(2) still succeeds
sigq = [l for l in open('/proc/self/status') if l.startswith('SigQ:')][0]
print(len(fds), sigq.split()[1].split('/')[0])
`

// hostRootQuotas fails unless this process (host root) can still create an inotify
// instance and a POSIX timer (which takes a queued signal).
func hostRootQuotas(t *testing.T, when string) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("%s: host root cannot create an inotify instance: %v", when, err)
	}
	unix.Close(fd)
	var timer uintptr
	if _, _, e := unix.Syscall(unix.SYS_TIMER_CREATE, unix.CLOCK_MONOTONIC, 0, uintptr(unsafe.Pointer(&timer))); e != 0 {
		t.Fatalf("%s: host root cannot create a POSIX timer (queued signals): %v", when, e)
	}
	unix.Syscall(unix.SYS_TIMER_DELETE, timer, 0, 0)
}

// TestBoxQuotasAreNotHostRoots: the kernel charges a box's inotify instances and
// queued signals to the owner of its user namespace too (owner_linux.go). A box that
// spends all it can, cold or forked from a zygote, leaves host root its own.
func TestBoxQuotasAreNotHostRoots(t *testing.T) {
	testutil.RequireRoot(t)
	hostRootQuotas(t, "before any box")
	b := &Backend{}
	t.Cleanup(func() { _ = b.Close() })
	lim := box.Limits{Memory: 256 << 20, Pids: 32}
	cold := zygoteSpec(lim)
	cold.Zygote = nil
	for _, c := range []struct {
		name string
		spec *box.SessionSpec
	}{{"cold", cold}, {"zygote", zygoteSpec(lim)}} {
		t.Run(c.name, func(t *testing.T) {
			s, err := b.StartSession(context.Background(), c.spec)
			if err != nil {
				t.Fatalf("start a session: %v", err)
			}
			defer s.Close()
			if zy := strings.Contains(strings.Join(s.Isolation(), " "), "zygote"); zy != (c.name == "zygote") {
				t.Fatalf("isolation %v", s.Isolation())
			}
			res := call(t, s, spendQuotas, 60*time.Second)
			f := strings.Fields(res.Stdout)
			if res.Status != box.StatusOK || len(f) != 2 {
				t.Fatalf("status %s, stdout %q, stderr %q", res.Status, res.Stdout, res.Stderr)
			}
			instances, _ := strconv.Atoi(f[0])
			queued, _ := strconv.Atoi(f[1])
			// The box must have reached real limits, or the check below proves nothing:
			// a zygote's box its share of them (userLimitShares).
			if c.name == "zygote" {
				if share := userLimitShares()["max_inotify_instances"]; int64(instances) != share {
					t.Fatalf("the zygote's box got %d inotify instances, want its share, %d", instances, share)
				}
			} else if instances < 64 {
				t.Fatalf("the box got %d inotify instances: too few to exhaust anything", instances)
			}
			if queued < 1000 {
				t.Fatalf("the box queued %d signals: too few to exhaust anything", queued)
			}
			hostRootQuotas(t, "while a box holds "+f[0]+" inotify instances and "+f[1]+" queued signals")
		})
	}
}

// TestOwnerFor: owners differ between processes and between a process's boxes in a
// row, and stay in their range, below 2^31.
func TestOwnerFor(t *testing.T) {
	seen := map[int]string{}
	for _, pid := range []int{1, 2, 4242, 1<<22 - 1} {
		for seq := uint32(1); seq <= 1<<ownerSeqBits; seq++ {
			o := ownerFor(pid, seq)
			if o < OwnerUIDBase || o >= 1<<31 || o == HostRootUID || o == HostBoxUID {
				t.Fatalf("owner of pid %d box %d is %d: out of range", pid, seq, o)
			}
			if prev, ok := seen[o]; ok {
				t.Fatalf("pid %d box %d has the owner %d of %s", pid, seq, o, prev)
			}
			seen[o] = fmt.Sprintf("pid %d box %d", pid, seq)
		}
	}
	if ownerFor(7, 1) != ownerFor(7, 1+1<<ownerSeqBits) {
		t.Errorf("a process's owners do not cycle every %d boxes", 1<<ownerSeqBits)
	}
}

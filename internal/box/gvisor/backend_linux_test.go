package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/box/container/contracttest"
	"github.com/moat-sandbox/moat/internal/childproc"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestMain lets the test binary act as the launcher, the box's agent and its init.
func TestMain(m *testing.M) {
	childproc.Dispatch()
	os.Exit(m.Run())
}

// newTestBackend opens a gvisor backend with a state directory of its own, and
// checks when the test ends that no sandbox process of it is left.
func newTestBackend(t *testing.T) *Backend {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := FindRunsc(""); err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	state := t.TempDir()
	b, err := NewBackend(context.Background(), Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pids := sandboxProcs(t, state, ""); len(pids) > 0 {
			t.Errorf("runsc processes left: %v", pids)
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// harness is the contract's view of b: its boxes are the bundles in its state
// directory; killing one from outside is a SIGKILL to its Sentry.
func harness(t *testing.T, b *Backend) *contracttest.Harness {
	return &contracttest.Harness{
		Backend:   b.Backend,
		Name:      "gvisor",
		Isolation: []string{"gvisor", "gvisor_kernel", "platform_ptrace", "network_none", "cgroup_memory", "cgroup_pids"},
		Boxes: func(t *testing.T) []string {
			entries, err := os.ReadDir(b.runtime.bundlesDir())
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range entries {
				ids = append(ids, e.Name())
			}
			return ids
		},
		Kill: func(t *testing.T, id string) {
			pids := sandboxProcs(t, b.runtime.StateDir, "runsc-sandbox")
			killed := 0
			for _, p := range pids {
				if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline"); strings.Contains(string(cmd), id) {
					if err := syscall.Kill(p, syscall.SIGKILL); err == nil {
						killed++
					}
				}
			}
			if killed == 0 {
				t.Fatalf("no Sentry of %s among %v", id, pids)
			}
		},
	}
}

// sandboxProcs lists the processes whose command line names stateDir (runsc and what
// it starts), those whose argv[0] is name when name is not empty.
func sandboxProcs(t *testing.T, stateDir, name string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		cmd, err := os.ReadFile(d + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), stateDir) {
			continue
		}
		if argv0, _, _ := strings.Cut(string(cmd), "\x00"); name != "" && argv0 != name {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(d))
		if pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestContract(t *testing.T) {
	b := newTestBackend(t)
	contracttest.All(t, harness(t, b))
}

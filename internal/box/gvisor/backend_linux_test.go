package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"

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
// directory and the cgroups of this process's boxes; killing one from outside is a
// SIGKILL to its Sentry.
func harness(t *testing.T, b *Backend) *contracttest.Harness {
	return &contracttest.Harness{
		Backend:      b.Backend,
		Name:         "gvisor",
		Isolation:    []string{"gvisor", "gvisor_kernel", "platform_ptrace", "network_none", "cgroup_memory", "cgroup_pids"},
		GVisorKernel: true,
		Boxes: func(t *testing.T) []string {
			entries, err := os.ReadDir(b.runtime.bundlesDir())
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range entries {
				ids = append(ids, e.Name())
			}
			prefix := fmt.Sprintf("box-%d-", os.Getpid())
			for _, pattern := range []string{"/sys/fs/cgroup/*/moat/" + prefix + "*", "/sys/fs/cgroup/moat/" + prefix + "*"} {
				cgroups, _ := filepath.Glob(pattern)
				for _, cg := range cgroups {
					if !slices.Contains(ids, filepath.Base(cg)) {
						ids = append(ids, filepath.Base(cg))
					}
				}
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

// TestRootfs runs boxes on a configured root filesystem, the debootstrapped one
// scripts/backends builds: they see its Python, not the host's files.
func TestRootfs(t *testing.T) {
	testutil.RequireRoot(t)
	root := os.Getenv("MOAT_TEST_ROOTFS")
	if root == "" {
		root = "/var/cache/moat/rootfs-bookworm"
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/python3")); err != nil {
		testutil.SkipOrFail(t, "no test rootfs (scripts/backends builds it): "+err.Error())
	}
	b, err := NewBackend(context.Background(), Options{StateDir: t.TempDir(), Rootfs: root})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	marker := filepath.Join(root, "etc", "debian_version")
	want, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Run(context.Background(), &box.Spec{Language: "bash", Code: []byte("cat /etc/debian_version; id -u; test -e /etc/shadow && echo has-shadow")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != box.StatusOK || !strings.HasPrefix(res.Stdout, string(want)+"65534\nhas-shadow") {
		t.Errorf("status %s stdout %q stderr %q; want the rootfs's debian_version, uid 65534 and its /etc", res.Status, res.Stdout, res.Stderr)
	}
}

// TestNewBackendErrors: what is missing is said, with how to get it.
func TestNewBackendErrors(t *testing.T) {
	testutil.RequireRoot(t)
	ctx := context.Background()
	notExec := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fakeRoot := t.TempDir()
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"relative runsc", Options{Runsc: "runsc"}, `runsc path "runsc" is not absolute`},
		{"missing runsc", Options{Runsc: "/nonexistent/runsc"}, "runsc /nonexistent/runsc is not an executable file"},
		{"runsc not executable", Options{Runsc: notExec}, "is not an executable file"},
		{"relative rootfs", Options{Rootfs: "rootfs"}, `rootfs "rootfs" is not absolute`},
		{"missing rootfs", Options{Rootfs: "/nonexistent-root"}, "rootfs /nonexistent-root is not a directory (make one with debootstrap"},
		{"rootfs without python", Options{Rootfs: fakeRoot}, "rootfs " + fakeRoot + " has no /usr/bin/python3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.o.Runsc == "" {
				if _, err := FindRunsc(""); err != nil {
					testutil.SkipOrFail(t, err.Error())
				}
			}
			c.o.StateDir = t.TempDir()
			b, err := NewBackend(ctx, c.o)
			if err == nil {
				b.Close()
				t.Fatal("NewBackend succeeded")
			}
			if !strings.HasPrefix(err.Error(), "gvisor backend: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want %q", err, c.want)
			}
		})
	}
}

// crashRole is a moat that opens a gvisor backend on $MOAT_TEST_STATE, starts a box
// that sleeps, and waits to be killed: TestCrashedOwner kills it with SIGKILL.
const crashRole = "__moat-test-gvisor-crash"

func init() {
	childproc.Add(crashRole, func() int {
		b, err := NewBackend(context.Background(), Options{StateDir: os.Getenv("MOAT_TEST_STATE")})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			return 1
		}
		_, _ = b.Run(context.Background(), &box.Spec{Language: "bash", Code: []byte("echo up; sleep 600")})
		return 0
	})
}

// TestCrashedOwner: a moat killed with SIGKILL in the middle of a box leaves no
// process behind (runsc dies with it, and the Sentry with runsc), and the next
// NewBackend removes its bundle, skeleton root and cgroup.
func TestCrashedOwner(t *testing.T) {
	newTestBackend(t) // skips or fails where gVisor cannot run
	state := t.TempDir()
	cmd := exec.Command("/proc/self/exe", crashRole)
	cmd.Env = append(os.Environ(), "MOAT_TEST_STATE="+state)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	owner := cmd.Process.Pid
	prefix := fmt.Sprintf("box-%d-", owner)
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxProcs(t, state, "runsc-sandbox")) == 0 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the crashing moat started no sandbox")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let the box start
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); len(sandboxProcs(t, state, "")) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("processes of the killed moat's sandbox still run: %v", sandboxProcs(t, state, ""))
		}
		time.Sleep(50 * time.Millisecond)
	}
	left := func() []string {
		l, _ := filepath.Glob(filepath.Join(state, "*", prefix+"*"))
		cg, _ := filepath.Glob("/sys/fs/cgroup/*/moat/" + prefix + "*")
		return append(l, cg...)
	}
	if len(left()) == 0 {
		t.Fatal("the killed moat left nothing to sweep: the test proves nothing")
	}
	b, err := NewBackend(context.Background(), Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if l := left(); len(l) > 0 {
		t.Errorf("left after the sweep: %v", l)
	}
}

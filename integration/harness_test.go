//go:build integration

// Package integration holds black-box tests of the built moat binary. They need root
// and run in CI (`make test`); see README.md.
package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// hostSecret is put in moat's own environment; no box may ever see it.
const hostSecret = "MOAT_HOST_SECRET_VALUE_8c1f2e"

type runOut struct {
	res      box.Result
	stdout   string // raw stdout of moat
	stderr   string
	exit     int
	maxRSSKB int64
	wall     time.Duration
	pid      int // moat's: the owner label of the containers it made
}

// moatRun runs `moat run --json ARGS` with code on stdin.
func moatRun(t *testing.T, code string, args ...string) runOut {
	t.Helper()
	return moatExec(t, code, append([]string{"run", "--json"}, args...)...)
}

// moatExec runs the moat binary with args and code on stdin, moat's environment holding
// hostSecret.
func moatExec(t *testing.T, stdin string, args ...string) runOut {
	t.Helper()
	return moatExecAs(t, nil, stdin, args...)
}

// moatExecAs is moatExec as another host user (nil: as the test itself).
func moatExecAs(t *testing.T, cred *syscall.Credential, stdin string, args ...string) runOut {
	t.Helper()
	return moatExecWhile(t, cred, nil, stdin, args...)
}

// moatExecWhile is moatExecAs that, when while is not nil, calls it with moat's pid
// once moat has started and before waiting for it to exit: the test acts on a moat
// that runs (its containers are labelled with that pid).
func moatExecWhile(t *testing.T, cred *syscall.Credential, while func(pid int), stdin string, args ...string) runOut {
	t.Helper()
	bin := testutil.MoatBinary(t)
	cmd := exec.Command(bin, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "MOAT_TEST_SECRET="+hostSecret, "AWS_SECRET_ACCESS_KEY="+hostSecret)
	if cred != nil {
		// The other user's data directory (its audit trail): $HOME is still the
		// test's, which that user cannot write.
		cmd.Env = append(cmd.Env, "XDG_DATA_HOME="+userDataDir(t, cred))
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("run moat: %v", err)
	}
	if while != nil {
		while(cmd.Process.Pid)
	}
	err := cmd.Wait()
	out := runOut{stdout: so.String(), stderr: se.String(), wall: time.Since(start), pid: cmd.Process.Pid}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errorsAs(err, &ee):
		out.exit = ee.ExitCode()
	default:
		t.Fatalf("run moat: %v", err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		out.maxRSSKB = ru.Maxrss
	}
	if len(args) > 1 && args[0] == "run" && args[1] == "--json" && out.exit == 0 {
		if err := json.Unmarshal(so.Bytes(), &out.res); err != nil {
			t.Fatalf("moat printed no JSON result (exit %d): %v\nstdout: %.2000s\nstderr: %.2000s", out.exit, err, so.String(), se.String())
		}
	}
	return out
}

// userDataDir returns a directory owned by cred's user, removed after the test.
func userDataDir(t *testing.T, cred *syscall.Credential) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-user-data-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func errorsAs(err error, target **exec.ExitError) bool {
	ee, ok := err.(*exec.ExitError) //nolint:errorlint // exec returns it unwrapped
	if ok {
		*target = ee
	}
	return ok
}

func (o runOut) String() string {
	return fmt.Sprintf("status=%s exit_code=%d moat_exit=%d\nstdout: %.3000s\nstderr: %.3000s\nmoat stderr: %.2000s",
		o.res.Status, o.res.ExitCode, o.exit, o.res.Stdout, o.res.Stderr, o.stderr)
}

// hostState is what must be unchanged on the host after a box ran.
type hostState struct {
	mounts int
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return hostState{mounts: bytes.Count(b, []byte("\n"))}
}

// checkHostClean asserts that nothing of any box survives: no process running as a box
// uid (or as one of extraUIDs: the user a rootless moat ran as), no box cgroup, no extra
// mount.
func checkHostClean(t *testing.T, before hostState, extraUIDs ...int) {
	t.Helper()
	if procs := boxProcesses(extraUIDs...); len(procs) > 0 {
		t.Errorf("box processes survived on the host: %v", procs)
	}
	if cgs := boxCgroups(); len(cgs) > 0 {
		t.Errorf("box cgroups left on the host: %v", cgs)
	}
	after := snapshotHost(t)
	if after.mounts != before.mounts {
		t.Errorf("host mount table changed: %d mounts before, %d after", before.mounts, after.mounts)
	}
}

// boxCgroups lists the host's box cgroups, kept ones (cgroup.Box.Recycle) too.
func boxCgroups() []string {
	return append(testutil.BoxCgroups("box-"), testutil.BoxCgroups(cgroup.SparePrefix)...)
}

// boxProcesses lists host processes whose uid is one of the box's host uids.
func boxProcesses(extraUIDs ...int) []string {
	uids := map[string]bool{fmt.Sprint(native.HostBoxUID): true, fmt.Sprint(native.HostRootUID): true}
	for _, u := range extraUIDs {
		uids[fmt.Sprint(u)] = true
	}
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "Uid:") {
				continue
			}
			f := strings.Fields(line)
			for _, u := range f[1:] {
				if uids[u] {
					out = append(out, e.Name()+": "+firstLine(string(b)))
					break
				}
			}
		}
	}
	return out
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		fmt.Println("integration tests need root; skipping (CI runs them as root)")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

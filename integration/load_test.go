//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// loadReport is the part of `moat loadtest --json` the tests check.
type loadReport struct {
	Clients       int       `json:"clients"`
	PerClient     int       `json:"per_client"`
	Executions    int       `json:"executions"`
	OK            int       `json:"ok"`
	HTTP429       int       `json:"http_429"`
	Errors        int       `json:"errors"`
	SessionErrors int       `json:"session_errors"`
	PerSecond     float64   `json:"executions_per_second"`
	OneShot       loadStats `json:"one_shot"`
	Session       loadStats `json:"session"`
	IdleOneShot   loadStats `json:"idle_one_shot"`
	FirstErrors   []string  `json:"first_errors"`
	Cleanup       struct {
		Checked       bool     `json:"checked"`
		OK            bool     `json:"ok"`
		SessionsLeft  []string `json:"sessions_left"`
		AfterLoad     []string `json:"after_load"`
		AfterShutdown []string `json:"after_shutdown"`
		ServerExit    int      `json:"server_exit"`
		BoxUIDs       []int    `json:"box_uids"`
	} `json:"cleanup"`
}

type loadStats struct {
	Count   int     `json:"count"`
	OK      int     `json:"ok"`
	HTTP429 int     `json:"http_429"`
	Errors  int     `json:"errors"`
	P50MS   float64 `json:"p50_ms"`
	P99MS   float64 `json:"p99_ms"`
}

// TestLoadtest is the load test: 50 concurrent clients, 20 executions each,
// half one-shot and half in sessions, against a server moat loadtest starts. No
// errors but 429s, and no box left behind.
func TestLoadtest(t *testing.T) {
	testutil.RequireRoot(t)
	start := time.Now()
	rep, exit, stderr := runLoadtest(t, nil, "--clients", "50", "--per-client", "20", "--json")
	t.Logf("moat loadtest took %v; report:\n%s", time.Since(start).Round(time.Millisecond), indentJSON(rep.raw))
	if exit != 0 {
		t.Errorf("moat loadtest exited %d; stderr:\n%s", exit, stderr)
	}
	r := rep.loadReport
	if r.Executions != 1000 || r.OK+r.HTTP429 != 1000 || r.Errors != 0 || r.SessionErrors != 0 {
		t.Errorf("executions %d, ok %d, 429 %d, errors %d, session errors %d; want 1000 = ok + 429, no errors; first errors: %q",
			r.Executions, r.OK, r.HTTP429, r.Errors, r.SessionErrors, r.FirstErrors)
	}
	if r.OneShot.Count != 500 || r.Session.Count != 500 {
		t.Errorf("one-shot %d, in sessions %d; want 500 each", r.OneShot.Count, r.Session.Count)
	}
	if r.IdleOneShot.Errors != 0 {
		t.Errorf("%d one-shot executions failed on the idle server: %q", r.IdleOneShot.Errors, r.FirstErrors)
	}
	c := r.Cleanup
	if !c.Checked || !c.OK || c.ServerExit != 0 {
		t.Errorf("cleanup: checked %v, ok %v, server exit %d; sessions left %q; after the load %q; after shutdown %q",
			c.Checked, c.OK, c.ServerExit, c.SessionsLeft, c.AfterLoad, c.AfterShutdown)
	}
	// loadtest.go spells the box uids out (native's names are Linux-only): they must
	// stay those of the native backend.
	if want := []int{native.HostRootUID, native.HostBoxUID}; !slices.Equal(c.BoxUIDs, want) {
		t.Errorf("moat loadtest checked box uids %v; the native backend uses %v", c.BoxUIDs, want)
	}
}

// TestLoadtestReportsLeftovers plants a cgroup named as a box of the server moat
// loadtest starts: the cleanup check must report it and fail.
func TestLoadtestReportsLeftovers(t *testing.T) {
	testutil.RequireRoot(t)
	var planted string
	rep, exit, stderr := runLoadtest(t, func(pid int) {
		parent, err := moatCgroupParent()
		if err != nil {
			t.Log(err)
			return
		}
		planted = filepath.Join(parent, fmt.Sprintf("box-%d-00000000000000000000000000000000", pid))
		if err := os.Mkdir(planted, 0o755); err != nil {
			t.Errorf("plant %s: %v", planted, err)
			planted = ""
			return
		}
		t.Cleanup(func() {
			// A later moat serve may have swept it already (its owner pid is gone).
			if err := os.Remove(planted); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove the planted cgroup: %v", err)
			}
		})
	}, "--clients", "2", "--per-client", "2", "--json")
	if planted == "" {
		testutil.SkipOrFail(t, "no moat cgroup parent to plant a box in (no cgroups?)")
	}
	if exit != 1 {
		t.Errorf("moat loadtest exited %d with a box cgroup left; want 1; stderr:\n%s", exit, stderr)
	}
	c := rep.Cleanup
	want := "cgroup " + planted
	if c.OK || !slices.Contains(c.AfterLoad, want) || !slices.Contains(c.AfterShutdown, want) {
		t.Errorf("cleanup ok %v, after the load %q, after shutdown %q; want both to list %q", c.OK, c.AfterLoad, c.AfterShutdown, want)
	}
	if rep.Errors != 0 || rep.OK != 4 {
		t.Errorf("ok %d, errors %d (%q); want 4 ok, no errors", rep.OK, rep.Errors, rep.FirstErrors)
	}
}

// moatCgroupParent waits for the "moat" parent of boxes below this process's
// cgroup (v1: in the pids hierarchy; v2: the unified one) and returns its path.
func moatCgroupParent() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var dir string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		rel := strings.TrimSuffix(f[2], "/moat-supervisor")
		switch {
		case f[1] == "pids":
			dir = filepath.Join("/sys/fs/cgroup/pids", rel, "moat")
		case f[0] == "0" && f[1] == "" && dir == "":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				dir = filepath.Join("/sys/fs/cgroup", rel, "moat")
			}
		}
	}
	if dir == "" {
		return "", fmt.Errorf("no pids or v2 cgroup in %q", b)
	}
	// The server creates the parent with its first box.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%s did not appear", dir)
}

type rawLoadReport struct {
	loadReport
	raw []byte
}

// runLoadtest runs moat loadtest with args and returns its JSON report, exit status
// and stderr. started, when not nil, is called with the pid of the server moat
// loadtest started, as soon as it says it.
func runLoadtest(t *testing.T, started func(pid int), args ...string) (rawLoadReport, int, string) {
	t.Helper()
	bin := testutil.MoatBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"loadtest"}, args...)...)
	cmd.Env = append(os.Environ(), "MOAT_TOKEN=")
	var so bytes.Buffer
	var se syncBuffer
	cmd.Stdout = &so
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(&se, line)
		var pid int
		if _, err := fmt.Sscanf(line, "moat loadtest: started moat serve (pid %d)", &pid); err == nil && started != nil {
			started(pid)
		}
	}
	_, _ = io.Copy(io.Discard, pr)
	err = cmd.Wait()
	exit := cmd.ProcessState.ExitCode()
	if ctx.Err() != nil {
		t.Fatalf("moat loadtest did not finish within 5 minutes; stderr:\n%s", se.String())
	}
	if err != nil && exit < 0 {
		t.Fatalf("moat loadtest: %v", err)
	}
	rep := rawLoadReport{raw: so.Bytes()}
	if err := json.Unmarshal(so.Bytes(), &rep.loadReport); err != nil {
		t.Fatalf("moat loadtest printed no JSON report (exit %d): %v\nstdout: %.2000s\nstderr: %.4000s", exit, err, so.String(), se.String())
	}
	return rep, exit, se.String()
}

func indentJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

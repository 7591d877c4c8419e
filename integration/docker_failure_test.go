//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/docker"
	"github.com/moat-sandbox/moat/internal/client"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// These tests stop the real dockerd in the middle of a box, as an admin (or a
// package upgrade) would: SIGTERM to the pid in /var/run/docker.pid. dockerd then
// stops every container (SIGTERM, which the box's agent ignores, then SIGKILL after
// the box's StopTimeout) and exits. moat must say so at once, with a clear error,
// and never hang; the daemon is restarted afterwards the way scripts/backends starts
// it.
//
// Nothing else may use the daemon meanwhile. The tests of this package do not call
// t.Parallel, and a test that does not is never run alongside any other top-level
// test (parallel tests wait until every sequential one has finished), so these run
// alone. Other packages' tests do not share the daemon with them either:
// scripts/test runs this package on its own. A developer's own docker tests running
// on the same machine at the same time will see the daemon go away.

// dockerPIDFile is where dockerd writes its pid (its --pidfile default).
const dockerPIDFile = "/var/run/docker.pid"

// Bounds of the tests.
const (
	// reportBound is how long moat may take to report a lost box once dockerd was
	// told to stop; measured: ~1.1 s (dockerd's 1 s StopTimeout, then SIGKILL).
	reportBound = 30 * time.Second
	// hangBound is when a moat that has not reported is killed, so that a hang
	// fails the test rather than the test binary's timeout.
	hangBound = 2 * time.Minute
	// dockerdStopBound bounds dockerd's own shutdown.
	dockerdStopBound = time.Minute
)

// sleeperCode prints a marker, then sleeps far longer than any bound here.
const sleeperCode = "import time\nprint('MOAT-MARKER', flush=True)\ntime.sleep(60)\n"

// stopDockerd stops the real dockerd with SIGTERM and waits until it has exited. It
// returns when it sent the signal. The daemon is restarted when the test ends, also
// when it fails (restartDockerd); the caller may restart it earlier.
func stopDockerd(t *testing.T) time.Time {
	t.Helper()
	b, err := os.ReadFile(dockerPIDFile)
	if err != nil {
		testutil.SkipOrFail(t, fmt.Sprintf("dockerd's pid file: %v (is dockerd running? scripts/backends starts it)", err))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("%s holds %q", dockerPIDFile, b)
	}
	// Registered first: whatever happens next, the daemon comes back.
	t.Cleanup(func() { restartDockerd(t) })
	sent := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM dockerd (pid %d): %v", pid, err)
	}
	for !processGone(pid) {
		if time.Since(sent) > dockerdStopBound {
			t.Fatalf("dockerd (pid %d) did not exit within %v of SIGTERM", pid, dockerdStopBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("dockerd (pid %d) exited %v after SIGTERM", pid, time.Since(sent).Round(time.Millisecond))
	return sent
}

// processGone reports whether pid no longer runs (gone, or a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z'
	}
	return false
}

// restartDockerd starts dockerd again as scripts/backends does (its --dockerd-only
// mode: nothing happens when the daemon answers) and waits until the Engine API
// answers too.
func restartDockerd(t *testing.T) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := filepath.Join(testutil.RepoRoot(t), "scripts", "backends")
	out, err := exec.CommandContext(ctx, script, "--dockerd-only").CombinedOutput()
	if err != nil {
		t.Errorf("restart dockerd: %s --dockerd-only: %v\n%s", script, err, out)
		return
	}
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := docker.Connect(cctx, "")
		ccancel()
		if err == nil {
			e.Close()
			break
		}
		if ctx.Err() != nil {
			t.Errorf("dockerd does not answer after its restart: %v\n%s", err, out)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("restarted dockerd in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
}

// awaitCode waits until the code runs in a container of the moat process pid (its
// python3 is among the container's processes) and returns the container's ID.
func awaitCode(t *testing.T, pid int) string {
	t.Helper()
	cli, err := dockerclient.New(dockerclient.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, c := range ownedContainers(t, pid) {
			id, _, _ := strings.Cut(c, " ")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			top, err := cli.ContainerTop(ctx, id, dockerclient.ContainerTopOptions{})
			cancel()
			if err != nil {
				continue
			}
			for _, p := range top.Processes {
				if strings.Contains(strings.Join(p, " "), "python3") {
					return id
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the code of moat (pid %d) did not start within a minute", pid)
	return ""
}

// moatProcesses lists the processes running the moat binary bin.
func moatProcesses(bin string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && exe == bin {
			out = append(out, e.Name())
		}
	}
	return out
}

// containerProcesses lists the processes in a cgroup of the container id (its
// 12-character short form will do): cgroupfs names it /docker/ID, systemd
// docker-ID.scope.
func containerProcesses(id string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err == nil && (strings.Contains(string(cg), "/docker/"+id) || strings.Contains(string(cg), "/docker-"+id)) {
			out = append(out, e.Name())
		}
	}
	return out
}

// checkSweptAfterRestart starts a new moat on the restarted daemon (it sweeps the
// containers of dead owners as it starts) and checks that no container of the dead
// moat process deadPID is left.
func checkSweptAfterRestart(t *testing.T, cfg string, deadPID int) {
	t.Helper()
	o := moatRun(t, "print(1)\n", "--config", cfg, "--backend", config.BackendDocker, "--lang", "python")
	if o.exit != 0 || o.res.Status != box.StatusOK || o.res.Stdout != "1\n" {
		t.Fatalf("a run on the restarted daemon failed:\n%s", o)
	}
	if left := ownedContainers(t, deadPID); len(left) > 0 {
		t.Errorf("containers of the dead moat (pid %d) left after a new moat started: %v", deadPID, left)
	}
	checkNoContainers(t, o)
}

// TestDockerDaemonStopsMidRun stops dockerd while `moat run --backend docker` runs
// code: moat must exit soon with an error that says the box was lost with the
// daemon, leave no process, and leave nothing that a new moat does not sweep.
func TestDockerDaemonStopsMidRun(t *testing.T) {
	cfg := requireContainerBackend(t, config.BackendDocker)
	bin := testutil.MoatBinary(t)
	before := baselineHost(t)
	var box1 string
	var sent time.Time
	var hang *time.Timer
	o := moatExecWhile(t, nil, func(pid int) {
		// Killed when it hangs (also when this func fails the test): moat is
		// not reaped until then, so its pid is not reused.
		hang = time.AfterFunc(hangBound, func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		box1 = awaitCode(t, pid)
		t.Logf("the code runs in container %.12s; stopping dockerd", box1)
		sent = stopDockerd(t)
	}, sleeperCode, "run", "--json", "--config", cfg, "--backend", config.BackendDocker,
		"--lang", "python", "--timeout", "5m")
	hang.Stop()
	took := time.Since(sent)
	t.Logf("moat exited %d, %v after dockerd was told to stop:\n%s", o.exit, took.Round(time.Millisecond), o.stderr)
	if took > reportBound {
		t.Errorf("moat took %v to report the lost box, want under %v", took, reportBound)
	}
	if o.exit == 0 {
		t.Errorf("moat exited 0 on a box lost with its daemon:\n%s", o)
	}
	// The reason, on stderr and in the JSON result's error.
	var res box.Result
	if err := json.Unmarshal([]byte(o.stdout), &res); err != nil {
		t.Errorf("no JSON result: %v\nstdout: %.2000s", err, o.stdout)
	}
	for _, want := range []string{"lost the box", "Docker daemon"} {
		if !strings.Contains(o.stderr, want) {
			t.Errorf("moat's stderr does not say %q:\n%s", want, o.stderr)
		}
		if !strings.Contains(res.Error, want) {
			t.Errorf("the result's error does not say %q: %+v", want, res)
		}
	}
	if res.Status != box.StatusInternalError {
		t.Errorf("status %s, want %s: the code did not end its box", res.Status, box.StatusInternalError)
	}
	if left := moatProcesses(bin); len(left) > 0 {
		t.Errorf("moat processes left: %v", left)
	}
	restartDockerd(t)
	checkSweptAfterRestart(t, cfg, o.pid)
	// Against a baseline, and by the box's container: other moats on this host
	// may have boxes of their own.
	before.check(t)
	if left := containerProcesses(box1); len(left) > 0 {
		t.Errorf("processes of the box's container %.12s survived: %v", box1, left)
	}
}

// TestDockerDaemonStopsMidSession stops dockerd under `moat serve --backend docker`
// with a live session: the session's next call fails at once saying the box was
// lost with the daemon, the server stays up, and runs code again once the daemon is
// back.
func TestDockerDaemonStopsMidSession(t *testing.T) {
	cfg := requireContainerBackend(t, config.BackendDocker)
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	backendYAML := strings.Replace(string(b), "backend:\n", "backend:\n  name: "+config.BackendDocker+"\n", 1)
	s := startServer(t, serverOpts{config: "server:\n" +
		"  api_keys:\n    - principal: alice\n      key_env: MOAT_TEST_KEY_ALICE\n" + backendYAML})
	ctx := context.Background()
	c := s.client(keyAlice)
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res := sessionCall(t, c, info.ID, "x = 41\nprint(x + 1)", ""); res.Status != box.StatusOK || res.Stdout != "42\n" {
		t.Fatalf("a call before the daemon stopped: %+v", res)
	}
	if !strings.Contains(s.stderr.String(), "backend: docker") {
		t.Fatalf("the server does not run the docker backend:\n%s", s.stderr)
	}

	sent := stopDockerd(t)
	cctx, cancel := context.WithTimeout(ctx, hangBound)
	defer cancel()
	_, err = c.SessionExecute(cctx, info.ID, &api.CallRequest{Code: "print(x)"}, nil)
	took := time.Since(sent)
	t.Logf("the next call failed %v after dockerd was told to stop: %v", took.Round(time.Millisecond), err)
	if took > reportBound {
		t.Errorf("the call took %v to fail, want under %v", took, reportBound)
	}
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("the call on a session whose daemon stopped: %v, want an API error", err)
	}
	if apiErr.Code != api.CodeSessionLost || !strings.Contains(apiErr.Message, "lost the box") || !strings.Contains(apiErr.Message, "Docker daemon") {
		t.Errorf("error %v: want %s saying the box was lost with the Docker daemon", apiErr, api.CodeSessionLost)
	}
	// The server is up while the daemon is away. A new execution fails at once: an
	// internal error to the client (the API does not pass those on), whose line in
	// the server's log names the daemon.
	if err := c.Health(ctx); err != nil {
		t.Fatalf("the server stopped answering: %v", err)
	}
	start := time.Now()
	_, err = c.Execute(cctx, &api.ExecuteRequest{Language: "python", Code: "print(1)"}, nil)
	t.Logf("an execution without the daemon failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if d := time.Since(start); d > reportBound {
		t.Errorf("the execution took %v to fail", d)
	}
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeInternal {
		t.Errorf("an execution without the daemon: %v, want %s", err, api.CodeInternal)
	} else if line := awaitLogLine(s, "internal error", requestID(apiErr.Message)); !strings.Contains(line, "daemon") {
		t.Errorf("the server's log line of the failed execution does not name the daemon: %q", line)
	}

	restartDockerd(t)
	// The daemon is back: the server runs code again, without a restart.
	s.assertServing(t)
	pid := s.cmd.Process.Pid
	if code := s.stop(t, time.Minute); code != 0 {
		t.Errorf("moat serve exited %d", code)
	}
	checkSweptAfterRestart(t, cfg, pid)
}

// requestID returns the request id an internal error's message gives ("" if none).
func requestID(msg string) string {
	_, rest, ok := strings.Cut(msg, "request id ")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ")")
	return id
}

// awaitLogLine returns the first line of the server's log holding msg and
// request_id=id, waiting a little for it to be read ("" if it does not come).
func awaitLogLine(s *server, msg, id string) string {
	for deadline := time.Now().Add(5 * time.Second); id != "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, msg) && strings.Contains(line, "request_id="+id) {
				return line
			}
		}
	}
	return ""
}

package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	bc "github.com/moat-sandbox/moat/internal/box/container"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// These tests talk to the real dockerd. scripts/backends installs and starts it,
// registers runsc and builds TestImage; outside CI they skip when any of that is
// missing, in CI they fail.

// TestImage is the image scripts/backends builds with debootstrap: bookworm minbase
// with python3. MOAT_TEST_IMAGE overrides it (e.g. python:3.12-slim).
var TestImage = envOr("MOAT_TEST_IMAGE", "moat-test-python:bookworm")

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// requireEngine connects to the default daemon and checks TestImage is there.
func requireEngine(t *testing.T) *Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := Connect(ctx, "")
	if err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	t.Cleanup(func() { e.Close() })
	if err := e.ImageExists(ctx, TestImage); err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	return e
}

// runtimes are the OCI runtimes every container test runs under: the daemon's
// default (runc) and gVisor's runsc when scripts/backends registered it.
var runtimes = []string{"", "runsc"}

func runtimeName(rt string) string {
	if rt == "" {
		return "runc"
	}
	return rt
}

// requireRuntime skips (fails in CI) when the daemon lacks runtime rt.
func requireRuntime(t *testing.T, e *Engine, rt string) {
	t.Helper()
	if rt == "" {
		return
	}
	names, err := e.Runtimes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, rt) {
		testutil.SkipOrFail(t, fmt.Sprintf("runtime %s is not registered with dockerd (have %v); run scripts/backends", rt, names))
	}
}

type boxRun struct {
	stdout, stderr string
	exit           Exit
	elapsed        time.Duration // create to exit
}

// runBox creates, attaches, starts and waits for a container made from p, feeding it
// stdin, and removes it afterwards.
func runBox(t *testing.T, e *Engine, p ContainerParams, stdin string) boxRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if p.Image == "" {
		p.Image = TestImage
	}
	p.Stdin = stdin != ""
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["dev.moat.test"] = t.Name()

	start := time.Now()
	c, err := e.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Remove(context.Background(), c.ID, true); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if len(c.Warnings) > 0 {
		t.Errorf("daemon warnings for a hardened box: %q", c.Warnings)
	}
	s, err := e.Attach(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := e.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _, _ = io.Copy(&out, s.Stdout) }()
	go func() { defer wg.Done(); _, _ = io.Copy(&errOut, s.Stderr) }()
	go func() {
		defer wg.Done()
		if stdin != "" {
			_, _ = io.WriteString(s.Stdin, stdin)
		}
		_ = s.Stdin.Close()
	}()
	exit, err := e.Wait(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	wg.Wait()
	if err := s.Err(); err != nil {
		t.Errorf("stream: %v", err)
	}
	return boxRun{stdout: out.String(), stderr: errOut.String(), exit: exit, elapsed: elapsed}
}

func TestPrint1(t *testing.T) {
	e := requireEngine(t)
	for _, rt := range runtimes {
		t.Run(runtimeName(rt), func(t *testing.T) {
			requireRuntime(t, e, rt)
			r := runBox(t, e, ContainerParams{Runtime: rt, Cmd: []string{"python3", "-c", "print(1)"}}, "")
			if r.stdout != "1\n" || r.stderr != "" || r.exit != (Exit{}) {
				t.Errorf("got stdout %q stderr %q exit %+v", r.stdout, r.stderr, r.exit)
			}
			t.Logf("%s: create, attach, start, print(1), exit in %v", runtimeName(rt), r.elapsed.Round(time.Millisecond))
		})
	}
}

// probeScript runs inside the box and reports what it sees, as JSON.
const probeScript = `
import errno, json, os, subprocess
f = {"uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid()}
status = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    status[k] = v.strip()
for k in ("CapEff", "CapPrm", "CapInh", "CapAmb", "NoNewPrivs", "Seccomp"):
    f[k] = status.get(k)
def write(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
f["write_root"] = write("/moat-probe")
f["write_etc"] = write("/etc/passwd")
f["write_agent"] = write("/.moat-agent/moat")
f["write_tmp"] = write("/tmp/probe")
f["write_workspace"] = write("/workspace/probe")
f["agent_executable"] = os.access("/.moat-agent/moat", os.X_OK)
mounts = {}
for line in open("/proc/self/mountinfo"):
    p = line.split()
    sep = p.index("-")
    mounts[p[4]] = {"opts": p[5].split(","), "fstype": p[sep + 1], "super": p[sep + 3].split(",")}
f["mounts"] = mounts
for name, path in (("tmp", "/tmp"), ("workspace", "/workspace")):
    sv = os.statvfs(path)
    f[name + "_bytes"] = sv.f_blocks * sv.f_frsize
f["workspace_owner"] = os.stat("/workspace").st_uid
f["cwd"] = os.getcwd()
f["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
f["version"] = open("/proc/version").read().strip()
try:
    f["dmesg"] = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout[:2000]
except Exception as e:
    f["dmesg"] = "error: " + str(e)
print(json.dumps(f))
`

type probe struct {
	UID, GID, EUID                 int
	CapEff, CapPrm, CapInh, CapAmb string
	NoNewPrivs, Seccomp            *string
	WriteRoot                      string `json:"write_root"`
	WriteEtc                       string `json:"write_etc"`
	WriteAgent                     string `json:"write_agent"`
	WriteTmp                       string `json:"write_tmp"`
	WriteWorkspace                 string `json:"write_workspace"`
	AgentExecutable                bool   `json:"agent_executable"`
	Mounts                         map[string]struct {
		Opts   []string
		FSType string
		Super  []string
	}
	TmpBytes       int64 `json:"tmp_bytes"`
	WorkspaceBytes int64 `json:"workspace_bytes"`
	WorkspaceOwner int   `json:"workspace_owner"`
	Cwd            string
	Ifaces         []string
	Version        string
	Dmesg          string
}

func TestHardenedBox(t *testing.T) {
	e := requireEngine(t)
	agent, err := os.Executable() // any host file stands in for the moat binary
	if err != nil {
		t.Fatal(err)
	}
	hostVersion, _ := os.ReadFile("/proc/version")
	for _, rt := range runtimes {
		t.Run(runtimeName(rt), func(t *testing.T) {
			requireRuntime(t, e, rt)
			lim := box.Limits{Tmp: 48 << 20, Disk: 24 << 20}
			r := runBox(t, e, ContainerParams{
				Runtime:       rt,
				Cmd:           []string{"python3", "-"}, // the script comes over the attached stdin
				AgentHostPath: agent,
				Limits:        lim,
			}, probeScript)
			if r.exit.Code != 0 {
				t.Fatalf("probe exited %+v; stderr:\n%s", r.exit, r.stderr)
			}
			var p probe
			if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
				t.Fatalf("probe output %q: %v", r.stdout, err)
			}
			gvisor := rt == "runsc"

			check := func(name string, ok bool, got any) {
				t.Helper()
				if !ok {
					t.Errorf("%s: got %v", name, got)
				}
			}
			if gvisor {
				// The container's process is the agent's place: root with
				// container.RootCaps only (init runs the code as 65534 with none: the
				// contract's and the attack suite's checks, through moat).
				caps := fmt.Sprintf("%016x", rootCapsMask(t))
				check("uid 0 (the agent's)", p.UID == 0 && p.EUID == 0 && p.GID == 0, []int{p.UID, p.EUID, p.GID})
				check("effective capabilities: RootCaps only", p.CapEff == caps, p.CapEff)
				check("permitted capabilities: RootCaps only", p.CapPrm == caps, p.CapPrm)
			} else {
				check("uid 65534", p.UID == 65534 && p.EUID == 65534 && p.GID == 65534, []int{p.UID, p.EUID, p.GID})
				check("no effective capabilities", p.CapEff == "0000000000000000", p.CapEff)
				check("no permitted capabilities", p.CapPrm == "0000000000000000", p.CapPrm)
			}
			check("no ambient capabilities", p.CapAmb == "" || p.CapAmb == "0000000000000000", p.CapAmb)
			if gvisor {
				// gVisor (2022) has no NoNewPrivs line; its own seccomp enforces
				// Docker's profile when runsc runs with --oci-seccomp.
				check("seccomp filter (runsc --oci-seccomp)", p.Seccomp != nil && *p.Seccomp == "2", p.Seccomp)
			} else {
				check("no_new_privs", p.NoNewPrivs != nil && *p.NoNewPrivs == "1", p.NoNewPrivs)
				check("seccomp filter", p.Seccomp != nil && *p.Seccomp == "2", p.Seccomp)
			}

			root := p.Mounts["/"]
			check("root mounted read-only", slices.Contains(root.Opts, "ro"), root.Opts)
			check("root not writable", p.WriteRoot != "ok", p.WriteRoot)
			check("/etc/passwd not writable", p.WriteEtc != "ok", p.WriteEtc)
			if !gvisor {
				check("root write fails with EROFS", p.WriteRoot == "EROFS", p.WriteRoot)
			}

			tmp := p.Mounts["/tmp"]
			check("/tmp is tmpfs", tmp.FSType == "tmpfs", tmp.FSType)
			check("/tmp size", p.TmpBytes == lim.Tmp, p.TmpBytes)
			check("/tmp writable", p.WriteTmp == "ok", p.WriteTmp)
			check("/tmp nosuid", slices.Contains(tmp.Opts, "nosuid") || gvisor, tmp.Opts)
			check("/tmp allows exec", !slices.Contains(tmp.Opts, "noexec") || gvisor, tmp.Opts)
			ws := p.Mounts["/workspace"]
			check("/workspace is tmpfs", ws.FSType == "tmpfs", ws.FSType)
			check("/workspace size", p.WorkspaceBytes == lim.Disk, p.WorkspaceBytes)
			check("/workspace owned by the box user", p.WorkspaceOwner == 65534, p.WorkspaceOwner)
			check("/workspace writable", p.WriteWorkspace == "ok", p.WriteWorkspace)
			check("cwd /workspace", p.Cwd == "/workspace", p.Cwd)

			check("no network interface but lo", slices.Equal(p.Ifaces, []string{"lo"}), p.Ifaces)

			agentMount, ok := p.Mounts[bc.AgentPath]
			check("agent mounted", ok, p.Mounts)
			check("agent mount read-only", slices.Contains(agentMount.Opts, "ro"), agentMount.Opts)
			check("agent not writable", p.WriteAgent != "ok", p.WriteAgent)
			check("agent executable by the box user", p.AgentExecutable, p.AgentExecutable)
			for target := range p.Mounts {
				// Docker's own: /etc/hosts, hostname and resolv.conf come from its
				// per-container directory, not from a host path anyone chose.
				switch target {
				case "/", "/tmp", "/workspace", bc.MoatDir, bc.AgentPath, "/etc/hosts", "/etc/hostname", "/etc/resolv.conf":
				default:
					if !strings.HasPrefix(target, "/proc") && !strings.HasPrefix(target, "/dev") && !strings.HasPrefix(target, "/sys") {
						t.Errorf("unexpected mount %s: %+v", target, p.Mounts[target])
					}
				}
			}

			if gvisor {
				// gVisor's Sentry answers for the kernel: its own version string, and a
				// root served by the gofer over 9p. (dmesg would say "Starting gVisor...",
				// but Docker's seccomp profile, which runsc --oci-seccomp enforces,
				// denies syslog(2) without CAP_SYSLOG.)
				check("not the host's kernel", p.Version != strings.TrimSpace(string(hostVersion)), p.Version)
				check("root served by the gVisor gofer", root.FSType == "9p" && slices.Contains(root.Super, "trans=fd"), root)
				check("syslog(2) denied by Docker's seccomp profile", !strings.Contains(p.Dmesg, "Linux version"), p.Dmesg)
			} else {
				check("the host's kernel", p.Version == strings.TrimSpace(string(hostVersion)), p.Version)
			}
		})
	}
}

func TestOOMKilled(t *testing.T) {
	e := requireEngine(t)
	for _, rt := range runtimes {
		t.Run(runtimeName(rt), func(t *testing.T) {
			requireRuntime(t, e, rt)
			r := runBox(t, e, ContainerParams{
				Runtime: rt,
				Cmd:     []string{"python3", "-c", "x = bytearray(512 << 20); print(len(x))"},
				Limits:  box.Limits{Memory: 64 << 20},
			}, "")
			// Under runsc dockerd does not always set OOMKilled (oomwatch.go): the
			// backend learns of the kill from the daemon's oom events instead, which
			// the contract's memory_limit test checks for both runtimes.
			wantMark := runtimeName(rt) == "runc"
			if (wantMark && !r.exit.OOMKilled) || r.exit.Code != 137 {
				t.Errorf("exit %+v, want code 137 (and OOMKilled under runc); stdout %q stderr %q", r.exit, r.stdout, r.stderr)
			}
		})
	}
}

func TestKilledFromOutside(t *testing.T) {
	e := requireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := e.Create(ctx, ContainerParams{Image: TestImage, Cmd: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Remove(context.Background(), c.ID, true) })
	if err := e.Start(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Kill(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	exit, err := e.Wait(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 137 || exit.OOMKilled {
		t.Errorf("exit %+v, want code 137 without OOM", exit)
	}
	if err := e.Kill(ctx, c.ID); err != nil {
		t.Errorf("killing a stopped container: %v", err)
	}
	if err := e.Remove(ctx, c.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(ctx, c.ID, false); err != nil {
		t.Errorf("removing a removed container: %v", err)
	}
}

func TestSweep(t *testing.T) {
	e := requireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	self := CurrentOwner()
	owners := map[string]Owner{
		"dead owner":            {PID: deadPID, Host: self.Host},
		"live owner":            self,
		"dead owner, elsewhere": {PID: deadPID, Host: self.Host + "-other"},
		"recycled pid":          {PID: self.PID, Host: self.Host, Start: self.Start + 1},
	}
	ids := map[string]string{}
	for name, o := range owners {
		c, err := e.Create(ctx, ContainerParams{
			Image:  TestImage,
			Cmd:    []string{"true"},
			Owner:  o,
			Labels: map[string]string{"dev.moat.test": t.Name()},
		})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = c.ID
		t.Cleanup(func() { _ = e.Remove(context.Background(), c.ID, true) })
	}
	n, err := e.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2 {
		t.Errorf("Sweep removed %d containers, want at least 2", n)
	}
	want := map[string]bool{"dead owner": false, "live owner": true, "dead owner, elsewhere": true, "recycled pid": false}
	for name, id := range ids {
		_, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		exists := err == nil
		if err != nil && !strings.Contains(err.Error(), "No such container") {
			t.Fatal(err)
		}
		if exists != want[name] {
			t.Errorf("%s: container exists %v after Sweep, want %v", name, exists, want[name])
		}
	}
}

func TestImageExists(t *testing.T) {
	e := requireEngine(t)
	ctx := context.Background()
	if err := e.ImageExists(ctx, TestImage); err != nil {
		t.Fatal(err)
	}
	err := e.ImageExists(ctx, "moat-test-missing:never")
	if !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("missing image: %v", err)
	}
	want := "image moat-test-missing:never not found: build it with scripts/backends, or docker pull python:3.12-slim where a registry is reachable"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	_, err = e.Create(ctx, ContainerParams{Image: "moat-test-missing:never"})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "moat-test-missing:never") {
		t.Errorf("Create from a missing image: %v", err)
	}
}

func TestUnknownRuntime(t *testing.T) {
	e := requireEngine(t)
	_, err := e.Create(context.Background(), ContainerParams{Image: TestImage, Runtime: "moat-no-such-runtime"})
	if err == nil || !strings.Contains(err.Error(), `runtime "moat-no-such-runtime" is not registered`) {
		t.Errorf("Create with an unknown runtime: %v", err)
	}
}

func TestVersionAndRuntimes(t *testing.T) {
	e := requireEngine(t)
	v, err := e.Version(context.Background())
	if err != nil || v == "" {
		t.Fatalf("Version: %q, %v", v, err)
	}
	rts, err := e.Runtimes(context.Background())
	if err != nil || !slices.Contains(rts, "runc") {
		t.Fatalf("Runtimes: %v, %v", rts, err)
	}
	t.Logf("daemon %s at %s, API %s, runtimes %v", v, e.Host(), e.APIVersion(), rts)
}

// rootCapsMask is container.RootCaps as /proc/PID/status prints capability sets.
func rootCapsMask(t *testing.T) uint64 {
	t.Helper()
	nums := map[string]uint{"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_FOWNER": unix.CAP_FOWNER,
		"CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID, "CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP}
	var m uint64
	for _, c := range bc.RootCaps {
		n, ok := nums[c]
		if !ok {
			t.Fatalf("container.RootCaps has %s: add it here", c)
		}
		m |= 1 << n
	}
	return m
}

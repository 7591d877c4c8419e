//go:build integration

package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	boxcontainer "github.com/moat-sandbox/moat/internal/box/container"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// fixtures are host resources the attacks aim at. Every attack is judged by their state
// afterwards, never by what the box claims.
type fixtures struct {
	canary, canaryData string // a host file holding a secret
	canaryDir          string
	etcMarker          string // a file in the host's /etc, in no box's /etc
	tcpPort, udpPort   int
	tcpHits, udpHits   *atomic.Int64
	sleeper            *exec.Cmd // a host process the box tries to kill
}

// newFixtures makes the host resources. With owner >= 0 the canary directory and file
// belong to that user, who could read, change and delete them on the host: only the box
// stands in the way.
func newFixtures(t *testing.T, owner int) *fixtures {
	t.Helper()
	f := &fixtures{canaryData: "CANARY-" + fmt.Sprint(time.Now().UnixNano()), tcpHits: new(atomic.Int64), udpHits: new(atomic.Int64)}
	base := "/root"
	if owner >= 0 {
		base = os.TempDir()
	}
	f.canaryDir = filepath.Join(base, fmt.Sprintf("moat-attack-%d-%d", os.Getpid(), owner))
	if err := os.MkdirAll(f.canaryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(f.canaryDir) })
	f.etcMarker = fmt.Sprintf("/etc/moat-attack-marker-%d-%d", os.Getpid(), owner)
	if err := os.WriteFile(f.etcMarker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.etcMarker) })
	f.canary = filepath.Join(f.canaryDir, "canary.txt")
	if err := os.WriteFile(f.canary, []byte(f.canaryData), 0o644); err != nil {
		t.Fatal(err)
	}
	if owner >= 0 {
		for _, p := range []string{f.canaryDir, f.canary} {
			if err := os.Chown(p, owner, owner); err != nil {
				t.Fatal(err)
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	f.tcpPort = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.tcpHits.Add(1)
			c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	f.udpPort = pc.LocalAddr().(*net.UDPAddr).Port
	go func() {
		buf := make([]byte, 100)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			f.udpHits.Add(1)
		}
	}()
	f.sleeper = exec.Command("/bin/sleep", "600")
	if err := f.sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sleeper.Process.Kill(); f.sleeper.Wait() })
	return f
}

func (f *fixtures) expand(code string) string {
	return strings.NewReplacer(
		"{CANARY}", f.canary, "{CANARY_DIR}", f.canaryDir, "{CANARY_DATA}", f.canaryData, "{ETC_MARKER}", f.etcMarker,
		"{TCP_PORT}", fmt.Sprint(f.tcpPort), "{UDP_PORT}", fmt.Sprint(f.udpPort),
		"{SLEEPER_PID}", fmt.Sprint(f.sleeper.Process.Pid), "{SECRET}", hostSecret,
	).Replace(code)
}

// assertCanaryIntact: the host canary still exists with its content.
func (f *fixtures) assertCanaryIntact(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(f.canary)
	if err != nil {
		t.Fatalf("host canary is gone: %v", err)
	}
	if string(b) != f.canaryData {
		t.Fatalf("host canary was changed to %q", b)
	}
	entries, _ := os.ReadDir(f.canaryDir)
	if len(entries) != 1 {
		t.Fatalf("host canary dir gained entries: %v", entries)
	}
}

const pyLibc = `import ctypes, ctypes.util, os
libc = ctypes.CDLL(None, use_errno=True)
def sys(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return r, ctypes.get_errno()
`

type attack struct {
	name   string
	lang   string
	code   string
	args   []string
	status []box.Status // acceptable statuses
	// rootlessStatus, when set, replaces status for a rootless moat (no cgroups: memory
	// is bounded by RLIMIT_AS, so a memory bomb ends in MemoryError, status error).
	rootlessStatus []box.Status
	// check judges the host (and, secondarily, the output) afterwards.
	check func(t *testing.T, f *fixtures, o runOut)
	// backendStatus and backendCheck, by backend family (docker, or gvisor for
	// gVisor's kernel under docker or runsc alone), replace status and check
	// where a backend's box differs by design (a comment at each says how); they
	// never accept less of the host's safety.
	backendStatus map[string][]box.Status
	backendCheck  map[string]func(t *testing.T, f *fixtures, o runOut)
}

func attacks() []attack {
	ok := []box.Status{box.StatusOK}
	// onContainers gives the docker and gvisor families the same check.
	onContainers := func(c func(*testing.T, *fixtures, runOut)) map[string]func(*testing.T, *fixtures, runOut) {
		return map[string]func(*testing.T, *fixtures, runOut){config.BackendDocker: c, config.BackendGVisor: c}
	}
	notLeaked := func(t *testing.T, f *fixtures, o runOut) {
		t.Helper()
		if strings.Contains(o.stdout, f.canaryData) || strings.Contains(o.stdout, hostSecret) {
			t.Fatalf("a host secret leaked into the result:\n%s", o)
		}
	}
	stdoutHas := func(want string) func(*testing.T, *fixtures, runOut) {
		return func(t *testing.T, f *fixtures, o runOut) {
			t.Helper()
			notLeaked(t, f, o)
			if !strings.Contains(o.res.Stdout, want) {
				t.Fatalf("stdout lacks %q:\n%s", want, o)
			}
		}
	}
	return []attack{
		// --- host files: read, write, delete ---
		{name: "read host canary by path", lang: "python", code: `
try:
    print(open("{CANARY}").read())
except OSError as e:
    print("denied", type(e).__name__)`, status: ok, check: stdoutHas("denied")},
		{name: "read host canary via /proc/self/root", lang: "python", code: `
try:
    print(open("/proc/self/root{CANARY}").read())
except OSError as e:
    print("denied", type(e).__name__)`, status: ok, check: stdoutHas("denied")},
		{name: "read host canary via /proc/1/root", lang: "python", code: `
try:
    print(open("/proc/1/root{CANARY}").read())
except OSError as e:
    print("denied", type(e).__name__)`, status: ok, check: stdoutHas("denied")},
		{name: "read host canary via dotdot walk", lang: "python", code: `
import os
try:
    print(open("../../../../../../.." + "{CANARY}").read())
except OSError as e:
    print("denied", type(e).__name__)`, status: ok, check: stdoutHas("denied")},
		{name: "read host canary via symlink in workspace", lang: "python", code: `
import os
os.symlink("{CANARY}", "link")
try:
    print(open("link").read())
except OSError as e:
    print("denied", type(e).__name__)`, status: ok, check: stdoutHas("denied")},
		{name: "write host canary", lang: "bash", code: `echo pwned > {CANARY} 2>/dev/null; echo pwned > /proc/1/root{CANARY} 2>/dev/null; echo done`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) { f.assertCanaryIntact(t) }},
		{name: "delete host canary", lang: "bash", code: `rm -rf {CANARY_DIR} /proc/self/root{CANARY_DIR} 2>/dev/null; rm -f /proc/1/root{CANARY} 2>/dev/null; echo done`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) { f.assertCanaryIntact(t) }},
		{name: "create files in host dirs", lang: "bash", code: `for d in /usr/bin /usr/lib /etc /root /var /home /; do touch $d/moat-pwned-{SLEEPER_PID} 2>/dev/null && echo "wrote $d"; done; echo done`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				for _, d := range []string{"/usr/bin", "/usr/lib", "/etc", "/root", "/var", "/home", "/"} {
					p := filepath.Join(d, fmt.Sprintf("moat-pwned-%d", f.sleeper.Process.Pid))
					if _, err := os.Stat(p); err == nil {
						os.Remove(p)
						t.Errorf("the box created %s on the host", p)
					}
				}
				if strings.Contains(o.res.Stdout, "wrote") {
					t.Errorf("a write outside /tmp and /workspace succeeded in the box:\n%s", o)
				}
			}},
		{name: "overwrite host library", lang: "python", code: `
import glob
n = 0
for p in glob.glob("/usr/lib/x86_64-linux-gnu/libc.so*") + ["/usr/bin/python3", "/etc/ld.so.cache"]:
    try:
        open(p, "ab").write(b"x"); n += 1
    except OSError:
        pass
print("written", n)`, status: ok, check: stdoutHas("written 0")},
		// [ -e ] rather than ls: ls fails with EINVAL on gVisor here (see TestBackendsRun).
		{name: "host sensitive trees absent", lang: "bash", code: `
n=0
for p in /root /home /var /etc/shadow /sys /boot /srv /opt /mnt; do [ -e "$p" ] && { echo "$p"; n=$((n+1)); }; done
echo "count=$n"
for p in {CANARY_DIR} {ETC_MARKER} /var/lib/docker /etc/docker /root/go; do [ -e "$p" ] && echo "host tree $p"; done
[ -r /etc/shadow ] && echo "readable /etc/shadow"
echo end`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				t.Helper()
				hostTreesAbsent(t, o)
				if !strings.Contains(o.res.Stdout, "count=0") {
					t.Fatalf("stdout lacks %q:\n%s", "count=0", o)
				}
			},
			// A container's root is its image's, which has /root, /var, /sys (read-only)
			// and so on: what must be absent is the host's trees.
			backendCheck: onContainers(func(t *testing.T, f *fixtures, o runOut) { t.Helper(); hostTreesAbsent(t, o) })},
		{name: "etc holds only generated files", lang: "bash", code: `for e in /etc/*; do printf '%s ' "${e#/etc/}"; done; echo; grep -c . /etc/passwd; [ -r /etc/shadow ] && echo "readable /etc/shadow"; echo end`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				for _, bad := range []string{"shadow", "ssh", "sudoers", "environment", "apt", "docker", filepath.Base(f.etcMarker)} {
					if strings.Contains(o.res.Stdout, bad) {
						t.Fatalf("host /etc entry %q visible in the box:\n%s", bad, o)
					}
				}
				if !strings.Contains(o.res.Stdout, "passwd") {
					t.Fatalf("no generated passwd:\n%s", o)
				}
			},
			// A container's /etc is its image's (shadow, apt... of the image, not the
			// host's): no host-only entry (the test's marker, the host's docker
			// configuration) may show, and the image's shadow must stay unreadable.
			backendCheck: onContainers(func(t *testing.T, f *fixtures, o runOut) {
				t.Helper()
				for _, bad := range []string{filepath.Base(f.etcMarker), "docker", "readable"} {
					if strings.Contains(o.res.Stdout, bad) {
						t.Fatalf("host /etc entry or readable shadow (%q) in the box:\n%s", bad, o)
					}
				}
				if !strings.Contains(o.res.Stdout, "passwd") || !strings.Contains(o.res.Stdout, "end") {
					t.Fatalf("no passwd:\n%s", o)
				}
			})},
		// The runner, its policy and the code: read-only to the code on every backend
		// (under runc the code may chmod them, its user's, but Landlock still refuses
		// the write; gVisor has no Landlock: there the files and their directory are
		// root's).
		{name: "moat's support files unwritable", lang: "python", code: `
import os
bad = []
for name in os.listdir("/.moat"):
    p = "/.moat/" + name
    def chmod_append():
        os.chmod(p, 0o666)
        open(p, "ab").write(b"x")
    for what, op in (("append", lambda: open(p, "ab").write(b"x")), ("chmod+append", chmod_append),
                     ("rename", lambda: os.rename(p, p + ".x")), ("remove", lambda: os.remove(p))):
        try:
            op()
            bad.append(what + " " + name)
        except OSError:
            pass
try:
    open("/.moat/new", "w").close()
    bad.append("create")
except OSError:
    pass
print(sorted(os.listdir("/.moat")), "changed:", bad)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !strings.Contains(o.res.Stdout, "policy.json") || !strings.Contains(o.res.Stdout, "changed: []") {
					t.Fatalf("the code changed moat's files:\n%s", o)
				}
			}},
		{name: "moat binary unreachable", lang: "python", code: `
import os
r = []
for p in ["/proc/1/exe", "/proc/1/root/proc/1/exe"]:
    try:
        open(p, "rb").read(4); r.append("read " + p)
    except OSError as e:
        r.append("denied")
try:
    os.readlink("/proc/1/exe"); r.append("readlink ok")
except OSError:
    r.append("denied")
print(r)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if strings.Contains(o.res.Stdout, "read ") || strings.Contains(o.res.Stdout, "readlink ok") {
					t.Fatalf("the moat binary is reachable from the box:\n%s", o)
				}
			}},
		// moat's own processes in the box (init; a container's agent; a zygote box's
		// PID 1) hold the other ends of the box's pipes and, in a container, the stream
		// to the host: the code must not open them through /proc (gVisor's kernel
		// ignores not-dumpable there; only another user keeps them out).
		{name: "moat's processes' fds", lang: "python", code: `
import os
me, opened, seen = os.getpid(), [], 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    seen += 1
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        continue
    for fd in fds:
        p = "/proc/%s/fd/%s" % (pid, fd)
        try:
            target = os.readlink(p)
        except OSError:
            target = "?"
        if target == "/dev/null":
            continue
        for mode in (os.O_RDONLY, os.O_WRONLY):
            try:
                os.close(os.open(p, mode | os.O_NONBLOCK))
                opened.append("%s (%s)" % (p, target))
            except OSError:
                pass
print("other processes", seen, "opened", opened)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !strings.Contains(o.res.Stdout, "opened []") || strings.Contains(o.res.Stdout, "other processes 0 ") {
					t.Fatalf("the code opened fds of moat's processes in its box (or saw none to try):\n%s", o)
				}
			}},
		// --- secrets and processes ---
		{name: "host environment invisible", lang: "bash", code: `env; cat /proc/*/environ 2>/dev/null | tr '\0' '\n'; echo done`, status: ok, check: func(t *testing.T, f *fixtures, o runOut) {
			notLeaked(t, f, o)
			if strings.Contains(o.res.Stdout, "MOAT_TEST_SECRET") || strings.Contains(o.res.Stdout, "AWS_SECRET") {
				t.Fatalf("host environment variable names visible:\n%s", o)
			}
		}},
		{name: "host processes invisible", lang: "python", code: `
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids", pids)
print("sleeper visible", os.path.exists("/proc/{SLEEPER_PID}/cmdline") and b"sleep" in open("/proc/{SLEEPER_PID}/cmdline","rb").read())`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !strings.Contains(o.res.Stdout, "sleeper visible False") {
					t.Fatalf("host process visible:\n%s", o)
				}
				if strings.Count(o.res.Stdout, ",") > 3 {
					t.Fatalf("more processes than the box's own:\n%s", o)
				}
			}},
		{name: "host processes unkillable", lang: "python", code: `
import os, signal
killed = 0
for pid in [{SLEEPER_PID}, 1] + list(range(2, 4000)):
    try:
        os.kill(pid, signal.SIGKILL); killed += 1
    except OSError:
        pass
print("done")`, status: []box.Status{box.StatusOK, box.StatusKilled}, check: func(t *testing.T, f *fixtures, o runOut) {
			if err := f.sleeper.Process.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("the host process was killed: %v", err)
			}
		}},
		// --- network ---
		{name: "tcp to host loopback listener", lang: "python", code: `
import socket
for host in ["127.0.0.1", "localhost", "::1"]:
    try:
        socket.create_connection((host, {TCP_PORT}), timeout=2); print("connected", host)
    except OSError as e:
        print("refused", host, e.errno)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if f.tcpHits.Load() != 0 || strings.Contains(o.res.Stdout, "connected") {
					t.Fatalf("the host listener got %d connections:\n%s", f.tcpHits.Load(), o)
				}
			}},
		{name: "egress proxy to host listener and metadata", lang: "python", code: `
import socket
for target in [b"127.0.0.1:{TCP_PORT}", b"localhost:{TCP_PORT}", b"169.254.169.254:80", b"[::1]:{TCP_PORT}"]:
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=2)
        s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
        print(target.decode(), s.recv(100).split(b"\r\n")[0].decode())
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    except OSError as e:
        print("no proxy", e.errno)
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=2)
        s.sendall(b"GET http://" + target + b"/latest/meta-data/ HTTP/1.1\r\nHost: " + target + b"\r\n\r\n")
        print(target.decode(), s.recv(100).split(b"\r\n")[0].decode())
    except OSError as e:
        print("no proxy", e.errno)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if f.tcpHits.Load() != 0 || strings.Contains(o.res.Stdout, " 200 ") {
					t.Fatalf("the proxy let a box reach the host or the metadata address (%d connections):\n%s", f.tcpHits.Load(), o)
				}
			}},
		{name: "udp to host loopback listener", lang: "python", code: `
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(20):
    try: s.sendto(b"x", ("127.0.0.1", {UDP_PORT}))
    except OSError: pass
print("sent")`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				time.Sleep(100 * time.Millisecond)
				if n := f.udpHits.Load(); n != 0 {
					t.Fatalf("the host UDP listener got %d datagrams", n)
				}
			}},
		// A docker box's network namespace belongs to the host's user namespace and
		// would receive the host's device events: the socket is refused everywhere.
		{name: "host device events", lang: "python", code: `
import socket
try:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)
    s.bind((0, 1))
    s.settimeout(1)
    print("listening")
    print("event", s.recv(65536)[:80])
except OSError as e:
    print("refused", e.errno)`, status: ok, check: stdoutHas("refused 1\n")},
		{name: "no interfaces but loopback", lang: "bash", code: `ls /proc/sys/net/ipv4/conf/ | tr '\n' ' '; echo; cat /proc/net/route | wc -l`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				fields := strings.Fields(strings.Split(o.res.Stdout, "\n")[0])
				for _, i := range fields {
					if i != "all" && i != "default" && i != "lo" {
						t.Fatalf("interface %q in the box:\n%s", i, o)
					}
				}
			}},
		// --- resource exhaustion ---
		{name: "fork bomb python", lang: "python", args: []string{"--timeout", "5s"}, code: `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass`, status: []box.Status{box.StatusTimeout, box.StatusError, box.StatusKilled, box.StatusMemoryLimit}},
		{name: "fork bomb bash", lang: "bash", args: []string{"--timeout", "5s"}, code: `b(){ b|b& }; b; sleep 30`,
			status: []box.Status{box.StatusTimeout, box.StatusError, box.StatusOK, box.StatusKilled}},
		{name: "thread bomb", lang: "python", args: []string{"--timeout", "5s"}, code: `
import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); n += 1
except RuntimeError as e:
    print("stopped at", n, "threads")`, status: []box.Status{box.StatusOK, box.StatusError, box.StatusTimeout},
			check: func(t *testing.T, f *fixtures, o runOut) {
				if o.res.Status == box.StatusOK && !strings.Contains(o.res.Stdout, "stopped at") {
					t.Fatalf("thread bomb not stopped:\n%s", o)
				}
			}},
		{name: "process limit is exact", lang: "python", args: []string{"--pids", "10"}, code: `
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(3); os._exit(0)
        n += 1
except OSError as e:
    print("forks", n, e.errno)`, status: ok, check: stdoutHas("forks 9 11"),
			// In a container moat's agent and init share the code's user and the
			// container's pids limit (Limits.Pids plus a reserve for them): the limit
			// holds, but is not exact, and code that reaches it may starve moat's own
			// processes, which ends the box (status killed). What must hold: the box
			// ends with a result, and the code never gets far past its limit.
			backendStatus: map[string][]box.Status{
				config.BackendDocker: {box.StatusOK, box.StatusKilled},
				config.BackendGVisor: {box.StatusOK, box.StatusKilled},
			},
			backendCheck: onContainers(func(t *testing.T, f *fixtures, o runOut) {
				t.Helper()
				var n, errno int
				if _, err := fmt.Sscanf(o.res.Stdout, "forks %d %d", &n, &errno); err == nil && n > 10+boxcontainer.AgentTasks {
					t.Fatalf("%d forks under --pids 10:\n%s", n, o)
				}
			})},
		{name: "memory bomb", lang: "python", args: []string{"--memory", "64MiB"}, code: `
x = []
while True:
    x.append(bytearray(8 << 20))`, status: []box.Status{box.StatusMemoryLimit}, rootlessStatus: []box.Status{box.StatusError}},
		{name: "memory bomb in a child", lang: "bash", args: []string{"--memory", "64MiB"}, code: `/usr/bin/python3 -c 'x=bytearray(512<<20); x[::4096]=b"x"*len(x[::4096])'`, status: []box.Status{box.StatusMemoryLimit}, rootlessStatus: []box.Status{box.StatusError}},
		{name: "disk fill workspace", lang: "python", args: []string{"--disk", "8MiB"}, code: `
n = 0
with open("big", "wb") as f:
    while True:
        f.write(b"x" * (1 << 20)); f.flush(); n += 1`, status: []box.Status{box.StatusError},
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !strings.Contains(o.res.Stderr, "No space left") {
					t.Fatalf("disk fill did not hit ENOSPC:\n%s", o)
				}
			}},
		{name: "disk fill tmp", lang: "bash", args: []string{"--tmp", "4MiB"}, code: `head -c 64M /dev/zero > /tmp/fill; echo rc=$?; du -sk /tmp/fill`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !strings.Contains(o.res.Stdout, "rc=1") {
					t.Fatalf("/tmp was not capped:\n%s", o)
				}
			}},
		{name: "output flood", lang: "python", args: []string{"--output-limit", "64KiB"}, code: `
import sys
while True:
    sys.stdout.write("A" * 65536)`, status: []box.Status{box.StatusOutputLimit},
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !o.res.Truncated || len(o.res.Stdout) > 70000 {
					t.Fatalf("flood not capped: truncated=%v len=%d", o.res.Truncated, len(o.res.Stdout))
				}
			}},
		// The code can write to its report channel too: a result line of its own is
		// held to the runner's cap like the runner's, and marked as cut. (No limits
		// of its own: the pool's boxes are tried too.)
		{name: "forged result past the caps", lang: "python", code: `
import os, json
line = (json.dumps({"kind": "result", "repr": "R" * (7 << 20)}) + "\n").encode()
for name in os.listdir("/proc/self/fd"):
    if int(name) > 2:
        try:
            os.write(int(name), line)
        except OSError:
            pass
print("done")`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if o.res.Result != nil && (len(*o.res.Result) > 64<<10 || !o.res.Truncated) {
					t.Fatalf("a result of %d bytes, truncated=%v, want at most 64 KiB and marked", len(*o.res.Result), o.res.Truncated)
				}
				if len(o.stdout) > 100<<10 {
					t.Fatalf("moat printed %d bytes for a result of 64 KiB and 5 bytes of output", len(o.stdout))
				}
			}},
		// The box's cgroup files reach its init (a cold box's is born in the cgroup)
		// or a pooled box's PID 1 (J moves itself in through tasks files the server
		// opens): none of them may reach the code, which could use moat's credentials
		// on them.
		{name: "no cgroup files among the code's fds", lang: "python", code: `
import os
for name in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        target = os.readlink("/proc/self/fd/" + name)
    except OSError:
        continue
    if "cgroup" in target or target.endswith(("/tasks", "/cgroup.procs")):
        print("HELD", name, target)
print("checked")`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if !strings.Contains(o.res.Stdout, "checked") || strings.Contains(o.res.Stdout, "HELD") {
					t.Fatalf("the code holds cgroup files: %q", o.res.Stdout)
				}
			}},
		{name: "infinite loop", lang: "python", args: []string{"--timeout", "1s"}, code: `while True: pass`, status: []box.Status{box.StatusTimeout},
			check: func(t *testing.T, f *fixtures, o runOut) {
				if o.res.DurationMS < 900 || o.res.DurationMS > 5000 {
					t.Fatalf("timeout of 1s took %d ms", o.res.DurationMS)
				}
			}},
		{name: "double-forked daemon ignoring SIGTERM", lang: "python", code: `
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        while True:
            time.sleep(1)
    os._exit(0)
time.sleep(0.3)
print("parent exits")`, status: ok, check: stdoutHas("parent exits")},
		{name: "daemon outlives timeout", lang: "bash", args: []string{"--timeout", "2s"}, code: `(setsid sleep 600 &) ; nohup sleep 600 >/dev/null 2>&1 & disown; sleep 100`, status: []box.Status{box.StatusTimeout}},
		// --- kernel attack surface ---
		{name: "ptrace", lang: "python", code: pyLibc + `
print("traceme", libc.ptrace(0, 0, 0, 0), ctypes.get_errno())
pid = os.fork()
if pid == 0:
    import time; time.sleep(5); os._exit(0)
print("attach", libc.ptrace(16, pid, 0, 0), ctypes.get_errno())
# Other ways into a sibling: its fds (pidfd_getfd), its memory (process_vm_readv,
# process_madvise), comparing its kernel objects (kcmp).
try:
    pidfd = os.pidfd_open(pid)
except OSError:  # gVisor's kernel has no pidfd_open: the filter still answers first
    pidfd = -1
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
print("pidfd_getfd", *sys(438, pidfd, 0, 0))
print("process_vm_readv", *sys(310, pid, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0))
print("process_madvise", *sys(440, pidfd, ctypes.addressof(iov), 1, 21, 0))
print("kcmp", *sys(312, os.getpid(), pid, 0, 0, 0))
os.kill(pid, 9)`, status: ok,
			check: stdoutHas("traceme -1 1\nattach -1 1\npidfd_getfd -1 1\nprocess_vm_readv -1 1\nprocess_madvise -1 1\nkcmp -1 1\n")},
		{name: "mount", lang: "python", code: pyLibc + `
print("mount", libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None), ctypes.get_errno())
print("umount", libc.umount2(b"/proc", 2), ctypes.get_errno())
# The new mount API: fsopen, open_tree (a detached copy of /), fspick, move_mount, mount_setattr.
tmpfs, root, tmp, ws = (ctypes.create_string_buffer(b) for b in (b"tmpfs", b"/", b"/tmp", b"/workspace"))
at = ctypes.addressof
print("fsopen", *sys(430, at(tmpfs), 0))
print("open_tree", *sys(428, -100, at(root), 1 | 0x8000))
print("fspick", *sys(433, -100, at(tmp), 0))
print("move_mount", *sys(429, -100, at(tmp), -100, at(ws), 0))
print("mount_setattr", *sys(442, -100, at(root), 0, 0, 0))`, status: ok,
			check: stdoutHas("mount -1 1\numount -1 1\nfsopen -1 1\nopen_tree -1 1\nfspick -1 1\nmove_mount -1 1\nmount_setattr -1 1\n")},
		{name: "unshare and setns", lang: "python", code: pyLibc + `
for flag in [0x10000000, 0x00020000, 0x20000000, 0x40000000]:
    print("unshare", hex(flag), libc.unshare(flag), ctypes.get_errno())
try:
    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    print("setns", libc.setns(fd, 0), ctypes.get_errno())
except FileNotFoundError:
    print("setns unavailable: no /proc/self/ns")
import subprocess
print("unshare-cmd", subprocess.run(["/usr/bin/unshare", "-r", "true"], capture_output=True).returncode)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if strings.Contains(o.res.Stdout, " 0 ") || !strings.Contains(o.res.Stdout, "setns -1") || strings.Contains(o.res.Stdout, "unshare-cmd 0") {
					t.Fatalf("namespace creation succeeded:\n%s", o)
				}
			},
			// gVisor has no /proc/self/ns: there is no namespace file to setns into.
			// unshare must still fail with EPERM, as must unshare(1).
			backendCheck: map[string]func(*testing.T, *fixtures, runOut){config.BackendGVisor: func(t *testing.T, f *fixtures, o runOut) {
				t.Helper()
				if strings.Count(o.res.Stdout, " -1 1\n") != 4 || !strings.Contains(o.res.Stdout, "setns unavailable: no /proc/self/ns") ||
					strings.Contains(o.res.Stdout, "unshare-cmd 0") || !strings.Contains(o.res.Stdout, "unshare-cmd") {
					t.Fatalf("namespace creation succeeded:\n%s", o)
				}
			}}},
		{name: "clone with namespace flags", lang: "python", code: pyLibc + `
import signal
# clone(CLONE_NEWUSER|SIGCHLD) via raw syscall 56
print("clone", *sys(56, 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0))`, status: ok, check: stdoutHas("clone -1 1")},
		// The other system call ABIs of x86-64 must not get around the filter: x32
		// (the number with bit 30 set) and i386 (int 0x80, with its own numbers:
		// unshare is 310 there). Each try runs in a child of its own, which reports
		// whether its user namespace changed.
		{name: "other system call ABIs", lang: "python", code: `
import ctypes, mmap, os, platform
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    pid = os.fork()
    if pid == 0:
        before = os.readlink("/proc/self/ns/user")
        try:
            r = call()
        except Exception as e:
            r = repr(e)
        print(name, r, "same-ns" if os.readlink("/proc/self/ns/user") == before else "NEW-NS", flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status):
        print(name, "killed", os.WTERMSIG(status), "same-ns", flush=True)
if platform.machine() != "x86_64":
    print("x32 -1 same-ns\ni386 -1 same-ns")
else:
    attempt("x32", lambda: libc.syscall(ctypes.c_long(0x40000000 | 272), ctypes.c_long(0x10000000)))
    # push rbx; mov eax, 310; mov ebx, CLONE_NEWUSER; int 0x80; pop rbx; ret
    code = b"\x53\xb8" + (310).to_bytes(4, "little") + b"\xbb" + (0x10000000).to_bytes(4, "little") + b"\xcd\x80\x5b\xc3"
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
    attempt("i386", f)`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				lines := strings.Split(strings.TrimSpace(o.res.Stdout), "\n")
				if len(lines) != 2 {
					t.Fatalf("want 2 lines:\n%s", o)
				}
				for _, l := range lines {
					if !strings.HasSuffix(l, " same-ns") || strings.Contains(l, " 0 ") {
						t.Errorf("another ABI got past the filter: %s", l)
					}
				}
			}},
		{name: "bpf keyctl module loading", lang: "python", code: pyLibc + `
print("bpf", *sys(321, 0, 0, 0))
print("keyctl", *sys(250, 0, 0, 0))
print("add_key", *sys(248, 0, 0, 0, 0, 0))
print("init_module", *sys(175, 0, 0, 0))
print("finit_module", *sys(313, 0, 0, 0))
print("delete_module", *sys(176, 0, 0))
print("perf_event_open", *sys(298, 0, 0, 0, 0, 0))
print("userfaultfd", *sys(323, 0))
print("kexec_load", *sys(246, 0, 0, 0, 0))
print("reboot", *sys(169, 0, 0, 0, 0))
print("io_uring_setup", *sys(425, 1, 0))
print("open_by_handle_at", *sys(304, 0, 0, 0))
print("clock_settime", *sys(227, 0, 0))
print("swapon", *sys(167, 0, 0))
print("acct", *sys(163, 0))
print("modify_ldt", *sys(154, 1, 0, 0))
print("memfd_secret", *sys(447, 0))`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				lines := strings.Split(strings.TrimSpace(o.res.Stdout), "\n")
				if len(lines) != 17 {
					t.Fatalf("want 17 lines:\n%s", o)
				}
				for _, l := range lines {
					if !strings.HasSuffix(l, " -1 1") {
						t.Errorf("not denied with EPERM: %s", l)
					}
				}
			}},
		{name: "no capabilities and no_new_privs", lang: "bash", code: `grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Uid|Gid):' /proc/self/status
/usr/bin/python3 -c 'import ctypes; print("prctl_no_new_privs", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534\t65534\t65534\t65534", "prctl_no_new_privs 1"} {
					if !strings.Contains(o.res.Stdout, want) {
						t.Errorf("want %q in /proc/self/status:\n%s", want, o.res.Stdout)
					}
				}
			},
			// gVisor's /proc/self/status has no CapAmb or NoNewPrivs line: no_new_privs
			// is asked of prctl(PR_GET_NO_NEW_PRIVS), and ambient capabilities must be a
			// subset of the permitted and inheritable ones, which are empty.
			backendCheck: map[string]func(*testing.T, *fixtures, runOut){config.BackendGVisor: func(t *testing.T, f *fixtures, o runOut) {
				t.Helper()
				for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "Seccomp:\t2", "Uid:\t65534\t65534\t65534\t65534", "Gid:\t65534\t65534\t65534\t65534", "prctl_no_new_privs 1"} {
					if !strings.Contains(o.res.Stdout, want) {
						t.Errorf("want %q in /proc/self/status or from prctl:\n%s", want, o.res.Stdout)
					}
				}
			}}},
		{name: "chroot and setuid", lang: "python", code: `
import os
for name, fn in [("chroot", lambda: os.chroot("/tmp")), ("setuid0", lambda: os.setuid(0)), ("sethostname", lambda: __import__("socket").sethostname("x"))]:
    try:
        fn(); print(name, "ok")
    except OSError as e:
        print(name, "denied")`, status: ok, check: stdoutHas("chroot denied\nsetuid0 denied\nsethostname denied")},
		{name: "devices", lang: "bash", code: `for d in /dev/* /dev/.[!.]*; do [ -e "$d" ] || [ -L "$d" ] && printf '%s ' "${d#/dev/}"; done; echo
for d in kvm mem kmem port sda vda nvme0 loop0 mapper tty console; do [ -e /dev/$d ] && echo "present $d"; done
{ : </dev/tty; } 2>/dev/null && echo "opened tty"
echo end`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				t.Helper()
				checkDevices(t, o, nil)
			},
			// Docker gives every container mqueue (its IPC namespace's queues), ptmx and
			// pts (a devpts instance of its own) and tty. moat attaches no terminal, so
			// /dev/tty has no controlling terminal behind it and must fail to open.
			// gVisor has no mqueue but emulates fuse and net/tun in its own kernel (not
			// the host's devices); both are useless without CAP_SYS_ADMIN (mount) and
			// CAP_NET_ADMIN (TUNSETIFF), which the box lacks.
			backendCheck: map[string]func(*testing.T, *fixtures, runOut){
				config.BackendDocker: func(t *testing.T, f *fixtures, o runOut) {
					t.Helper()
					checkDevices(t, o, []string{"mqueue", "ptmx", "pts", "tty"})
				},
				config.BackendGVisor: func(t *testing.T, f *fixtures, o runOut) {
					t.Helper()
					checkDevices(t, o, []string{"ptmx", "pts", "tty", "fuse", "net"})
				},
			}},
		// A device node is refused on every backend: by the host kernel (no CAP_MKNOD)
		// and by moat's seccomp filter, which also covers a runtime with a kernel of its
		// own (gVisor's would make them). A FIFO is fine.
		{name: "device nodes", lang: "python", code: `
import os, stat
made = []
for name, kind, dev in (("sda", stat.S_IFBLK, (8, 0)), ("mem", stat.S_IFCHR, (1, 1)), ("kvm", stat.S_IFCHR, (10, 232))):
    for d in ("/tmp", "/workspace"):
        try:
            os.mknod(d + "/" + name, 0o666 | kind, os.makedev(*dev))
            made.append(d + "/" + name)
        except OSError:
            pass
os.mkfifo("/tmp/fifo")
print("made", made, "fifo", stat.S_ISFIFO(os.stat("/tmp/fifo").st_mode))`, status: ok, check: stdoutHas("made [] fifo True")},
		// A box cannot take CPU from the host by raising its priority (gVisor's kernel
		// allowed a negative nice; moat's seccomp filter refuses it there too).
		{name: "scheduling priority", lang: "python", code: `
import os
got = []
for name, f in (("nice -5", lambda: os.setpriority(os.PRIO_PROCESS, 0, -5)),
                ("nice -20 of the group", lambda: os.setpriority(os.PRIO_PGRP, 0, -20)),
                ("SCHED_FIFO", lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))),
                ("SCHED_RR", lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1)))):
    try:
        f()
        got.append(name)
    except OSError:
        pass
print("raised", got, "nice", os.getpriority(os.PRIO_PROCESS, 0))`, status: ok, check: stdoutHas("raised [] nice 0")},
		{name: "proc and sys hardening", lang: "bash", code: `echo x > /proc/sys/kernel/hostname 2>/dev/null && echo wrote-sysctl; echo b > /proc/sysrq-trigger 2>/dev/null && echo wrote-sysrq; head -c1 /proc/kcore 2>/dev/null | wc -c; echo end`, status: ok,
			check: func(t *testing.T, f *fixtures, o runOut) {
				if strings.Contains(o.res.Stdout, "wrote") || !strings.Contains(o.res.Stdout, "0\nend") {
					t.Fatalf("proc not hardened:\n%s", o)
				}
			}},
		{name: "setuid binary gains nothing", lang: "bash", code: `for b in /usr/bin/su /usr/bin/sudo /usr/bin/passwd /usr/bin/newgrp; do [ -x $b ] && $b -h </dev/null >/dev/null 2>&1; done; id -u`, status: ok, check: stdoutHas("65534")},
	}
}

func TestAttacks(t *testing.T) {
	testutil.RequireRoot(t)
	runAttacks(t, nil, nil)
}

// TestAttacksAllowlist runs the attacks in boxes whose network is an allowlist (of a
// loopback server of the test's that no attack aims at): the egress proxy must not
// open a way out of the box.
func TestAttacksAllowlist(t *testing.T) {
	testutil.RequireRoot(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	runAttacks(t, nil, nil, "--network", "allow:pypi.org:443,"+l.Addr().String())
}

// TestAttacksRootless runs the same attacks with moat started by an ordinary host user
// (nobody): user namespaces without root, no cgroups. The canary belongs to that user.
func TestAttacksRootless(t *testing.T) {
	testutil.RequireRoot(t) // to create the fixtures and switch to the other user
	runAttacks(t, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, nil)
}

// TestAttacksDocker runs the attacks with each box a container of the docker backend.
// Host-side checks also look for the containers each run made (none may be left) and
// for host processes of the containers' uid.
func TestAttacksDocker(t *testing.T) {
	b := backendByID(t, "docker")
	runAttacks(t, nil, &b, b.args(requireContainerBackend(t, b.id))...)
}

// TestAttacksDockerRunsc runs the attacks with each box a container of the docker
// backend on the daemon's runsc runtime (gVisor).
func TestAttacksDockerRunsc(t *testing.T) {
	b := backendByID(t, "docker-runsc")
	runAttacks(t, nil, &b, b.args(requireContainerBackend(t, b.id))...)
}

// TestAttacksGVisor runs the attacks with each box a sandbox of the gvisor backend
// (runsc directly). Host-side checks also look for its sandboxes' bundles, cgroups
// and processes (none may be left).
func TestAttacksGVisor(t *testing.T) {
	b := backendByID(t, "gvisor")
	runAttacks(t, nil, &b, b.args(requireContainerBackend(t, b.id))...)
}

// runAttacks runs every attack as cred (nil: as root) on the container backend cb
// (nil: native), with extraArgs for moat run.
func runAttacks(t *testing.T, cred *syscall.Credential, cb *containerBackend, extraArgs ...string) {
	owner := -1
	if cred != nil {
		owner = int(cred.Uid)
	}
	backend := config.BackendNative
	if cb != nil {
		backend = cb.family
	}
	container := cb != nil
	f := newFixtures(t, owner)
	cases := attacks()
	if len(cases) < 30 {
		t.Fatalf("the attack suite has %d cases, want at least 30", len(cases))
	}
	for _, a := range cases {
		t.Run(a.name, func(t *testing.T) {
			before := snapshotHost(t)
			// Policy off: the box alone must hold.
			args := append(append([]string{"run", "--json", "--profile", "open", "--lang", a.lang}, extraArgs...), a.args...)
			o := moatExecAs(t, cred, f.expand(a.code), args...)
			if o.exit != 0 {
				t.Fatalf("moat failed:\n%s", o)
			}
			want := a.status
			if cred != nil && a.rootlessStatus != nil {
				want = a.rootlessStatus
			}
			if st, ok := a.backendStatus[backend]; ok {
				want = st
			}
			okStatus := false
			for _, s := range want {
				okStatus = okStatus || o.res.Status == s
			}
			if !okStatus {
				t.Errorf("status %s, want one of %v\n%s", o.res.Status, want, o)
			}
			if cred != nil && !slices.Contains(o.res.Isolation, "rootless") {
				t.Errorf("a rootless run does not say so in isolation: %v", o.res.Isolation)
			}
			if container {
				cb.checkIsolation(t, o)
			}
			check := a.check
			if c, ok := a.backendCheck[backend]; ok {
				check = c
			}
			if check != nil {
				check(t, f, o)
			}
			f.assertCanaryIntact(t)
			if strings.Contains(o.stdout, hostSecret) {
				t.Errorf("the host secret leaked into the result")
			}
			switch {
			case container:
				// A container's processes run as the box's uid on the host (no user
				// namespace): none may survive, nor may the container.
				cb.checkNoBoxes(t, o)
				checkHostClean(t, before, boxcontainer.BoxUID)
			case owner >= 0:
				checkHostClean(t, before, owner)
			default:
				checkHostClean(t, before)
			}
		})
	}
}

// hostTreesAbsent: the host's own trees (the canary's directory, the marker in the
// host's /etc, docker's state) are not in the box, and /etc/shadow is not readable.
func hostTreesAbsent(t *testing.T, o runOut) {
	t.Helper()
	if strings.Contains(o.res.Stdout, "host tree") || strings.Contains(o.res.Stdout, "readable") || !strings.Contains(o.res.Stdout, "end") {
		t.Fatalf("a host tree is visible in the box, or /etc/shadow is readable:\n%s", o)
	}
}

// checkDevices: /dev holds only the harmless devices (and extra, which a backend adds
// by design), no forbidden one but those of extra is present, and /dev/tty does not
// open.
func checkDevices(t *testing.T, o runOut, extra []string) {
	t.Helper()
	if !strings.Contains(o.res.Stdout, "end") || strings.Contains(o.res.Stdout, "opened tty") {
		t.Fatalf("/dev/tty opened, or the probe failed:\n%s", o)
	}
	for _, line := range strings.Split(o.res.Stdout, "\n") {
		if d, ok := strings.CutPrefix(line, "present "); ok && !slices.Contains(extra, d) {
			t.Errorf("forbidden device present: %s\n%s", d, o)
		}
	}
	allowed := []string{"null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm"}
	for _, d := range strings.Fields(strings.Split(o.res.Stdout, "\n")[0]) {
		if !slices.Contains(allowed, d) && !slices.Contains(extra, d) {
			t.Errorf("unexpected /dev entry %q", d)
		}
	}
}

package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/linux/landlock"
	"github.com/moat-sandbox/moat/internal/policy/python"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// The tests in this file attack boxes forked from one zygote (zygote_linux.go) from
// each other. Every check looks at an effect, from inside a box or from the host's
// /proc and /sys/fs/cgroup, never at the backend's own bookkeeping: a box that does
// not see a file, a connection refused, a process alive on the host.

// zygoteSpec is a Python session spec as the engine's warm pool makes one: the policy
// runner in session mode with its zygote, under a policy that is off, so that only
// the box holds.
func zygoteSpec(lim box.Limits) *box.SessionSpec {
	argv := python.SessionInterpreter(python.RunnerPath)
	return &box.SessionSpec{
		Language:    "python",
		Interpreter: argv,
		Zygote:      python.ZygoteInterpreter(argv),
		Support:     python.Support(python.Policy{Profile: "open", Mode: python.ModeOff, FileAccess: python.FileAny}, nil),
		Limits:      lim,
	}
}

// startZygoteBox starts a session of spec on b, closed when owner ends, and fails
// unless it says it was forked from a zygote (a silent fallback to a cold box would
// test nothing here).
func startZygoteBox(t, owner *testing.T, b *Backend, spec *box.SessionSpec) box.Session {
	t.Helper()
	s, err := b.StartSession(context.Background(), spec)
	if err != nil {
		t.Fatalf("start a session: %v", err)
	}
	owner.Cleanup(func() { _ = s.Close() })
	if !slices.Contains(s.Isolation(), "zygote") {
		t.Fatalf("the session's box was made cold: isolation %v", s.Isolation())
	}
	return s
}

// pyOK runs code in s and fails unless it ended ok; it returns the stdout.
func pyOK(t *testing.T, s box.Session, code string) string {
	t.Helper()
	res := call(t, s, code, 30*time.Second)
	if res.Status != box.StatusOK {
		t.Fatalf("%.300s\n: status %s exit %d\nstdout %q\nstderr %q", code, res.Status, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// pyJSON runs code, whose last line of output is a JSON object, into v.
func pyJSON(t *testing.T, s box.Session, code string, v any) {
	t.Helper()
	out := strings.TrimSpace(pyOK(t, s, code))
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
}

// hostProc is a process as the host's /proc shows it.
type hostProc struct {
	pid, ppid, uid int
	start          string // starttime in stat: a reused pid has another
	cmdline        string // the arguments joined by spaces
}

func readHostProc(pid int) (hostProc, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return hostProc{}, false
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return hostProc{}, false
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	// After the command's name, which may hold spaces and parentheses: state, ppid,
	// ... starttime is field 22 of stat, the 20th after the name.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return hostProc{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return hostProc{}, false
	}
	p := hostProc{pid: pid, uid: -1, start: f[19], cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))}
	p.ppid, _ = strconv.Atoi(f[1])
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if u := strings.Fields(v); len(u) > 0 {
				p.uid, _ = strconv.Atoi(u[0])
			}
		}
	}
	return p, true
}

// hostProcs returns the host's processes by pid.
func hostProcs(t *testing.T) map[int]hostProc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]hostProc{}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := readHostProc(pid); ok {
				out[pid] = p
			}
		}
	}
	return out
}

// descends says whether pid is a descendant of ancestor in procs.
func descends(procs map[int]hostProc, pid, ancestor int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		p, ok := procs[pid]
		if !ok {
			return false
		}
		if p.ppid == ancestor {
			return true
		}
		pid = p.ppid
	}
	return false
}

// ourBoxProcesses lists the host processes of this test process's boxes: running as
// a box's host uid, and either descending from this process or in one of its boxes'
// cgroups. Other moat processes on the host (their boxes run as the same uids) are
// not counted.
func ourBoxProcesses(t *testing.T) []hostProc {
	t.Helper()
	procs := hostProcs(t)
	mark := fmt.Sprintf("/box-%d-", os.Getpid())
	var out []hostProc
	for _, p := range procs {
		if p.uid != HostRootUID && p.uid != HostBoxUID {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p.pid))
		if descends(procs, p.pid, os.Getpid()) || bytes.Contains(cg, []byte(mark)) {
			out = append(out, p)
		}
	}
	return out
}

// zygoteOf returns the host's view of the zygote that forked the box of s: the parent
// of the box's PID 1, a Python interpreter started with --zygote, running as the
// zygote box's root (HostRootUID), below this test process.
func zygoteOf(t *testing.T, s box.Session) hostProc {
	t.Helper()
	j := boxInit(t, s)
	procs := hostProcs(t)
	z, ok := procs[j.ppid]
	if !ok || z.uid != HostRootUID || !strings.Contains(z.cmdline, "--zygote") || !descends(procs, z.pid, os.Getpid()) {
		t.Fatalf("the box's PID 1 %+v is not a zygote's child: its parent is %+v", j, z)
	}
	return z
}

// boxInit returns the host's view of the PID 1 of a box forked from a zygote (its
// agent, J), from the pid the kernel gave the server at the hand-over.
func boxInit(t *testing.T, s box.Session) hostProc {
	t.Helper()
	zb := s.(*session).bp.zy
	if zb == nil {
		t.Fatal("the session's box was not forked from a zygote")
	}
	p, ok := readHostProc(zb.pid)
	if !ok {
		t.Fatalf("the box's PID 1 (host pid %d) is not on the host", zb.pid)
	}
	return p
}

// childOf returns the only child of pid on the host whose command line has want.
func childOf(t *testing.T, pid int, want string) hostProc {
	t.Helper()
	var found []hostProc
	for _, p := range hostProcs(t) {
		if p.ppid == pid && strings.Contains(p.cmdline, want) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one child %q of %d, found %v", want, pid, found)
	}
	return found[0]
}

// namespaces returns the namespace identities of a host process, by kind.
func namespaces(t *testing.T, pid int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil {
			t.Fatalf("namespaces of %d: %v", pid, err)
		}
		out[ns] = l
	}
	return out
}

// privProbe prints what a box's code holds: its ids, the pids it sees, and the
// privilege lines of its own and its PID 1's status.
const privProbe = `import os, json
def status(pid):
    out = {}
    for line in open('/proc/%s/status' % pid):
        k, _, v = line.partition(':')
        if k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):
            out[k] = v.strip()
    return out
print(json.dumps({'uid': os.getresuid(), 'gid': os.getresgid(), 'groups': os.getgroups(),
    'me': os.getpid(), 'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    'self': status('self'), 'init': status(1)}))
`

type privSeen struct {
	UID, GID, Groups []int
	Me               int
	Pids             []int
	Self, Init       map[string]string
}

// nsProbe tries to leave or change the box's namespaces and mounts; each line is
// "what result errno".
const nsProbe = `import ctypes, os, platform, signal, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def show(what, r):
    print(what, r, ctypes.get_errno() if r < 0 else 0)
for name, flag in (('user', 0x10000000), ('mnt', 0x00020000), ('pid', 0x20000000), ('net', 0x40000000),
                   ('ipc', 0x08000000), ('uts', 0x04000000), ('cgroup', 0x02000000)):
    show('unshare-' + name, libc.unshare(flag))
    nr = {'x86_64': 56, 'aarch64': 220}[platform.machine()]
    r = libc.syscall(ctypes.c_long(nr), ctypes.c_long(flag | signal.SIGCHLD), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if r == 0:
        os._exit(0)  # a child in new namespaces: it must not go on as the probe
    if r > 0:
        os.waitpid(r, 0)
    show('clone-' + name, r)
for name in ('user', 'mnt', 'net', 'pid', 'ipc', 'uts'):
    fd = os.open('/proc/self/ns/' + name, os.O_RDONLY)
    show('setns-' + name, libc.setns(fd, 0))
    os.close(fd)
show('mount', libc.mount(b'tmpfs', b'/workspace', b'tmpfs', 0, None))
show('remount', libc.mount(None, b'/', None, 32 | 4096, None))
show('umount', libc.umount2(b'/proc', 2))
show('chroot', libc.chroot(b'/tmp'))
r = subprocess.run(['/usr/bin/unshare', '-r', 'true'], capture_output=True).returncode
print('unshare-cmd', -1 if r else 0, r)
`

// traceProbe prints which of the traces plantTraces leaves the box sees: files, IPC
// objects, sockets (by connecting, by binding A's UDP port, and in the network
// namespace's /proc/net tables), processes. It also sends a datagram to A's UDP port.
const traceProbe = `import os, socket, ctypes, json, _posixshmem
libc = ctypes.CDLL(None, use_errno=True)
seen = {'files': [p for p in ('/tmp/a', '/workspace/a', '/dev/shm/a') if os.path.exists(p)]}
try:
    os.close(_posixshmem.shm_open('/moat-zygote-a', os.O_RDWR, 0))
    seen['posix_shm'] = True
except FileNotFoundError:
    seen['posix_shm'] = False
seen['sysv_shm'] = libc.shmget(0x6d6f6174, 0, 0) >= 0
seen['sysv_msg'] = libc.msgget(0x6d6f6174, 0) >= 0
seen['sysv_sem'] = libc.semget(0x6d6f6174, 0, 0) >= 0
for name, fam, addr in (('tcp', socket.AF_INET, ('127.0.0.1', 4242)), ('abstract', socket.AF_UNIX, '\0moat-zygote-a'),
                        ('unix', socket.AF_UNIX, '/tmp/a.sock')):
    c = socket.socket(fam)
    c.settimeout(5)
    try:
        c.connect(addr)
        seen[name] = 'connected'
    except OSError as e:
        seen[name] = e.errno
    c.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.bind(('127.0.0.1', 4242))
    seen['udp_bind'] = 'bound'
except OSError as e:
    seen['udp_bind'] = e.errno
u.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b'probe-%d' % os.getpid(), ('127.0.0.1', 4242))
u.close()
seen['unix_listed'] = '@moat-zygote-a' in open('/proc/net/unix').read()
seen['udp_listed'] = ':1092 ' in open('/proc/net/udp').read()
sleepers = []
for p in os.listdir('/proc'):
    try:
        if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read() == b'sleep\x001000\x00':
            sleepers.append(int(p))
    except OSError:
        pass
seen['sleepers'] = sleepers
print(json.dumps(seen))
`

// any says whether seen holds any trace of box A.
func (seen traces) any() bool {
	return len(seen.Files) > 0 || seen.PosixShm || seen.SysvShm || seen.SysvMsg || seen.SysvSem ||
		seen.TCP == "connected" || seen.Abstract == "connected" || seen.Unix == "connected" ||
		seen.UDPBind != "bound" || seen.UnixListed || seen.UDPListed || len(seen.Sleepers) > 0
}

// all says whether seen holds every trace of box A that a box can leave (TCP aside:
// Landlock denies every box a TCP bind).
func (seen traces) all() bool {
	return len(seen.Files) == 3 && seen.PosixShm && seen.SysvShm && seen.SysvMsg && seen.SysvSem &&
		seen.Abstract == "connected" && seen.Unix == "connected" &&
		seen.UDPBind == float64(syscall.EADDRINUSE) && seen.UnixListed && seen.UDPListed && len(seen.Sleepers) == 1
}

// plantTraces leaves a trace of every kind in a box: a process, files in each
// writable directory, POSIX and SysV IPC objects, a bound UDP socket, listening
// abstract and path unix sockets (and a TCP listener where the box may have one), and
// interpreter state (variables, a module, the environment, a builtin, a patched
// function). The session keeps them alive between calls. It prints the sleep's pid
// and how the TCP listen went.
const plantTraces = `import os, socket, subprocess, ctypes, _posixshmem, sys, builtins, colorsys
libc = ctypes.CDLL(None, use_errno=True)
sleeper = subprocess.Popen(['sleep', '1000'])
for p in ('/tmp/a', '/workspace/a', '/dev/shm/a'):
    with open(p, 'w') as fh:
        fh.write('A')
shm_fd = _posixshmem.shm_open('/moat-zygote-a', os.O_CREAT | os.O_RDWR, 0o600)
assert libc.shmget(0x6d6f6174, 4096, 0o1600) >= 0, ctypes.get_errno()
assert libc.msgget(0x6d6f6174, 0o1600) >= 0, ctypes.get_errno()
assert libc.semget(0x6d6f6174, 1, 0o1600) >= 0, ctypes.get_errno()
listeners = []
for fam, addr in ((socket.AF_UNIX, '\0moat-zygote-a'), (socket.AF_UNIX, '/tmp/a.sock')):
    l = socket.socket(fam)
    l.bind(addr)
    l.listen(64)
    listeners.append(l)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(('127.0.0.1', 4242))
udp.setblocking(False)
tcp = socket.socket()
try:
    tcp.bind(('127.0.0.1', 4242))
    tcp.listen(64)
    tcp_listen = 'listening'
except OSError as e:
    tcp_listen = e.errno
a_secret = 'from-box-a'
sys.modules['moat_a_mod'] = sys
os.environ['MOAT_A'] = '1'
builtins.moat_a = 1
os.getcwd = lambda: 'patched-by-a'
print(sleeper.pid, tcp_listen)
`

// udpDrain prints the datagrams box A's UDP socket received (plantTraces).
const udpDrain = `got = []
while True:
    try:
        got.append(udp.recv(100).decode())
    except BlockingIOError:
        break
print(' '.join(got))
`

// stateProbe prints whether the interpreter holds any of plantTraces' state.
const stateProbe = `import os, sys, builtins, json
print(json.dumps({'var': 'a_secret' in globals(), 'mod': 'moat_a_mod' in sys.modules,
    'colorsys': 'colorsys' in sys.modules, 'env': os.environ.get('MOAT_A'),
    'builtin': hasattr(builtins, 'moat_a'), 'cwd': os.getcwd()}))
`

type traces struct {
	Files               []string
	PosixShm            bool `json:"posix_shm"`
	SysvShm             bool `json:"sysv_shm"`
	SysvMsg             bool `json:"sysv_msg"`
	SysvSem             bool `json:"sysv_sem"`
	TCP, Abstract, Unix any  // "connected", or the errno
	UDPBind             any  `json:"udp_bind"` // "bound", or the errno
	UnixListed          bool `json:"unix_listed"`
	UDPListed           bool `json:"udp_listed"`
	Sleepers            []int
}

type interpState struct {
	Var, Mod, Colorsys, Builtin bool
	Env                         *string
	Cwd                         string
}

// TestZygoteBoxesApart starts two boxes from one zygote and has each attack the
// other and the host; then a third, later box from the same zygote looks for what
// the first left behind. The zygote must come out of it untouched, and nothing of
// any box may remain once the backend is closed.
func TestZygoteBoxesApart(t *testing.T) {
	testutil.RequireRoot(t)
	if p, ok := readHostProc(os.Getpid()); !ok || p.uid != 0 {
		t.Fatalf("the test's own process: %+v", p)
	}
	b := &Backend{}
	t.Cleanup(func() { _ = b.Close() })
	spec := zygoteSpec(box.Limits{Memory: 128 << 20, Pids: 32})
	a := startZygoteBox(t, t, b, spec)
	bb := startZygoteBox(t, t, b, spec)
	zy := zygoteOf(t, a)
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}

	// Both boxes are the zygote's children on the host, each with namespaces of its
	// own: none shared with the other box, the zygote or the host.
	ja, jb := boxInit(t, a), boxInit(t, bb)
	for _, j := range []hostProc{ja, jb} {
		if j.ppid != zy.pid || j.uid != HostBoxUID {
			t.Fatalf("a box's PID 1 %+v: want a child of the zygote %d running as %d", j, zy.pid, HostBoxUID)
		}
	}
	la, lb := childOf(t, ja.pid, "--zygote"), childOf(t, jb.pid, "--zygote")
	nsA, nsB, nsZ, nsHost := namespaces(t, la.pid), namespaces(t, lb.pid), namespaces(t, zy.pid), namespaces(t, os.Getpid())
	for kind := range nsA {
		if nsA[kind] == nsB[kind] || nsA[kind] == nsZ[kind] || nsB[kind] == nsZ[kind] || nsA[kind] == nsHost[kind] {
			t.Errorf("%s namespace shared: box A %s, box B %s, zygote %s, host %s", kind, nsA[kind], nsB[kind], nsZ[kind], nsHost[kind])
		}
	}
	if la.uid != HostBoxUID || lb.uid != HostBoxUID {
		t.Errorf("the boxes' interpreters run as host uids %d and %d, want %d", la.uid, lb.uid, HostBoxUID)
	}

	t.Run("privileges", func(t *testing.T) {
		zero := "0000000000000000"
		for name, s := range map[string]box.Session{"A": a, "B": bb} {
			var p privSeen
			pyJSON(t, s, privProbe, &p)
			if !slices.Equal(p.Pids, []int{1, p.Me}) {
				t.Errorf("box %s sees pids %v, want only 1 and its own %d", name, p.Pids, p.Me)
			}
			for _, ids := range [][]int{p.UID, p.GID} {
				if !slices.Equal(ids, []int{65534, 65534, 65534}) {
					t.Errorf("box %s runs as %v/%v, want 65534", name, p.UID, p.GID)
				}
			}
			if len(p.Groups) != 0 {
				t.Errorf("box %s has groups %v", name, p.Groups)
			}
			// The code, and its box's PID 1 (the agent, which shares its uid).
			for who, st := range map[string]map[string]string{"code": p.Self, "PID 1": p.Init} {
				want := map[string]string{"CapInh": zero, "CapPrm": zero, "CapEff": zero, "CapBnd": zero, "CapAmb": zero, "NoNewPrivs": "1", "Seccomp": "2"}
				for k, v := range want {
					if st[k] != v {
						t.Errorf("box %s, %s: %s %q, want %q (status %v)", name, who, k, st[k], v, st)
					}
				}
			}
		}
	})

	t.Run("namespace escapes", func(t *testing.T) {
		for name, s := range map[string]box.Session{"A": a, "B": bb} {
			out := strings.TrimSpace(pyOK(t, s, nsProbe))
			lines := strings.Split(out, "\n")
			if len(lines) != 7*2+6+4+1 {
				t.Fatalf("box %s: %d lines, want %d:\n%s", name, len(lines), 7*2+6+4+1, out)
			}
			for _, l := range lines {
				f := strings.Fields(l)
				if f[0] == "unshare-cmd" {
					if f[1] != "-1" {
						t.Errorf("box %s: unshare(1) succeeded", name)
					}
					continue
				}
				if f[1] != "-1" || f[2] != strconv.Itoa(int(syscall.EPERM)) {
					t.Errorf("box %s: %s returned %s errno %s, want -1 EPERM", name, f[0], f[1], f[2])
				}
			}
		}
		if got := namespaces(t, la.pid); fmt.Sprint(got) != fmt.Sprint(nsA) {
			t.Errorf("box A's namespaces changed: %v, were %v", got, nsA)
		}
	})

	var sleeperA hostProc
	t.Run("traces stay in their box", func(t *testing.T) {
		planted := strings.Fields(pyOK(t, a, plantTraces))
		if len(planted) != 2 {
			t.Fatalf("box A planted: %q", planted)
		}
		// Landlock denies every box a TCP bind (ABI 4 and later): the box's ruleset is
		// in force. Where it does not, box A listens, and must reach its own listener.
		tcpListens := planted[1] == "listening"
		if !tcpListens && planted[1] != strconv.Itoa(int(syscall.EACCES)) {
			t.Fatalf("box A's TCP listen: %s", planted[1])
		}
		if abi := landlock.ABI(); abi >= 4 && tcpListens {
			t.Errorf("box A listens on TCP under a kernel with Landlock ABI %d: its ruleset is not in force", abi)
		}
		var seenA, seenB traces
		pyJSON(t, a, traceProbe, &seenA)
		// What box A sees of its own traces: the probe works.
		if !seenA.all() || tcpListens != (seenA.TCP == "connected") {
			t.Fatalf("box A does not see its own traces: %+v", seenA)
		}
		pyJSON(t, bb, traceProbe, &seenB)
		t.Logf("box A planted %q; box A sees %+v; box B sees %+v", planted, seenA, seenB)
		if seenB.any() {
			t.Fatalf("box B sees box A's traces: %+v", seenB)
		}
		// Box B's datagram to 127.0.0.1:4242 went to its own loopback, not to box A.
		if got := strings.Fields(pyOK(t, a, udpDrain)); len(got) != 1 || !strings.HasPrefix(got[0], "probe-") {
			t.Fatalf("box A's UDP socket received %q, want only its own probe's datagram", got)
		}
		sleeperA = childOf(t, la.pid, "sleep 1000")
		if sleeperA.uid != HostBoxUID {
			t.Fatalf("box A's sleep runs as host uid %d", sleeperA.uid)
		}
	})
	if sleeperA.pid == 0 {
		t.FailNow()
	}

	t.Run("signals stay in their box", func(t *testing.T) {
		// Box B aims at box A's sleep by its host pid and by its pid in A, and at every
		// process it may signal; its own child proves kill(-1) took effect.
		var seenA traces
		pyJSON(t, a, traceProbe, &seenA)
		out := pyOK(t, bb, fmt.Sprintf(`import os, signal, subprocess, json
res = {}
for name, pid in (('host', %d), ('in_a', %d)):
    try:
        os.kill(pid, 0)
        res[name + '_visible'] = True
    except ProcessLookupError:
        res[name + '_visible'] = False
    try:
        os.kill(pid, signal.SIGKILL)
        res[name + '_kill'] = 'sent'
    except OSError as e:
        res[name + '_kill'] = e.errno
mine = subprocess.Popen(['sleep', '1000'])
try:
    os.kill(-1, signal.SIGKILL)
    res['all'] = 'sent'
except OSError as e:
    res['all'] = e.errno
res['own_child'] = mine.wait()
print(json.dumps(res))
`, sleeperA.pid, seenA.Sleepers[0]))
		var res map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		// The pid in A may exist in B (B's own processes are numbered alike); whatever
		// it names there, box A's sleep must live on.
		t.Logf("box B's signals: %v", res)
		if res["host_visible"] != false || res["host_kill"] != float64(syscall.ESRCH) || res["own_child"] != float64(-9) {
			t.Errorf("box B's signals: %v", res)
		}
		if p, ok := readHostProc(sleeperA.pid); !ok || p.start != sleeperA.start {
			t.Fatalf("box A's sleep (host pid %d) was killed from box B", sleeperA.pid)
		}
		var again traces
		pyJSON(t, a, traceProbe, &again)
		if !again.all() {
			t.Fatalf("box A after box B's kill(-1): %+v", again)
		}
	})

	var c box.Session
	outer := t
	t.Run("process bomb", func(t *testing.T) {
		// Box A forks until the kernel refuses; its processes stay while box B starts
		// some of its own and a new box is forked from the zygote.
		out := pyOK(t, a, `import os, time, errno
kids, err = [], None
while True:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    kids.append(pid)
print(len(kids), err)
`)
		t.Logf("box A's process bomb: %q", out)
		var n, errno int
		if _, err := fmt.Sscan(out, &n, &errno); err != nil || errno != int(syscall.EAGAIN) || n < 20 || n > 32 {
			t.Fatalf("box A's process bomb: %q, want some 30 processes, then EAGAIN", out)
		}
		if got := pyOK(t, bb, "import subprocess, os\nprint(subprocess.run(['/bin/echo', 'spawned'], capture_output=True, text=True).stdout.strip())\npid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))"); got != "spawned\n7\n" {
			t.Fatalf("box B during box A's bomb: %q", got)
		}
		c = startZygoteBox(t, outer, b, spec)
		if got := pyOK(t, c, "import subprocess\nprint(subprocess.run(['/bin/echo', 'c'], capture_output=True, text=True).stdout)"); got != "c\n\n" {
			t.Fatalf("a new box during box A's bomb: %q", got)
		}
	})
	if c == nil {
		t.FailNow()
	}

	t.Run("a later box starts clean", func(t *testing.T) {
		var st interpState
		pyJSON(t, a, stateProbe, &st)
		if !st.Var || !st.Mod || !st.Colorsys || st.Env == nil || !st.Builtin || st.Cwd != "patched-by-a" {
			t.Fatalf("box A lost its own state: %+v", st)
		}
		for name, s := range map[string]box.Session{"B": bb, "C": c} {
			st = interpState{}
			pyJSON(t, s, stateProbe, &st)
			if st.Var || st.Mod || st.Colorsys || st.Env != nil || st.Builtin || st.Cwd != "/workspace" {
				t.Errorf("box %s holds box A's state: %+v", name, st)
			}
		}
		var seenC traces
		pyJSON(t, c, traceProbe, &seenC)
		if seenC.any() {
			t.Errorf("box C sees box A's traces: %+v", seenC)
		}
		// Forked interpreters reseed their random generators.
		rnd := "import random, uuid\nprint(random.getrandbits(128), uuid.uuid4())"
		ra, rb, rc := pyOK(t, a, rnd), pyOK(t, bb, rnd), pyOK(t, c, rnd)
		if ra == rb || rb == rc || ra == rc {
			t.Errorf("boxes draw the same random numbers: %q %q %q", ra, rb, rc)
		}
	})

	t.Run("memory limit", func(t *testing.T) {
		res := call(t, a, "x = bytearray(1 << 30)\nx[::4096] = b'x' * len(x[::4096])\nprint('allocated')", 30*time.Second)
		if res.Status != box.StatusMemoryLimit || strings.Contains(res.Stdout, "allocated") {
			t.Fatalf("box A past its memory: status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
		}
		for name, s := range map[string]box.Session{"B": bb, "C": c} {
			if got := pyOK(t, s, "x = bytearray(48 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint(len(x) >> 20)"); got != "48\n" {
				t.Errorf("box %s after box A's OOM: %q", name, got)
			}
		}
	})

	t.Run("files served by the server", func(t *testing.T) {
		ctx := context.Background()
		if err := bb.PutFile(ctx, "in/data.txt", strings.NewReader("hello"), 5); err != nil {
			t.Fatalf("put: %v", err)
		}
		if got := pyOK(t, bb, "import os\nst = os.stat('/workspace/in/data.txt')\nprint(open('/workspace/in/data.txt').read(), st.st_uid, st.st_gid)\n"+
			"os.symlink('/etc/passwd', '/workspace/passwd')\nos.symlink('/', '/workspace/root')\nos.symlink('../../../../etc', '/workspace/up')\n"+
			"open('/workspace/out.txt', 'w').write('from the box')"); got != "hello 65534 65534\n" {
			t.Fatalf("the box sees the upload as %q", got)
		}
		var buf bytes.Buffer
		if n, err := bb.GetFile(ctx, "out.txt", &buf, 1<<20); err != nil || n != 12 || buf.String() != "from the box" {
			t.Fatalf("get: %d %q %v", n, buf.String(), err)
		}
		list, err := bb.ListFiles(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range list {
			names = append(names, f.Path)
		}
		slices.Sort(names)
		if want := []string{"in", "in/data.txt", "out.txt", "passwd", "root", "up"}; !slices.Equal(names, want) {
			t.Fatalf("list: %v, want %v", names, want)
		}
		for _, p := range []string{"passwd", "root/etc/passwd", "up/passwd", "../../etc/passwd", "/etc/passwd"} {
			buf.Reset()
			if _, err := bb.GetFile(ctx, p, &buf, 1<<20); !errors.Is(err, box.ErrBadPath) || buf.Len() != 0 {
				t.Errorf("get %q: %v (%d bytes), want a bad path", p, err, buf.Len())
			}
		}
		for _, p := range []string{"root/etc/passwd", "up/passwd", "root/tmp/evil", "../../etc/passwd"} {
			if err := bb.PutFile(ctx, p, strings.NewReader("evil"), 4); !errors.Is(err, box.ErrBadPath) {
				t.Errorf("put %q: %v, want a bad path", p, err)
			}
			if err := bb.RemoveFile(ctx, p); !errors.Is(err, box.ErrBadPath) {
				t.Errorf("remove %q: %v, want a bad path", p, err)
			}
		}
		if _, err := bb.ListFiles(ctx, "root"); !errors.Is(err, box.ErrBadPath) {
			t.Errorf("list root: %v, want a bad path", err)
		}
		// An upload to the symlink's own name replaces the link, never writes /etc/passwd.
		if err := bb.PutFile(ctx, "passwd", strings.NewReader("evil"), 4); err != nil {
			t.Fatalf("put over the symlink: %v", err)
		}
		if got := pyOK(t, bb, "import os\nprint(os.path.islink('/workspace/passwd'), open('/workspace/passwd').read())"); got != "False evil\n" {
			t.Errorf("the box sees its passwd as %q", got)
		}
		if err := bb.RemoveFile(ctx, "in/data.txt"); err != nil {
			t.Fatalf("remove: %v", err)
		}
		if err := bb.RemoveFile(ctx, "root"); err != nil {
			t.Fatalf("remove a symlink: %v", err)
		}
		if got := pyOK(t, bb, "import os\nprint(sorted(os.listdir('/workspace')), sorted(os.listdir('/workspace/in')))"); got != "['in', 'out.txt', 'passwd', 'up'] []\n" {
			t.Errorf("the workspace afterwards: %q", got)
		}
		if now, err := os.ReadFile("/etc/passwd"); err != nil || !bytes.Equal(now, passwd) {
			t.Fatalf("the host's /etc/passwd changed: %v", err)
		}
		// Box A's workspace is not box B's.
		if got := pyOK(t, a, "import os\nprint(sorted(os.listdir('/workspace')))"); got != "['a']\n" {
			t.Errorf("box A's workspace: %q", got)
		}
	})

	// The zygote lived through all of it: the same process, never restarted.
	if now, ok := readHostProc(zy.pid); !ok || now.start != zy.start || now.cmdline != zy.cmdline || now.uid != HostRootUID {
		t.Fatalf("the zygote %+v is gone or changed: %+v", zy, now)
	}
	for _, s := range []box.Session{a, bb, c} {
		if z := zygoteOf(t, s); z.pid != zy.pid || z.start != zy.start {
			t.Fatalf("a box came from another zygote: %+v, the first from %+v", z, zy)
		}
	}

	for _, s := range []box.Session{a, bb, c} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := ourBoxProcesses(t); len(left) > 0 {
		t.Errorf("box processes left after Close: %+v", left)
	}
	if left := ourBoxCgroups(); len(left) > 0 {
		t.Errorf("box cgroups left after Close: %v", left)
	}
	if p, ok := readHostProc(sleeperA.pid); ok && p.start == sleeperA.start {
		t.Errorf("box A's sleep (host pid %d) outlived its box", sleeperA.pid)
	}
}

// TestZygoteModulesOutOfReach: what the zygote imported for itself (ctypes, socket,
// json...) is not in a box's sys.modules, where the code would find it without an
// import, which the policy's hook sees; and the box that imports one gets it
// afresh, as in a box made cold.
func TestZygoteModulesOutOfReach(t *testing.T) {
	testutil.RequireRoot(t)
	b := &Backend{}
	t.Cleanup(func() { _ = b.Close() }) // after the session's own cleanup
	s := startZygoteBox(t, t, b, zygoteSpec(box.Limits{}))
	zygoteOwn := "('ctypes', '_ctypes', 'socket', '_socket', 'json', 'platform', 'fcntl', 'select', 'resource', 'struct', 'array', 'gc')"
	if out := pyOK(t, s, "import sys\nprint(sorted(n for n in "+zygoteOwn+" if n in sys.modules))"); out != "[]\n" {
		t.Errorf("the zygote's modules in the box's sys.modules: %s", out)
	}
	if out := pyOK(t, s, "import sys, json\nprint(json.dumps({'a': 1}), 'json' in sys.modules)"); out != "{\"a\": 1} True\n" {
		t.Errorf("import json in the box: %q", out)
	}
}

// TestZygoteFootprint: the zygote's anonymous memory exceeds a bare interpreter's
// (started here with the same flags) by at most zygoteBudget. Every box's fork copies
// the page tables of all of it and its exit unmaps them: each MiB cost every pooled box
// about 0.12 ms of CPU, 1.5% of the throughput, measured. The zygote was 4.1 MiB over
// the bare interpreter while zygote.py imported socket, json and platform and malloc's
// free pages stayed in its heap, 3.1 MiB while it compiled zygote.py itself, 2.7 MiB
// since.
func TestZygoteFootprint(t *testing.T) {
	testutil.RequireRoot(t)
	const zygoteBudget = 3 << 20
	b := &Backend{}
	t.Cleanup(func() { _ = b.Close() })
	// The runner compiled, as the engine places it: compiling its source in the
	// zygote would leave megabytes of the compiler's garbage in its heap.
	spec := zygoteSpec(box.Limits{})
	compiled, err := python.CompileRunner(context.Background(), spec.Interpreter[0])
	if err != nil {
		t.Fatal(err)
	}
	spec.Interpreter = python.SessionInterpreter(python.CompiledRunnerPath)
	spec.Zygote = python.ZygoteInterpreter(spec.Interpreter)
	spec.Support = python.Support(python.Policy{Profile: "open", Mode: python.ModeOff, FileAccess: python.FileAny}, compiled)
	startZygoteBox(t, t, b, spec)
	z := ourZygotePID(t)
	zAnon := anonBytes(t, strconv.Itoa(z))
	bare := exec.Command(spec.Zygote[0], "-u", "-I", "-S", "-c",
		"import sys\nfor l in open('/proc/self/smaps_rollup'):\n    l.startswith('Anonymous:') and sys.stdout.write(l)")
	out, err := bare.Output()
	if err != nil {
		t.Fatalf("bare interpreter: %v", err)
	}
	bareAnon := parseAnon(t, string(out))
	t.Logf("zygote %d KiB, bare interpreter %d KiB of anonymous memory", zAnon>>10, bareAnon>>10)
	if zAnon-bareAnon > zygoteBudget {
		t.Errorf("the zygote holds %d KiB of anonymous memory, %d KiB more than a bare interpreter; want at most %d KiB more",
			zAnon>>10, (zAnon-bareAnon)>>10, zygoteBudget>>10)
	}
}

// ourZygotePID is the pid of the zygote (Z) of this test process's one zygote box: the
// Python process descended from this process whose parent is not Python.
func ourZygotePID(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	field := func(pid int, name string) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		return string(b)
	}
	ppid := func(pid int) int {
		st := field(pid, "stat")
		i := strings.LastIndexByte(st, ')')
		if i < 0 {
			return 0
		}
		f := strings.Fields(st[i+1:])
		if len(f) < 2 {
			return 0
		}
		n, _ := strconv.Atoi(f[1])
		return n
	}
	var found []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !strings.Contains(field(pid, "cmdline"), "--zygote") ||
			strings.Contains(field(ppid(pid), "cmdline"), "--zygote") {
			continue
		}
		for p := ppid(pid); p > 1; p = ppid(p) {
			if p == os.Getpid() {
				found = append(found, pid)
				break
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("zygotes of this process: %v, want one", found)
	}
	return found[0]
}

func anonBytes(t *testing.T, pid string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	return parseAnon(t, string(b))
}

// parseAnon reads the Anonymous line of a smaps_rollup.
func parseAnon(t *testing.T, rollup string) int64 {
	t.Helper()
	for _, l := range strings.Split(rollup, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "Anonymous:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no Anonymous line in %q", rollup)
	return 0
}

// TestZygoteFailsToStart: a zygote whose interpreter cannot start leaves its spec's
// boxes to be made cold (a session still starts, and works), is not retried at once,
// and Close returns with nothing of it left on the host.
func TestZygoteFailsToStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := &Backend{}
	spec := zygoteSpec(box.Limits{})
	spec.Zygote = append([]string{"/nonexistent/python3"}, spec.Zygote[1:]...)
	for i := range 2 {
		s, err := b.StartSession(context.Background(), spec)
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if slices.Contains(s.Isolation(), "zygote") {
			t.Fatalf("session %d came from a zygote that cannot start: %v", i, s.Isolation())
		}
		if out := pyOK(t, s, "print(6 * 7)"); out != "42\n" {
			t.Fatalf("session %d printed %q", i, out)
		}
		_ = s.Close()
	}
	if b.ZygoteReady(spec) {
		t.Fatal("ZygoteReady for a zygote that failed to start")
	}
	done := make(chan struct{})
	go func() { _ = b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	if left := ourBoxCgroups(); len(left) > 0 {
		t.Fatalf("box cgroups left: %v", left)
	}
}

// TestSessionRestartReady: after the interpreter of a session ended, the next call
// starts a new one and waits for its ready line. A server slow to go on once the agent
// said "started" (here 300 ms, as when the host is busy) must not lose that line: it
// used to drop what was in the pipes at that point, the new interpreter's ready line
// with the ended one's leftovers, and the call waited 30 s for it in vain.
func TestSessionRestartReady(t *testing.T) {
	testutil.RequireRoot(t)
	b := &Backend{}
	t.Cleanup(func() { _ = b.Close() })
	startedHook = func() { time.Sleep(300 * time.Millisecond) }
	t.Cleanup(func() { startedHook = nil })
	cold := zygoteSpec(box.Limits{})
	cold.Zygote = nil
	for _, c := range []struct {
		name string
		spec *box.SessionSpec
	}{{"cold", cold}, {"zygote", zygoteSpec(box.Limits{})}} {
		t.Run(c.name, func(t *testing.T) {
			s, err := b.StartSession(context.Background(), c.spec)
			if err != nil {
				t.Fatalf("start a session: %v", err)
			}
			defer s.Close()
			for i := range 3 {
				if res := call(t, s, "import os\nprint('bye', flush=True)\nos._exit(3)", 10*time.Second); res.ExitCode != 3 {
					t.Fatalf("round %d: the interpreter's end: exit %d stdout %q stderr %q", i, res.ExitCode, res.Stdout, res.Stderr)
				}
				if got := pyOK(t, s, "print('again')"); got != "again\n" {
					t.Fatalf("round %d: after the restart: %q", i, got)
				}
			}
		})
	}
}

// ourBoxCgroups lists this process's box cgroups, kept ones (cgroup.Box.Recycle) too.
func ourBoxCgroups() []string {
	mark := fmt.Sprintf("box-%d-", os.Getpid())
	return append(testutil.BoxCgroups(mark), testutil.BoxCgroups(cgroup.SparePrefix+mark)...)
}

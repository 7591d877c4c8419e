package landlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the sandboxed child: Restrict is
// irreversible, so TestRestrict re-executes the binary with childEnv set
// to "1" and the child confines itself, runs the probes and prints a
// JSON report on stdout. TestRuleset does the same with childEnv set to
// rulesetChild (see ruleset_linux_test.go).
const (
	childEnv     = "MOAT_LANDLOCK_TEST_CHILD"
	envRW        = "MOAT_LANDLOCK_TEST_RW"
	envOther     = "MOAT_LANDLOCK_TEST_OTHER"
	envTCP       = "MOAT_LANDLOCK_TEST_TCP"
	envMPTCP     = "MOAT_LANDLOCK_TEST_MPTCP"
	envAbstract  = "MOAT_LANDLOCK_TEST_ABSTRACT"
	envParentPID = "MOAT_LANDLOCK_TEST_PARENT_PID"

	existingContent = "original"
	// preThreads is how many OS threads the child pins before Restrict
	// to check that Restrict confines threads that already exist.
	preThreads = 4
)

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "1":
		os.Exit(runChild())
	case rulesetChild:
		os.Exit(runRulesetChild())
	}
	os.Exit(m.Run())
}

// requireABI skips the test when the kernel's Landlock ABI is below
// want. In CI (CI=true) it fails instead: CI has Landlock, so a skip
// there would hide a regression.
func requireABI(t *testing.T, want int) {
	t.Helper()
	if got := ABI(); got < want {
		if os.Getenv("CI") == "true" {
			t.Fatalf("requires Landlock ABI >= %d, kernel has %d", want, got)
		}
		t.Skipf("requires Landlock ABI >= %d, kernel has %d", want, got)
	}
}

func TestABI(t *testing.T) {
	requireABI(t, 1)
	tests := []struct {
		name  string
		check func(t *testing.T)
	}{
		{"at least V1", func(t *testing.T) {
			if got := ABI(); got < 1 {
				t.Errorf("ABI() = %d, want >= 1", got)
			}
		}},
		{"stable across calls", func(t *testing.T) {
			if a, b := ABI(), ABI(); a != b {
				t.Errorf("ABI() = %d then %d", a, b)
			}
		}},
		{"not above the kernel's version", func(t *testing.T) {
			raw, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
			if errno != 0 {
				t.Fatalf("landlock_create_ruleset(VERSION): %v", errno)
			}
			if got := ABI(); got > int(raw) {
				t.Errorf("ABI() = %d, kernel reports %d", got, raw)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.check)
	}
}

// probeResult is one operation the sandboxed child attempted.
type probeResult struct {
	Name string `json:"name"`
	// Errno is "" on success, the errno name (e.g. "EACCES") for a
	// failed system call, or "other" with Err set.
	Errno string `json:"errno"`
	Err   string `json:"err,omitempty"`
}

// childReport is what the child prints on stdout.
type childReport struct {
	ABI         int           `json:"abi"`
	RestrictErr string        `json:"restrict_err,omitempty"`
	Probes      []probeResult `json:"probes"`
}

func result(name string, err error) probeResult {
	r := probeResult{Name: name}
	if err == nil {
		return r
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		r.Errno = unix.ErrnoName(errno)
	} else {
		r.Errno = "other"
	}
	r.Err = err.Error()
	return r
}

// runChild is the sandboxed side of TestRestrict. It returns the exit
// code; the parent asserts on the JSON report, not on the exit code.
func runChild() int {
	rw, other := os.Getenv(envRW), os.Getenv(envOther)
	var rep childReport

	// Pin goroutines to OS threads that exist before Restrict; they
	// probe after it to show that every thread is confined.
	start := make(chan struct{})
	threadErrs := make(chan error, preThreads)
	var ready sync.WaitGroup
	for i := range preThreads {
		ready.Add(1)
		go func() {
			runtime.LockOSThread()
			ready.Done()
			<-start
			threadErrs <- os.WriteFile(filepath.Join(other, fmt.Sprintf("thread-%d", i)), nil, 0o600)
		}()
	}

	ready.Wait()

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "prctl(PR_SET_NO_NEW_PRIVS): %v\n", err)
		return 2
	}

	// An invalid path must fail before anything is restricted.
	_, err := Restrict([]string{filepath.Join(rw, "missing")}, []string{"/dev/null"})
	rep.Probes = append(rep.Probes, result("restrict rejects missing path", err))

	rep.ABI, err = Restrict([]string{rw}, []string{"/dev/null"})
	if err != nil {
		rep.RestrictErr = err.Error()
		return printReport(rep)
	}

	close(start)
	// Report a success if any thread had one, else the first error.
	errs := make([]error, preThreads)
	for i := range errs {
		errs[i] = <-threadErrs
	}
	threadErr := errs[0]
	for _, err := range errs {
		if err == nil {
			threadErr = nil
		}
	}
	rep.Probes = append(rep.Probes, result("create outside rw on pre-existing threads", threadErr))

	parentPID, _ := strconv.Atoi(os.Getenv(envParentPID))
	probes := []struct {
		name string
		run  func() error
	}{
		{"write file in rw", func() error {
			return os.WriteFile(filepath.Join(rw, "allowed"), []byte("ok"), 0o600)
		}},
		{"mkdir in rw", func() error { return os.Mkdir(filepath.Join(rw, "newdir"), 0o700) }},
		{"mkfifo in rw", func() error { return unix.Mkfifo(filepath.Join(rw, "fifo"), 0o600) }},
		{"symlink in rw", func() error { return os.Symlink("/etc/hostname", filepath.Join(rw, "link")) }},
		{"remove file in rw", func() error {
			p := filepath.Join(rw, "scratch")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Remove(p)
		}},
		{"rename between rw subdirs", func() error {
			return os.Rename(filepath.Join(rw, "a", "f"), filepath.Join(rw, "b", "f"))
		}},
		{"mknod char device in rw", func() error {
			return unix.Mknod(filepath.Join(rw, "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
		}},
		{"create file outside rw", func() error {
			return os.WriteFile(filepath.Join(other, "forbidden"), []byte("x"), 0o600)
		}},
		{"mkdir outside rw", func() error { return os.Mkdir(filepath.Join(other, "forbidden-dir"), 0o700) }},
		{"open existing file outside rw for write", func() error {
			f, err := os.OpenFile(filepath.Join(other, "existing"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"truncate existing file outside rw", func() error { return os.Truncate(filepath.Join(other, "existing"), 0) }},
		{"remove file outside rw", func() error { return os.Remove(filepath.Join(other, "existing")) }},
		{"rename from rw to outside", func() error {
			return os.Rename(filepath.Join(rw, "allowed"), filepath.Join(other, "moved"))
		}},
		{"hard link from outside into rw", func() error {
			return os.Link(filepath.Join(other, "existing"), filepath.Join(rw, "hardlink"))
		}},
		{"read file outside rw", func() error {
			_, err := os.ReadFile(filepath.Join(other, "existing"))
			return err
		}},
		{"read /etc/hostname", func() error {
			_, err := os.ReadFile("/etc/hostname")
			return err
		}},
		{"list /", listRoot},
		{"write /dev/null", writeDevNull},
		{"open /dev/zero for write (not in devRW)", openZeroForWrite},
		{"exec /bin/true", func() error { return exec.Command("/bin/true").Run() }},
		{"tcp connect to parent listener", func() error {
			return connect(unix.IPPROTO_TCP, os.Getenv(envTCP))
		}},
		{"tcp bind loopback", func() error { return bindTCP() }},
		{"mptcp connect to parent listener", func() error {
			return connect(unix.IPPROTO_MPTCP, os.Getenv(envMPTCP))
		}},
		{"signal self", func() error { return unix.Kill(os.Getpid(), 0) }},
		{"signal parent", func() error { return unix.Kill(parentPID, 0) }},
		{"connect abstract unix socket outside domain", func() error {
			c, err := net.DialTimeout("unix", os.Getenv(envAbstract), 5*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}},
	}
	for _, p := range probes {
		rep.Probes = append(rep.Probes, result(p.name, p.run()))
	}
	return printReport(rep)
}

func printReport(rep childReport) int {
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintf(os.Stderr, "encode report: %v\n", err)
		return 2
	}
	return 0
}

// connect connects a raw AF_INET stream socket of the given protocol to
// addr ("127.0.0.1:port"). Raw sockets keep the protocol explicit: Go's
// net package may pick MPTCP on its own.
func connect(proto int, addr string) error {
	ap, err := netipAddrPort(addr)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, ap); err != nil {
		return os.NewSyscallError("connect", err)
	}
	return nil
}

func bindTCP() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	return os.NewSyscallError("bind", unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
}

func netipAddrPort(addr string) (*unix.SockaddrInet4, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	return sa, nil
}

// want describes the expected errno of a probe at a given enforced ABI;
// "" means the operation must succeed.
type want func(abi int) string

func allowed(int) string { return "" }

func denied(errno string) want { return func(int) string { return errno } }

// deniedFrom expects errno when abi >= minABI and success below it.
func deniedFrom(minABI int, errno string) want {
	return func(abi int) string {
		if abi >= minABI {
			return errno
		}
		return ""
	}
}

func allowedFrom(minABI int, errno string) want {
	return func(abi int) string {
		if abi >= minABI {
			return ""
		}
		return errno
	}
}

// listener is a loopback listener in the parent that counts what the
// sandboxed child managed to reach.
type listener struct {
	net.Listener
	addr string
}

func listen(t *testing.T, network, addr string) listener {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return listener{Listener: l, addr: l.Addr().String()}
}

// accepted reports whether a connection is waiting. The child has
// exited, so any connect it completed is already in the accept queue.
func (l listener) accepted(t *testing.T) bool {
	t.Helper()
	type deadliner interface{ SetDeadline(time.Time) error }
	if err := l.Listener.(deadliner).SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	c, err := l.Accept()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		t.Fatalf("accept: %v", err)
	}
	c.Close()
	return true
}

func TestRestrict(t *testing.T) {
	requireABI(t, 1)

	rw, other := t.TempDir(), t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(rw, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(rw, "a", "f"), "move me")
	mustWrite(t, filepath.Join(other, "existing"), existingContent)

	tcp := listen(t, "tcp4", "127.0.0.1:0")
	mptcp := listen(t, "tcp4", "127.0.0.1:0")
	abstract := listen(t, "unix", fmt.Sprintf("@moat-landlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"=1",
		envRW+"="+rw,
		envOther+"="+other,
		envTCP+"="+tcp.addr,
		envMPTCP+"="+mptcp.addr,
		envAbstract+"="+abstract.addr,
		envParentPID+"="+strconv.Itoa(os.Getpid()),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep childReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decode child report: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if rep.RestrictErr != "" {
		t.Fatalf("Restrict in child: %s", rep.RestrictErr)
	}
	if wantABI := min(ABI(), pinnedABI); rep.ABI != wantABI {
		t.Errorf("Restrict returned ABI %d, want %d", rep.ABI, wantABI)
	}
	t.Logf("child enforced Landlock ABI %d", rep.ABI)

	cases := []probeCase{
		{"restrict rejects missing path", denied("ENOENT")},
		{"create outside rw on pre-existing threads", denied("EACCES")},
		{"write file in rw", allowed},
		{"mkdir in rw", allowed},
		{"mkfifo in rw", allowed},
		{"symlink in rw", allowed},
		{"remove file in rw", allowed},
		{"rename between rw subdirs", allowedFrom(2, "EXDEV")},
		{"mknod char device in rw", denied("EACCES")},
		{"create file outside rw", denied("EACCES")},
		{"mkdir outside rw", denied("EACCES")},
		{"open existing file outside rw for write", denied("EACCES")},
		{"truncate existing file outside rw", deniedFrom(3, "EACCES")},
		{"remove file outside rw", denied("EACCES")},
		{"rename from rw to outside", denied("EACCES")},
		{"hard link from outside into rw", denied("EXDEV")},
		{"read file outside rw", allowed},
		{"read /etc/hostname", allowed},
		{"list /", allowed},
		{"write /dev/null", allowed},
		{"open /dev/zero for write (not in devRW)", denied("EACCES")},
		{"exec /bin/true", allowed},
		{"tcp connect to parent listener", deniedFrom(4, "EACCES")},
		{"tcp bind loopback", deniedFrom(4, "EACCES")},
		{"signal self", allowed},
		{"signal parent", deniedFrom(6, "EPERM")},
		{"connect abstract unix socket outside domain", deniedFrom(6, "EPERM")},
	}
	got := checkProbes(t, cases, rep.Probes, rep.ABI)

	// Landlock does not cover MPTCP sockets (see doc.go). Record what
	// this kernel does without failing on it; "host after child" checks
	// that the listener agrees, which also shows the accept checks work.
	mp, ok := got["mptcp connect to parent listener"]
	if !ok {
		t.Fatal("child did not run the MPTCP probe")
	}
	t.Logf("known gap: MPTCP connect under Landlock ABI %d: errno %q %s", rep.ABI, mp.Errno, mp.Err)

	t.Run("host after child", func(t *testing.T) {
		host := []struct {
			name  string
			check func(t *testing.T)
		}{
			{"forbidden file absent", absent(filepath.Join(other, "forbidden"))},
			{"forbidden dir absent", absent(filepath.Join(other, "forbidden-dir"))},
			{"rename target absent", absent(filepath.Join(other, "moved"))},
			{"pre-existing threads created nothing", func(t *testing.T) {
				for i := range preThreads {
					absent(filepath.Join(other, fmt.Sprintf("thread-%d", i)))(t)
				}
			}},
			{"existing file unchanged", func(t *testing.T) {
				if rep.ABI < 3 {
					t.Skipf("truncate is only restricted from ABI 3, child had %d", rep.ABI)
				}
				b, err := os.ReadFile(filepath.Join(other, "existing"))
				if err != nil || string(b) != existingContent {
					t.Errorf("existing = %q, %v; want %q", b, err, existingContent)
				}
			}},
			{"rw file written", func(t *testing.T) {
				b, err := os.ReadFile(filepath.Join(rw, "allowed"))
				if err != nil || string(b) != "ok" {
					t.Errorf("allowed = %q, %v; want %q", b, err, "ok")
				}
			}},
			{"tcp listener accepted nothing", func(t *testing.T) {
				if rep.ABI < 4 {
					t.Skipf("TCP is only restricted from ABI 4, child had %d", rep.ABI)
				}
				if tcp.accepted(t) {
					t.Error("sandboxed child reached the TCP listener")
				}
			}},
			{"mptcp listener matches the MPTCP probe", func(t *testing.T) {
				if reached := mptcp.accepted(t); reached != (mp.Errno == "") {
					t.Errorf("MPTCP listener reached = %v, probe errno %q", reached, mp.Errno)
				}
			}},
			{"abstract listener accepted nothing", func(t *testing.T) {
				if rep.ABI < 6 {
					t.Skipf("abstract sockets are only scoped from ABI 6, child had %d", rep.ABI)
				}
				if abstract.accepted(t) {
					t.Error("sandboxed child reached the abstract unix listener")
				}
			}},
		}
		for _, tc := range host {
			t.Run(tc.name, tc.check)
		}
	})
}

func orSuccess(errno string) string {
	if errno == "" {
		return "success"
	}
	return errno
}

func absent(p string) func(t *testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists on the host (lstat err %v)", p, err)
		}
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Probes the Restrict and Ruleset children share.

func listRoot() error {
	_, err := os.ReadDir("/")
	return err
}

func writeDevNull() error {
	f, err := os.OpenFile("/dev/null", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write([]byte("x"))
	return err
}

func openZeroForWrite() error {
	f, err := os.OpenFile("/dev/zero", os.O_WRONLY, 0)
	if err == nil {
		f.Close()
	}
	return err
}

// probeCase is what one probe of a confined child must give.
type probeCase struct {
	name string
	want want
}

// checkProbes checks each case against the child's probe of that name, at abi, and
// returns the probes by name.
func checkProbes(t *testing.T, cases []probeCase, probes []probeResult, abi int) map[string]probeResult {
	t.Helper()
	got := make(map[string]probeResult, len(probes))
	for _, p := range probes {
		got[p.Name] = p
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := got[tc.name]
			if !ok {
				t.Fatalf("child did not run probe %q", tc.name)
			}
			if w := tc.want(abi); p.Errno != w {
				t.Errorf("errno = %q (%s), want %q", p.Errno, p.Err, orSuccess(w))
			}
		})
	}
	return got
}

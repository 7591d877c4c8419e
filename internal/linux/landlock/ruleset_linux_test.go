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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestRuleset plays the moat server and a box: the child (this binary
// re-executed with childEnv=rulesetChild) enters its own mount namespace
// and chroots into a tree, and the test builds the ruleset through
// /proc/CHILD/root, sends it over a socket (SCM_RIGHTS), and the child
// enforces it with a bare landlock_restrict_self(fd, 0), as the box's
// Python does, then probes and reports as in TestRestrict.
const (
	rulesetChild = "ruleset"
	envTree      = "MOAT_LANDLOCK_TEST_TREE"
	envTCPDenied = "MOAT_LANDLOCK_TEST_TCP_DENIED"

	// rulesetSockFD is the child's end of the socket (ExtraFiles[0]).
	rulesetSockFD = 3
)

// runRulesetChild is the box side of TestRuleset. It returns the exit
// code; the parent asserts on the JSON report, not on the exit code.
func runRulesetChild() int {
	// landlock_restrict_self confines the calling thread only: restrict
	// and probe on one locked thread, like a single-threaded process.
	runtime.LockOSThread()
	if err := enterTree(os.Getenv(envTree)); err != nil {
		fmt.Fprintf(os.Stderr, "enter tree: %v\n", err)
		return 2
	}
	if _, err := unix.Write(rulesetSockFD, []byte{'r'}); err != nil {
		fmt.Fprintf(os.Stderr, "write ready: %v\n", err)
		return 2
	}
	ruleset, err := recvFD(rulesetSockFD)
	if err != nil {
		fmt.Fprintf(os.Stderr, "receive ruleset: %v\n", err)
		return 2
	}

	var rep childReport
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "prctl(PR_SET_NO_NEW_PRIVS): %v\n", err)
		return 2
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		rep.RestrictErr = os.NewSyscallError("landlock_restrict_self", errno).Error()
		return printReport(rep)
	}
	unix.Close(ruleset)

	parentPID, _ := strconv.Atoi(os.Getenv(envParentPID))
	probes := []struct {
		name string
		run  func() error
	}{
		{"write file in rw", func() error { return os.WriteFile("/work/allowed", []byte("ok"), 0o600) }},
		{"mkdir in rw", func() error { return os.Mkdir("/work/newdir", 0o700) }},
		{"write file in rw granted through a symlink", func() error {
			return os.WriteFile("/tmp/allowed", []byte("ok"), 0o600)
		}},
		{"create file outside rw", func() error { return os.WriteFile("/other/forbidden", []byte("x"), 0o600) }},
		{"open existing file outside rw for write", func() error {
			f, err := os.OpenFile("/other/existing", os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"truncate existing file outside rw", func() error { return os.Truncate("/other/existing", 0) }},
		{"read file outside rw", func() error {
			_, err := os.ReadFile("/other/existing")
			return err
		}},
		{"list /", listRoot},
		{"write /dev/null", writeDevNull},
		{"open /dev/zero for write (not in devRW)", openZeroForWrite},
		{"tcp connect to allowed port", func() error { return connect(unix.IPPROTO_TCP, os.Getenv(envTCP)) }},
		{"tcp connect to other port", func() error { return connect(unix.IPPROTO_TCP, os.Getenv(envTCPDenied)) }},
		{"tcp bind loopback", func() error { return bindTCP() }},
		{"signal self", func() error { return unix.Kill(os.Getpid(), 0) }},
		{"signal parent", func() error { return unix.Kill(parentPID, 0) }},
	}
	for _, p := range probes {
		rep.Probes = append(rep.Probes, result(p.name, p.run()))
	}
	return printReport(rep)
}

// enterTree makes tree the process's root in its own mount namespace
// (the parent cloned it with CLONE_NEWNS), with the host's /dev/null and
// /dev/zero bound over the empty files tree/dev/null and tree/dev/zero:
// only a ruleset resolved in this namespace sees character devices there.
func enterTree(tree string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return os.NewSyscallError("mount(MS_PRIVATE)", err)
	}
	for _, d := range []string{"null", "zero"} {
		src, dst := "/dev/"+d, filepath.Join(tree, "dev", d)
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, dst, os.NewSyscallError("mount", err))
		}
	}
	if err := unix.Chroot(tree); err != nil {
		return os.NewSyscallError("chroot", err)
	}
	return os.NewSyscallError("chdir", unix.Chdir("/"))
}

// recvFD receives one file descriptor (SCM_RIGHTS) on the socket sock.
func recvFD(sock int) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, os.NewSyscallError("recvmsg", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, fmt.Errorf("parse control message: %w", err)
	}
	if len(msgs) != 1 {
		return -1, fmt.Errorf("got %d control messages, want 1", len(msgs))
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return -1, fmt.Errorf("parse SCM_RIGHTS: %w", err)
	}
	if len(fds) != 1 {
		return -1, fmt.Errorf("got %d fds, want 1", len(fds))
	}
	return fds[0], nil
}

// serveRuleset is the server's side of TestRuleset: once the child pid
// says on sock that it is in its tree, it builds the ruleset through
// /proc/PID/root, granting connect to port, and sends it on sock.
func serveRuleset(sock, pid int, port uint16) (abi int, err error) {
	// EOF (n == 0) if the child died before.
	if n, err := unix.Read(sock, make([]byte, 1)); n != 1 {
		return 0, fmt.Errorf("child not ready (read %d bytes): %v", n, err)
	}
	rootPath := fmt.Sprintf("/proc/%d/root", pid)
	root, err := unix.Open(rootPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: rootPath, Err: err}
	}
	defer unix.Close(root)
	fd, abi, err := Ruleset(root, []string{"/work", "/tmplink"}, []string{"/dev/null"}, port)
	if err != nil {
		return 0, fmt.Errorf("Ruleset: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendmsg(sock, []byte{'f'}, unix.UnixRights(fd), nil, 0); err != nil {
		return 0, os.NewSyscallError("sendmsg", err)
	}
	return abi, nil
}

// makeTree creates the box tree of the Ruleset tests in a new temporary
// directory and returns its path:
//
//	work/            rw
//	tmp/             rw, named through tmplink
//	tmplink -> /tmp  absolute: the tree's tmp beneath root, not the host's
//	other/existing   outside rw
//	file             a regular file
//	dev/null, dev/zero  empty files (TestRuleset's child binds devices on them)
//	escape -> outside      absolute symlink to a host directory
//	escape-up -> ../../..  the same through ".."
//	null -> /dev/null      a device of the host, by an absolute symlink
func makeTree(t *testing.T, outside string) string {
	t.Helper()
	tree := t.TempDir()
	for _, d := range []string{"work", "tmp", "other", "dev"} {
		if err := os.Mkdir(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(tree, "other", "existing"), existingContent)
	for _, f := range []string{"file", "dev/null", "dev/zero"} {
		mustWrite(t, filepath.Join(tree, f), "")
	}
	up := strings.Repeat("../", strings.Count(tree, "/")+2) + strings.TrimPrefix(outside, "/")
	links := map[string]string{
		"tmplink":   "/tmp",
		"escape":    outside,
		"escape-up": up,
		"null":      "/dev/null",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(tree, name)); err != nil {
			t.Fatal(err)
		}
	}
	return tree
}

// openRoot opens dir with O_PATH, as the server opens /proc/PID/root.
func openRoot(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// openFDs returns how many file descriptors the process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

func TestRuleset(t *testing.T) {
	testutil.RequireRoot(t)
	requireABI(t, 1)

	tree := makeTree(t, t.TempDir())
	allowedL := listen(t, "tcp4", "127.0.0.1:0")
	deniedL := listen(t, "tcp4", "127.0.0.1:0")

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	sock := pair[0]
	childSock := os.NewFile(uintptr(pair[1]), "ruleset socket")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"="+rulesetChild,
		envTree+"="+tree,
		envTCP+"="+allowedL.addr,
		envTCPDenied+"="+deniedL.addr,
		envParentPID+"="+strconv.Itoa(os.Getpid()),
	)
	cmd.ExtraFiles = []*os.File{childSock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	childSock.Close()
	abi, err := serveRuleset(sock, cmd.Process.Pid, uint16(allowedL.Addr().(*net.TCPAddr).Port))
	// A child still waiting for the ruleset reads EOF and exits.
	unix.Close(sock)
	waitErr := cmd.Wait()
	if err != nil {
		t.Fatalf("%v\nchild stderr:\n%s", err, stderr.String())
	}
	if waitErr != nil {
		t.Fatalf("child: %v\nstderr:\n%s", waitErr, stderr.String())
	}
	if wantABI := min(ABI(), pinnedABI); abi != wantABI {
		t.Errorf("Ruleset returned ABI %d, want %d", abi, wantABI)
	}
	var rep childReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("decode child report: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if rep.RestrictErr != "" {
		t.Fatalf("landlock_restrict_self in child: %s", rep.RestrictErr)
	}
	t.Logf("child enforced a Ruleset of Landlock ABI %d", abi)

	cases := []probeCase{
		{"write file in rw", allowed},
		{"mkdir in rw", allowed},
		{"write file in rw granted through a symlink", allowed},
		{"create file outside rw", denied("EACCES")},
		{"open existing file outside rw for write", denied("EACCES")},
		{"truncate existing file outside rw", deniedFrom(3, "EACCES")},
		{"read file outside rw", allowed},
		{"list /", allowed},
		{"write /dev/null", allowed},
		{"open /dev/zero for write (not in devRW)", denied("EACCES")},
		{"tcp connect to allowed port", allowed},
		{"tcp connect to other port", deniedFrom(4, "EACCES")},
		{"tcp bind loopback", deniedFrom(4, "EACCES")},
		{"signal self", allowed},
		{"signal parent", deniedFrom(6, "EPERM")},
	}
	checkProbes(t, cases, rep.Probes, abi)

	t.Run("host after child", func(t *testing.T) {
		absent(filepath.Join(tree, "other", "forbidden"))(t)
		for _, f := range []string{"work/allowed", "tmp/allowed"} {
			b, err := os.ReadFile(filepath.Join(tree, f))
			if err != nil || string(b) != "ok" {
				t.Errorf("%s = %q, %v; want %q", f, b, err, "ok")
			}
		}
		if abi >= 3 { // truncate is only restricted from ABI 3
			b, err := os.ReadFile(filepath.Join(tree, "other", "existing"))
			if err != nil || string(b) != existingContent {
				t.Errorf("other/existing = %q, %v; want %q", b, err, existingContent)
			}
		}
		if reached, want := deniedL.accepted(t), abi < 4; reached != want {
			t.Errorf("listener on the port not granted: reached = %v, want %v at ABI %d", reached, want, abi)
		}
	})
}

// TestRulesetRejects checks that Ruleset refuses bad paths, whatever the
// ABI, returns fd -1 and leaves no descriptor open, and that paths
// resolve beneath root: links that lead out of it name nothing.
func TestRulesetRejects(t *testing.T) {
	outside := t.TempDir() // a host directory: a valid rw path outside root
	tree := makeTree(t, outside)
	treeRoot, hostRoot := openRoot(t, tree), openRoot(t, "/")

	tests := []struct {
		name    string
		root    int
		rw, dev []string
		wantErr error // nil means valid
	}{
		{name: "valid", root: treeRoot, rw: []string{"/work", "/tmplink"}},
		{name: "rw missing", root: treeRoot, rw: []string{"/missing"}, wantErr: fs.ErrNotExist},
		{name: "rw relative", root: treeRoot, rw: []string{"work"}, wantErr: ErrInvalidPath},
		{name: "rw regular file", root: treeRoot, rw: []string{"/file"}, wantErr: ErrInvalidPath},
		{name: "rw second entry missing", root: treeRoot, rw: []string{"/work", "/missing"}, wantErr: fs.ErrNotExist},
		{name: "dev missing after valid rw", root: treeRoot, rw: []string{"/work"}, dev: []string{"/dev/full"}, wantErr: fs.ErrNotExist},
		{name: "dev relative", root: treeRoot, dev: []string{"dev/null"}, wantErr: ErrInvalidPath},
		{name: "dev directory would grant every device beneath", root: treeRoot, dev: []string{"/dev"}, wantErr: ErrInvalidPath},
		{name: "dev regular file", root: treeRoot, dev: []string{"/dev/null"}, wantErr: ErrInvalidPath},
		{name: "absolute symlink to a host dir", root: treeRoot, rw: []string{"/escape"}, wantErr: fs.ErrNotExist},
		{name: "dot-dot symlink to a host dir", root: treeRoot, rw: []string{"/escape-up"}, wantErr: fs.ErrNotExist},
		{name: "dot-dot path to a host dir", root: treeRoot, rw: []string{"/../../../../../../../.." + outside}, wantErr: fs.ErrNotExist},
		{name: "symlink to a host device", root: treeRoot, dev: []string{"/null"}, wantErr: ErrInvalidPath},
		{name: "proc magic link", root: hostRoot, rw: []string{"/proc/self/cwd"}, wantErr: unix.ELOOP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := openFDs(t)
			fd, abi, err := Ruleset(tt.root, tt.rw, tt.dev)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Ruleset() = %v, want nil", err)
				}
				if (fd >= 0) != (abi > 0) || abi != min(ABI(), pinnedABI) {
					t.Errorf("Ruleset() = fd %d, ABI %d; kernel has ABI %d", fd, abi, ABI())
				}
				if fd >= 0 {
					unix.Close(fd)
				}
			} else {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Ruleset() = %v, want errors.Is %v", err, tt.wantErr)
				}
				if fd != -1 || abi != 0 {
					t.Errorf("Ruleset() = fd %d, ABI %d with an error; want -1, 0", fd, abi)
				}
				t.Logf("error: %v", err)
			}
			if after := openFDs(t); after != before {
				t.Errorf("%d descriptors open after Ruleset, %d before", after, before)
			}
		})
	}
}

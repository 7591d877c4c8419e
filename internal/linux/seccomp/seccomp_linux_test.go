//go:build linux && (amd64 || arm64)

package seccomp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary act as the filtered child: TestMain then
// installs the filter, runs childProbes and prints their results as JSON.
const childEnv = "MOAT_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

const (
	pythonScript = `import subprocess, threading
print(1)
t = threading.Thread(target=print, args=("thread",))
t.start()
t.join()
print(subprocess.run(["/bin/true"]).returncode)`
	pythonWant = "1\nthread\n0\n"
)

// childProbes run after Install. Each returns "ok", the errno name, or a
// description of what went wrong. Probes of denied syscalls pick arguments
// that the kernel itself would reject with a different errno, so that EPERM
// can only come from the filter and a broken filter changes nothing on the
// host.
var childProbes = []struct {
	name  string
	probe func() string
}{
	{"unshare newuser", func() string { return errnoResult(unix.Unshare(unix.CLONE_NEWUSER)) }},
	{"mount", func() string { // ENOENT without the filter.
		return errnoResult(unix.Mount("none", "/nonexistent-moat-seccomp-test", "tmpfs", 0, ""))
	}},
	{"chroot", func() string { return errnoResult(unix.Chroot("/nonexistent-moat-seccomp-test")) }},
	{"ptrace attach", func() string { // ESRCH without the filter: the pid is above pid_max.
		return errnoResult(unix.PtraceAttach(0x3fffffff))
	}},
	{"ptrace traceme", probePtraceTraceme},
	{"bpf", func() string { return rawResult(unix.SYS_BPF, 0xffff, 0, 0) }},                  // EINVAL without the filter.
	{"keyctl", func() string { return rawResult(unix.SYS_KEYCTL, 0xffff, 0, 0) }},            // EOPNOTSUPP without the filter.
	{"io_uring_setup", func() string { return rawResult(unix.SYS_IO_URING_SETUP, 1, 0, 0) }}, // EFAULT without the filter.
	{"clone3", func() string { return rawResult(unix.SYS_CLONE3, 0, 0, 0) }},                 // EINVAL without the filter.
	{"clone newns", func() string { return probeRawClone(unix.CLONE_NEWNS | uintptr(unix.SIGCHLD)) }},
	{"clone newuser", func() string { return probeRawClone(unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)) }},
	{"clone fork", func() string { return probeRawClone(uintptr(unix.SIGCHLD)) }},
	{"socket unix", func() string { return probeSocket(unix.AF_UNIX) }},
	{"socket vsock", func() string { return probeSocket(unix.AF_VSOCK) }},
	{"ioctl tcgets", func() string { return probeIoctl(unix.TCGETS) }},   // ENOTTY: allowed, reaches the kernel.
	{"ioctl tiocsti", func() string { return probeIoctl(unix.TIOCSTI) }}, // ENOTTY without the filter.
	{"ioctl tiocsti high bits", func() string { return probeIoctl(0xffffffff<<32 | unix.TIOCSTI) }},
	{"personality query", func() string { return rawResult(unix.SYS_PERSONALITY, 0xffffffff, 0, 0) }},
	{"personality addr_no_randomize", func() string { return rawResult(unix.SYS_PERSONALITY, 0x0040000, 0, 0) }},
	{"python3", func() string { return probeExec(exec.Command("/usr/bin/python3", "-c", pythonScript), pythonWant) }},
	{"bash pipe", func() string { return probeExec(exec.Command("/bin/bash", "-c", "echo a | cat"), "a\n") }},
	{"exec as nobody", func() string {
		cmd := exec.Command("/usr/bin/id", "-u")
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
		}
		return probeExec(cmd, "65534\n")
	}},
	{"all threads filtered", probeAllThreads},
}

func runChild() int {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "set no_new_privs: %v\n", err)
		return 2
	}
	if err := Install(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		return 2
	}
	results := map[string]string{}
	for _, p := range childProbes {
		results[p.name] = p.probe()
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintf(os.Stderr, "encode results: %v\n", err)
		return 2
	}
	return 0
}

func TestInstallInSubprocess(t *testing.T) {
	requireKernelTest(t)
	results := runFilteredChild(t)
	tests := []struct {
		probe string
		want  string
	}{
		{"unshare newuser", "EPERM"},
		{"mount", "EPERM"},
		{"chroot", "EPERM"},
		{"ptrace attach", "EPERM"},
		{"ptrace traceme", "EPERM"},
		{"bpf", "EPERM"},
		{"keyctl", "EPERM"},
		{"io_uring_setup", "EPERM"},
		{"clone3", "ENOSYS"},
		{"clone newns", "EPERM"},
		{"clone newuser", "EPERM"},
		{"clone fork", "ok"},
		{"socket unix", "ok"},
		{"socket vsock", "EPERM"},
		{"ioctl tcgets", "ENOTTY"},
		{"ioctl tiocsti", "EPERM"},
		{"ioctl tiocsti high bits", "EPERM"},
		{"personality query", "ok"},
		{"personality addr_no_randomize", "EPERM"},
		{"python3", "ok"},
		{"bash pipe", "ok"},
		{"exec as nobody", "ok"},
		{"all threads filtered", "ok"},
	}
	if len(tests) != len(childProbes) {
		t.Fatalf("%d expectations for %d probes", len(tests), len(childProbes))
	}
	for _, tt := range tests {
		t.Run(tt.probe, func(t *testing.T) {
			got, ok := results[tt.probe]
			if !ok {
				t.Fatalf("child reported nothing for %q", tt.probe)
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestSupported(t *testing.T) {
	requireKernelTest(t)
	if err := Supported(); err != nil {
		t.Fatalf("Supported() = %v, want nil", err)
	}
}

// requireKernelTest skips unless the test runs as root on a kernel with
// seccomp filter mode. With CI=true it fails instead: CI runs as root on a
// capable kernel, so a skip there would hide a regression.
func requireKernelTest(t *testing.T) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "kernel test needs root"
	} else if err := Supported(); err != nil {
		reason = fmt.Sprintf("kernel test needs seccomp: %v", err)
	}
	if reason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(reason)
	}
	t.Skip(reason)
}

// runFilteredChild re-executes the test binary as the filtered child, since
// Install cannot be undone, and returns its probe results.
func runFilteredChild(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("filtered child: %v\nstderr: %s", err, stderr.String())
	}
	results := map[string]string{}
	if err := json.Unmarshal(stdout.Bytes(), &results); err != nil {
		t.Fatalf("decode child results %q: %v", stdout.String(), err)
	}
	return results
}

func errnoResult(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func rawResult(nr, a1, a2, a3 uintptr) string {
	_, _, errno := unix.Syscall(nr, a1, a2, a3)
	if errno != 0 {
		return unix.ErrnoName(errno)
	}
	return "ok"
}

// probePtraceTraceme runs PTRACE_TRACEME only once PTRACE_ATTACH was refused
// with EPERM, which the kernel cannot return for a pid above pid_max. A
// successful TRACEME would make the test binary's thread a tracee of the
// parent test and stop it at its next signal.
func probePtraceTraceme() string {
	if got := errnoResult(unix.PtraceAttach(0x3fffffff)); got != "EPERM" {
		return "not run: ptrace attach gave " + got
	}
	return rawResult(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
}

// probeRawClone calls clone(2) directly with flags and no new stack, so a
// child, if one is created, continues here on a copy of this stack; it exits
// at once and is reaped.
func probeRawClone(flags uintptr) string {
	pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, flags, 0, 0, 0, 0, 0)
	if errno != 0 {
		return unix.ErrnoName(errno)
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(int(pid), &ws, 0, nil); err != nil {
		return "wait4: " + err.Error()
	}
	return "ok"
}

func probeSocket(domain int) string {
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	return errnoResult(err)
}

// probeIoctl issues ioctl(/dev/null, cmd, &b); /dev/null is no terminal, so
// the kernel answers ENOTTY for every terminal request that reaches it.
func probeIoctl(cmd uint64) string {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var b byte
	return rawResult(unix.SYS_IOCTL, f.Fd(), uintptr(cmd), uintptr(unsafe.Pointer(&b)))
}

func probeExec(cmd *exec.Cmd, want string) string {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%v: %q", err, out)
	}
	if string(out) != want {
		return fmt.Sprintf("output %q, want %q", out, want)
	}
	return "ok"
}

// probeAllThreads checks /proc that TSYNC gave every thread the filters and
// no_new_privs.
func probeAllThreads() string {
	c, err := compile()
	if err != nil {
		return err.Error()
	}
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Sprintf("list threads: %v", err)
	}
	want := []string{
		"Seccomp:\t2",
		fmt.Sprintf("Seccomp_filters:\t%d", len(c.filters)),
		"NoNewPrivs:\t1",
	}
	for _, task := range tasks {
		status, err := os.ReadFile(task)
		if err != nil {
			return err.Error()
		}
		for _, w := range want {
			if !strings.Contains(string(status), w+"\n") {
				return fmt.Sprintf("%s lacks %q", task, w)
			}
		}
	}
	return "ok"
}

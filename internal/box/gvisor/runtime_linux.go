package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/childproc"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// LaunchRole is argv[1] of the launcher: moat, started in the sandbox's cgroup-to-be,
// waits until moat has moved it there, then runs runsc and reaps it and everything
// it leaves. On cgroup v1 a process can only be moved after it started; the launcher
// makes sure runsc and everything it starts (the Sentry, the gofer, the ptrace stubs)
// begin inside the cgroup. It is their subreaper: the stubs outlive the Sentry by a
// moment, and without it they would end as zombies of the host's init, reaped when
// init gets to it (some inits are slow to).
const LaunchRole = "__moat-runsc"

func init() { childproc.Add(LaunchRole, launch) }

// launch is the launcher: argv is [moat-runsc, LaunchRole, RUNSC, ARGS...], fd 3 the
// read end of a pipe on which moat writes one byte once the launcher is in the cgroup
// (and closes without one to abort). It exits with runsc's status (128+N for signal
// N) once runsc and every orphan it adopted are reaped.
func launch() int {
	goFile := os.NewFile(3, "go")
	var b [1]byte
	n, _ := io.ReadFull(goFile, b[:])
	goFile.Close() // runsc must not inherit it
	if n != 1 || len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "moat-runsc: aborted before runsc started")
		return 125
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "moat-runsc: prctl(PR_SET_CHILD_SUBREAPER): %v\n", err)
		return 125
	}
	// Signals are moat's to send (SIGKILL); the launcher outlives runsc's children.
	signal.Ignore(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGPIPE)
	p, err := os.StartProcess(os.Args[2], os.Args[2:], &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}, // runsc dies with the launcher
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "moat-runsc: start %s: %v\n", os.Args[2], err)
		return 125
	}
	runsc := p.Pid
	_ = p.Release() // reaped below, with the orphans
	status := 125
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: runsc and every adopted orphan are gone
			return status
		}
		if pid == runsc {
			status = ws.ExitStatus()
			if ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
		}
	}
}

// Bounds of the runtime's own work.
const (
	// commandTimeout bounds a runsc command moat runs to completion (delete, version).
	commandTimeout = 30 * time.Second
	// exitTimeout bounds how long Remove waits for runsc to exit once killed.
	exitTimeout = 10 * time.Second
)

// Runtime makes each box a gVisor sandbox: runsc run on an OCI bundle, inside a cgroup
// moat made. It implements container.Runtime. NewBackend fills it in.
type Runtime struct {
	// Runsc is runsc's absolute path.
	Runsc string
	// Platform is runsc's --platform: ptrace (the default; works everywhere), or
	// systrap or kvm where runsc and the host have them.
	Platform string
	// StateDir holds runsc's state (runsc/, runsc --root) and the bundles (bundles/).
	StateDir string
	// Rootfs is the boxes' read-only root: an image's root directory, or moat's
	// skeleton of the host's (then Binds show the host's runtime trees and /etc
	// entries).
	Rootfs string
	Binds  []Mount
	// AgentPath is the host path of the moat binary (static): the box's agent, and
	// the launcher.
	AgentPath string
	// controllers are the cgroup controllers boxes get, for Isolation.
	controllers []string
}

// Name implements container.Runtime.
func (r *Runtime) Name() string { return "gvisor" }

func (r *Runtime) runscRoot() string  { return filepath.Join(r.StateDir, "runsc") }
func (r *Runtime) bundlesDir() string { return filepath.Join(r.StateDir, "bundles") }

// globalArgs are runsc's flags before the command. The log goes to a file: runsc's
// default is its stdout, which is the box's stream. --ignore-cgroups: runsc would
// otherwise move the sandbox into a cgroup of its own (the spec has a memory limit,
// which the Sentry sizes itself by), out of moat's, where moat neither bounds its
// pids nor counts its OOM kills.
func (r *Runtime) globalArgs(logFile string) []string {
	return []string{
		"--root", r.runscRoot(),
		"--platform", r.Platform,
		"--network", "none",
		"--host-uds", "none",
		"--ignore-cgroups",
		"--log", logFile,
		"--panic-log", logFile,
	}
}

// Start implements container.Runtime: write the bundle, make the cgroup, start the
// launcher in it, and let it run runsc run. A failure removes all of it.
func (r *Runtime) Start(ctx context.Context, _ string, lim box.Limits) (_ container.Container, err error) {
	lim = lim.WithDefaults()
	id := native.BoxName()
	s := &sandbox{r: r, id: id, dir: filepath.Join(r.bundlesDir(), id), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			s.cleanup()
		}
	}()
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the box's bundle: %w", err)
	}
	spec := Spec(BundleParams{Rootfs: r.Rootfs, Binds: r.Binds, AgentHostPath: r.AgentPath, Limits: lim})
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode the box's OCI spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "config.json"), js, 0o600); err != nil {
		return nil, fmt.Errorf("write the box's OCI spec: %w", err)
	}
	if s.cg, err = cgroup.New(id, cgroup.Limits{MemoryBytes: lim.Memory, Pids: HostTaskLimit(lim.Pids), CPUs: lim.CPUs}); err != nil {
		return nil, fmt.Errorf("create the box's cgroup: %w", err)
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// AgentKillable implements container.Runtime: gVisor's kernel delivers a SIGKILL to
// its pid namespace's init. The code cannot send one (the agent is another user,
// container.RootCaps); it stays true so that an agent SIGKILLed inside the sandbox
// is not reported as killed from outside moat.
func (r *Runtime) AgentKillable() bool { return true }

// Isolation implements container.Runtime.
func (r *Runtime) Isolation() []string {
	iso := []string{
		"gvisor", "gvisor_kernel", "platform_" + r.Platform,
		"network_none", "pid_namespace", "mount_namespace", "ipc_namespace", "uts_namespace",
		"readonly_root", "uid_65534", "no_capabilities", "no_new_privs", "seccomp", "rlimits",
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		for _, have := range r.controllers {
			if have == c {
				iso = append(iso, "cgroup_"+c)
			}
		}
	}
	return iso
}

// sandbox is one box's gVisor sandbox, seen from the host.
type sandbox struct {
	r   *Runtime
	id  string
	dir string // the bundle
	cg  *cgroup.Box

	stdin          *os.File
	stdout, stderr io.Reader
	outF, errF     *os.File
	closeOnce      sync.Once

	proc   *os.Process
	exited chan struct{} // closed once runsc exited
	state  *os.ProcessState
}

func (s *sandbox) logFile() string { return filepath.Join(s.dir, "runsc.log") }

// start starts the launcher in the cgroup with the stream's pipes, and lets it go.
func (s *sandbox) start(ctx context.Context) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer inR.Close()
	s.stdin = inW
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outW.Close()
	s.outF, s.stdout = outR, closedPipe{outR}
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer errW.Close()
	s.errF, s.stderr = errR, closedPipe{errR}
	goR, goW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer goR.Close()
	defer goW.Close()
	args := append([]string{"moat-runsc", LaunchRole, s.r.Runsc}, s.r.globalArgs(s.logFile())...)
	args = append(args, "run", "--bundle", s.dir, s.id)
	cmd := &exec.Cmd{
		Path:       s.r.AgentPath,
		Args:       args,
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Stdin:      inR,
		Stdout:     outW,
		Stderr:     errW,
		ExtraFiles: []*os.File{goR},
		// The launcher, and with it runsc, dies with moat (a crashed moat leaves no
		// sandbox running); the Sentry runs attached to runsc run and dies with it.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	born, err := native.StartInCgroup(cmd, s.cg)
	if err != nil {
		return fmt.Errorf("start runsc: %w", err)
	}
	s.proc = cmd.Process
	go func() {
		_ = cmd.Wait()
		s.state = cmd.ProcessState
		close(s.exited)
	}()
	if !born {
		if err := s.cg.AddProc(cmd.Process.Pid); err != nil {
			return fmt.Errorf("move runsc into the box's cgroup: %w", err)
		}
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		return fmt.Errorf("start runsc: %w", err)
	}
	return ctx.Err()
}

// closedPipe reads a pipe, and reports a read after CloseStream as io.ErrClosedPipe,
// as container.Container asks.
type closedPipe struct{ f *os.File }

func (c closedPipe) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	if errors.Is(err, os.ErrClosed) {
		err = io.ErrClosedPipe
	}
	return n, err
}

func (s *sandbox) ID() string            { return s.id }
func (s *sandbox) Stdin() io.WriteCloser { return s.stdin }
func (s *sandbox) Stdout() io.Reader     { return s.stdout }
func (s *sandbox) Stderr() io.Reader     { return s.stderr }
func (s *sandbox) Warnings() []string    { return nil }

// CloseStream implements container.Container.
func (s *sandbox) CloseStream() {
	s.closeOnce.Do(func() {
		for _, f := range []*os.File{s.stdin, s.outF, s.errF} {
			if f != nil {
				f.Close()
			}
		}
	})
}

// Wait implements container.Container: runsc run exits with the agent's status once
// the sandbox is gone. The box was OOM-killed when the kernel's OOM killer killed a
// task in the cgroup (the Sentry, when the box's memory outgrows the limit).
func (s *sandbox) Wait(ctx context.Context) (container.Exit, error) {
	select {
	case <-s.exited:
	case <-ctx.Done():
		return container.Exit{}, fmt.Errorf("wait for runsc: %w", ctx.Err())
	}
	code := s.state.ExitCode()
	if ws, ok := s.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return container.Exit{Code: code, OOMKilled: s.OOMKills() > 0}, nil
}

// Kill implements container.Container: every host process of the sandbox (runsc, the
// Sentry, the gofer, the stubs) is in the cgroup. The launcher is spared: it reaps
// them all and exits.
func (s *sandbox) Kill(context.Context) error {
	if s.cg == nil {
		return nil
	}
	if s.proc == nil {
		return s.cg.Kill()
	}
	return s.cg.KillExcept(s.proc.Pid)
}

// Remove implements container.Container: kill, wait for runsc, have runsc forget the
// sandbox, remove the cgroup and the bundle.
func (s *sandbox) Remove(ctx context.Context) error {
	var errs []error
	if err := s.Kill(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.proc != nil {
		select {
		case <-s.exited:
		case <-time.After(exitTimeout):
			errs = append(errs, errors.New("runsc's launcher did not exit once the sandbox was killed"))
		}
	}
	s.cleanup()
	return errors.Join(errs...)
}

// cleanup removes what Start made: runsc's state of the sandbox, the cgroup, the
// bundle. Failures are for the next Sweep.
func (s *sandbox) cleanup() {
	s.CloseStream()
	if s.proc != nil {
		_ = s.proc.Kill()
		select {
		case <-s.exited:
		case <-time.After(exitTimeout):
		}
	}
	deleteSandbox(s.r.Runsc, s.r.runscRoot(), s.id)
	if s.cg != nil {
		_ = s.cg.Destroy()
	}
	_ = os.RemoveAll(s.dir)
}

// Usage implements container.Container: the cgroup's counters (the sandbox's:
// gVisor's kernel and the code together); not ok once the cgroup is gone.
func (s *sandbox) Usage() (time.Duration, int64, bool) {
	if s.cg == nil {
		return 0, 0, false
	}
	st, err := s.cg.Stats()
	if err != nil || st.CPUUsage < 0 {
		return 0, 0, false
	}
	return st.CPUUsage, max(st.PeakMemoryBytes, 0), true
}

// OOMKills implements container.Container: the cgroup's count.
func (s *sandbox) OOMKills() int64 {
	if s.cg == nil {
		return 0
	}
	st, err := s.cg.Stats()
	if err != nil || st.OOMKills < 0 {
		return 0
	}
	return st.OOMKills
}

// deleteSandbox has runsc forget a sandbox whose processes are gone (runsc delete
// --force); one runsc does not know is not an error.
func deleteSandbox(runsc, root, id string) {
	if m, _ := filepath.Glob(filepath.Join(root, "*"+id+"*")); len(m) == 0 {
		return // runsc run cleaned up after itself
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	_ = exec.CommandContext(ctx, runsc, "--root", root, "delete", "--force", id).Run()
}

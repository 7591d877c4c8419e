package native

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// Host ids the box's user namespace maps to. Neither is host root, and neither owns any
// host file, so a process that escaped its namespaces would still be unprivileged.
const (
	HostRootUID = 1_000_000_000        // uid 0 inside (init only)
	HostBoxUID  = HostRootUID + boxUID // uid 65534 inside (the code)
	cloneFlags  = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
	readChunk   = 32 << 10
	// initReserve is added to the box's pids cgroup limit for init's own threads; the
	// code itself is held to Limits.Pids by RLIMIT_NPROC.
	initReserve = 16
	drainGrace  = 2 * time.Second
	cgroupGrace = 2 * time.Second
)

// chunks recycles the buffers the output, report and hello reads use: a fresh
// 32 KiB buffer for each read was most of what the server allocated per
// execution (its collector then ran every few executions).
var chunks = sync.Pool{New: func() any { return new([readChunk]byte) }}

// Backend is the native backend. The zero value is ready to use.
type Backend struct {
	// Log receives operational messages; nil means slog.Default().
	Log *slog.Logger
	// Starter, when set, starts each box's init (in a container, say) instead of
	// fresh namespaces of this host, and Label names the backend.
	Starter Starter
	Label   string

	zys zygotes // the zygotes of session specs that name one (zygote_linux.go)
}

// Name implements box.Backend.
func (b *Backend) Name() string {
	if b.Label != "" {
		return b.Label
	}
	return "native"
}

// starter returns how boxes are started, and whether that is in container mode.
func (b *Backend) starter() (Starter, bool) {
	if b.Starter != nil {
		return b.Starter, true
	}
	return nsStarter{rootless: os.Geteuid() != 0}, false
}

func (b *Backend) log() *slog.Logger {
	if b.Log != nil {
		return b.Log
	}
	return slog.Default()
}

// Run implements box.Backend.
func (b *Backend) Run(ctx context.Context, spec *box.Spec) (*box.Result, error) {
	lang, err := box.LookupLanguage(spec.Language)
	if err != nil {
		return nil, err
	}
	if err := box.CheckNetwork(spec.Network, spec.Egress); err != nil {
		return nil, err
	}
	lim := spec.Limits.WithDefaults()
	argv := lang.Argv
	if len(spec.Interpreter) > 0 {
		argv = spec.Interpreter
	}
	start := time.Now()
	tr := newPhaseTrace(start)
	defer func() { tr.report(b.log()) }()
	bp, err := b.launch(launchSpec{
		language: lang.Name,
		init: initSpec{
			Support:  spec.Support,
			Argv:     argv,
			Env:      box.MergeEnv(spec.Env),
			Code:     spec.Code,
			CodePath: lang.CodePath,
			CPUSecs:  uint64(math.Ceil(lim.Timeout.Seconds()*math.Max(lim.CPUs, 1))) + 2,
		},
		limits: lim,
		files:  spec.Files,
		report: spec.Report,
		egress: spec.Egress,
	}, tr)
	if err != nil {
		return nil, err
	}
	defer bp.release(b.log(), tr)
	proc := bp.proc
	_, contained := b.starter()
	stdoutR, stderrR, reportR := bp.stdoutR, bp.stderrR, bp.reportR
	kill := bp.kill
	res := &box.Result{Warnings: bp.warnings}
	// Everything from here reads untrusted data: frames are bounded, output is capped.
	outCap := box.NewCapture(lim.Output, spec.Stdout)
	errCap := box.NewCapture(lim.Output, spec.Stderr)
	outSink, errSink := filtered(spec.Filter, outCap), filtered(spec.Filter, errCap)
	flood := make(chan struct{}, 2)
	var readers sync.WaitGroup
	readers.Add(2)
	go drain(&readers, stdoutR, outSink, lim.Output, flood)
	go drain(&readers, stderrR, errSink, lim.Output, flood)
	var reportData []byte
	reportDone := make(chan struct{})
	if reportR != nil {
		go func() { reportData = readBounded(reportR, box.MaxReportBytes); close(reportDone) }()
	} else {
		close(reportDone)
	}
	msgc := make(chan initReport, 1)
	go func() { msgc <- readReport(bp.sock) }()
	specErr := bp.handOver()
	waitc := make(chan error, 1)
	go func() { waitc <- proc.Wait() }()

	timer := time.NewTimer(lim.Timeout)
	defer timer.Stop()
	var killedFor box.Status
	var waitErr error
wait:
	for {
		select {
		case waitErr = <-waitc:
			break wait
		case <-timer.C:
			killedFor = box.StatusTimeout
			kill()
		case <-flood:
			if killedFor == "" {
				killedFor = box.StatusOutputLimit
			}
			kill()
		case <-ctx.Done():
			if killedFor == "" {
				killedFor = box.StatusKilled
			}
			kill()
		}
	}
	res.DurationMS = time.Since(start).Milliseconds()
	tr.mark("run")
	waitedAt := time.Now()
	defer func() { res.Timing.Teardown = time.Since(waitedAt) }()
	proc.Kill() // init is gone, so is every process of the box; this is belt and braces
	pipes := []*os.File{stdoutR, stderrR}
	if reportR != nil {
		pipes = append(pipes, reportR)
	}
	waitReaders(&readers, reportDone, pipes...)
	_ = outSink.Close()
	_ = errSink.Close()
	res.Report = reportData
	report := <-msgc
	msg := report.final
	if report.confinedAt.IsZero() {
		res.Timing.Run = waitedAt.Sub(start)
	} else {
		res.Timing.Start = report.confinedAt.Sub(start)
		res.Timing.Run = waitedAt.Sub(report.confinedAt)
	}
	tr.mark("drain")
	tr.note("init_setup", time.Duration(msg.SetupMicros)*time.Microsecond)
	if !report.finalAt.IsZero() {
		tr.note("init_exit_to_reaped", waitedAt.Sub(report.finalAt))
	}
	tr.text("init_steps", msg.Laps)

	res.Stdout, res.Stderr = outCap.String(), errCap.String()
	res.Truncated = outCap.Truncated() || errCap.Truncated()
	res.Usage = box.Usage{CPUMS: msg.CPUMicros / 1000, PeakMemoryBytes: msg.MaxRSSBytes}
	oomKills := int64(0)
	if u, ok := proc.Usage(); ok {
		if u.CPU > 0 {
			res.Usage.CPUMS = u.CPU.Milliseconds()
		}
		if u.PeakMemoryBytes > 0 {
			res.Usage.PeakMemoryBytes = u.PeakMemoryBytes
		}
		oomKills = u.OOMKills
	}
	res.Isolation = proc.Isolation(report.landlockABI)
	tr.mark("stats")

	switch {
	case killedFor != "":
		res.Status, res.ExitCode = killedFor, -1
	case specErr != nil:
		return nil, fmt.Errorf("hand the spec to box init: %w", specErr)
	case msg.Kind == "error":
		return nil, msg.childError()
	case msg.Kind != "exit" && oomKills > 0:
		// The OOM killer took init too, or the whole box with it (gVisor's
		// Sentry is charged for the code's memory and dies first).
		res.Status, res.ExitCode = box.StatusMemoryLimit, -1
	case msg.Kind != "exit" && contained && !errors.Is(waitErr, ErrProcLost):
		// In a container, init runs as the code's user: the code can kill it, or
		// starve it of processes. The box is gone; that is the code's doing.
		res.Status, res.ExitCode = box.StatusKilled, -1
		res.Stderr += "\n[moat: the box's init ended before the code did (killed or starved by the code); the box was destroyed]\n"
	case msg.Kind != "exit":
		return nil, fmt.Errorf("box init ended without a result (%v, %s); its last output: %q", waitErr, msg.Detail, box.LastLine(errCap.String(), 300))
	case oomKills > 0 && msg.ExitCode != 0:
		res.Status, res.ExitCode = box.StatusMemoryLimit, msg.ExitCode
	case msg.Signal != 0:
		res.Status, res.ExitCode = box.StatusKilled, msg.ExitCode
	case msg.ExitCode != 0:
		res.Status, res.ExitCode = box.StatusError, msg.ExitCode
	default:
		res.Status = box.StatusOK
	}
	if res.Status == box.StatusTimeout {
		res.Stderr += fmt.Sprintf("\n[moat: killed after the timeout of %s]\n", lim.Timeout)
	}
	if res.Status == box.StatusMemoryLimit {
		res.Stderr += fmt.Sprintf("\n[moat: killed at the memory limit of %d bytes]\n", lim.Memory)
	}
	if res.Status == box.StatusOutputLimit {
		res.Stderr += fmt.Sprintf("\n[moat: killed for flooding output far past the cap of %d bytes]\n", lim.Output)
	}
	if report.confined {
		res.Warnings = append(res.Warnings, warnings(report.landlockABI)...)
	}
	res.Normalize()
	return res, nil
}

// initReport is what init said: whether it confined the box (and with which Landlock
// ABI) and its final "exit" or "error" message (Kind "none" if it said nothing more).
type initReport struct {
	confined    bool
	confinedAt  time.Time // when init said the box was confined (the code starts next)
	landlockABI int
	final       initMsg
	finalAt     time.Time // when the final message arrived (phase tracing)
}

// readReport reads init's frames until EOF. A malformed or oversized frame ends the
// reading; the box is then judged by what was read.
func readReport(r io.Reader) initReport {
	var rep initReport
	for {
		var m initMsg
		if err := readFrame(r, maxInitFrame, &m); err != nil {
			if rep.final.Kind == "" {
				rep.final = initMsg{Kind: "none", Detail: err.Error()}
			}
			return rep
		}
		switch m.Kind {
		case "confined":
			rep.confined, rep.landlockABI, rep.confinedAt = true, m.LandlockABI, time.Now()
		case "exit", "error":
			rep.final = m
			rep.finalAt = time.Now()
		}
	}
}

type filterResult struct {
	prog []byte
	err  error
}

// drain copies one output pipe into its sink (the filter, then the capture) and
// reports a flood once. Flood detection counts raw bytes, before any filter, against
// the stream's cap.
func drain(wg *sync.WaitGroup, r io.Reader, sink io.Writer, capBytes int64, flood chan<- struct{}) {
	defer wg.Done()
	chunk := chunks.Get().(*[readChunk]byte)
	defer chunks.Put(chunk)
	buf := chunk[:]
	var total int64
	reported := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = sink.Write(buf[:n]) // a filter error must not stop the draining
			total += int64(n)
			if !reported && box.Flooded(total, capBytes) {
				reported = true
				flood <- struct{}{}
			}
		}
		if err != nil {
			return
		}
	}
}

// filtered is the writer chain of one stream: the engine's filter, then the capture.
func filtered(filter func(io.Writer) io.WriteCloser, c *box.Capture) io.WriteCloser {
	if filter == nil {
		return nopCloser{c}
	}
	return filter(c)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// readBounded reads r to EOF, keeping at most max bytes.
func readBounded(r io.Reader, max int) []byte {
	var out []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && len(out) < max {
			out = append(out, buf[:min(n, max-len(out))]...)
		}
		if err != nil {
			return out
		}
	}
}

// waitReaders waits for the output pipes (and the report) to reach EOF. Every writer
// died with the PID namespace, so EOF is immediate; the grace only guards against a
// kernel surprise.
func waitReaders(wg *sync.WaitGroup, reportDone <-chan struct{}, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { wg.Wait(); <-reportDone; close(done) }()
	select {
	case <-done:
	case <-time.After(drainGrace):
		for _, p := range pipes {
			_ = p.SetReadDeadline(time.Now())
		}
		<-done
	}
}

func isolationList(cg *cgroup.Box, landlockABI int, rootless bool) []string {
	iso := []string{
		"user_namespace", "mount_namespace", "pid_namespace", "network_namespace",
		"ipc_namespace", "uts_namespace", "cgroup_namespace",
		"readonly_root", "uid_65534", "no_capabilities", "no_new_privs", "seccomp", "rlimits",
	}
	if landlockABI > 0 {
		iso = append(iso, "landlock_abi_"+strconv.Itoa(landlockABI))
	}
	if rootless {
		iso = append(iso, "rootless")
	}
	if cg != nil {
		iso = append(iso, fmt.Sprintf("cgroup_v%d", cg.Version()))
		for _, c := range cg.Controllers() {
			iso = append(iso, "cgroup_"+c)
		}
	}
	return iso
}

func warnings(landlockABI int) []string {
	if landlockABI == 0 {
		return []string{"landlock unavailable on this kernel: file writes are confined by the read-only mounts only"}
	}
	return nil
}

// BoxName returns a new name for a box's cgroup (and, for gvisor, its sandbox):
// "box-<pid>-<random>", so that cgroup.Sweep and OwnerGone know its owner.
func BoxName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("box-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}

// selfPath returns the running binary's host path (masked in a native box, and run
// as its init). It is looked up once per process: launch and the native Starter both
// need it for every box.
var selfPath = sync.OnceValues(func() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own binary: %w", err)
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	return path, nil
})

// openSelf opens the running binary for init to be executed through its fd.
func openSelf() (*os.File, error) {
	path, err := selfPath()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open own binary: %w", err)
	}
	return f, nil
}

func socketpair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "sync-parent"), os.NewFile(uintptr(fds[1]), "sync-child"), nil
}

// boxPipe makes an output pipe owned by the box's uid, so that code may reopen it as
// /dev/stdout or /dev/stderr (a pipe inode is owned by its creator, mode 0600). Rootless,
// the creator's uid already is the code's.
func boxPipe(rootless bool) (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil || rootless {
		return r, w, err
	}
	if err := unix.Fchown(int(w.Fd()), HostBoxUID, HostBoxUID); err != nil {
		r.Close()
		w.Close()
		return nil, nil, os.NewSyscallError("fchown pipe", err)
	}
	return r, w, nil
}

// childError is the failure an "error" message of a box's init reports.
func (m initMsg) childError() *ChildError {
	return &ChildError{Step: m.Step, Errno: syscall.Errno(m.Errno), Detail: m.Detail}
}

// ChildError is a failure of the box's init during setup, reported over the sync socket.
type ChildError struct {
	Step   string
	Errno  syscall.Errno
	Detail string
}

func (e *ChildError) Error() string { return "box setup failed at " + e.Step + ": " + e.Detail }

// Unwrap lets callers test the errno with errors.Is.
func (e *ChildError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// initAttr returns how init is cloned. As root the box's user namespace maps two
// unprivileged host ids (HostRootUID for init, HostBoxUID for the code); rootless, an
// ordinary user can map only its own uid and gid, once, and setgroups must be denied.
func initAttr(rootless bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: cloneFlags,
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:  syscall.SIGKILL,
	}
	if rootless {
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		attr.Credential.NoSetGroups = true
		return attr
	}
	ids := func(inside int) []syscall.SysProcIDMap {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: HostRootUID, Size: 1}, {ContainerID: inside, HostID: HostBoxUID, Size: 1}}
	}
	attr.UidMappings, attr.GidMappings = ids(boxUID), ids(boxGID)
	attr.GidMappingsEnableSetgroups = true
	return attr
}

// ErrNoUserNS: the kernel refused to create the box's namespaces.
var ErrNoUserNS = errors.New("the kernel refused to create user namespaces")

func startError(err error, rootless bool) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EINVAL) {
		hint := "check user.max_user_namespaces"
		if rootless {
			hint = "unprivileged user namespaces may be disabled (kernel.unprivileged_userns_clone=0, or an AppArmor/SELinux policy); run as root or enable them"
		}
		return fmt.Errorf("start box init: %w: %v (%s)", ErrNoUserNS, err, hint)
	}
	return fmt.Errorf("start box init: %w", err)
}

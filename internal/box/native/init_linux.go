package native

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/childproc"
	"github.com/moat-sandbox/moat/internal/linux/caps"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/linux/landlock"
	"github.com/moat-sandbox/moat/internal/linux/seccomp"
)

// InitRole is argv[1] of the box's init.
const InitRole = "__moat-init"

// The fds init is started with.
const (
	fdSync      = 3
	fdExe       = 4
	fdFirstFile = 5
)

func init() { childproc.Add(InitRole, runInit) }

// Steps name where setup failed, for ChildError.
const (
	StepSpec     = "read-spec"
	StepAwaitGo  = "await-go"
	StepFiles    = "copy-files"
	StepMount    = "mount"
	StepPivot    = "pivot-root"
	StepHostname = "hostname"
	StepNetwork  = "loopback"
	StepEgress   = "egress-sockets"
	StepCgroupNS = "cgroup-namespace"
	StepRlimits  = "rlimits"
	StepCaps     = "capabilities"
	StepNNP      = "no-new-privs"
	StepLandlock = "landlock"
	StepSeccomp  = "seccomp"
	StepExec     = "exec"
)

// writableDirs are the only places the code may write (Landlock).
var writableDirs = []string{"/tmp", "/workspace", "/dev/shm"}

// runInit is PID 1 of the box. It must not write to fds 1 and 2: they are the code's
// output. It reports to the parent on fdSync only.
func runInit() int {
	began := time.Now()
	runtime.LockOSThread() // unshare(CLONE_NEWCGROUP) and fork must happen on one thread
	unix.Close(fdExe)      // the binary's fd: the code must never inherit it
	sync := os.NewFile(fdSync, "sync")
	fail := func(step string, err error) int {
		msg := initMsg{Kind: "error", Step: step, Detail: err.Error()}
		var errno unix.Errno
		if errors.As(err, &errno) {
			msg.Errno = int(errno)
		}
		_ = writeFrame(sync, msg)
		return 1
	}
	var s initSpec
	if err := readFrame(sync, maxSpecFrame, &s); err != nil {
		return fail(StepSpec, err)
	}
	if !s.Container && !s.Rootless {
		if err := clearSecurebits(); err != nil {
			return fail(StepCaps, fmt.Errorf("clear the securebits: %w", err))
		}
	}
	s.last = began
	s.lap("read-spec")
	abi, err := setup(&s, sync)
	if err == nil {
		err = writeFrame(sync, initMsg{Kind: "confined", LandlockABI: abi})
	}
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			return fail(se.step, se.err)
		}
		return fail("setup", err)
	}
	if s.Session {
		return serveSession(&s, sync)
	}
	msg, err := runCode(&s, began)
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			return fail(se.step, se.err)
		}
		return fail(StepExec, err)
	}
	msg.LandlockABI = abi
	_ = writeFrame(sync, msg)
	return msg.ExitCode
}

type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func stepErr(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: step, err: err}
}

// setup runs as PID 1 of the new namespaces. Order matters: mounts need capabilities,
// which are dropped from the bounding set only afterwards; Landlock needs no_new_privs;
// seccomp comes last because it forbids mount and unshare.
// Preconditions: must be called with the OS thread locked.
func setup(s *initSpec, sync *os.File) (landlockABI int, err error) {
	defer s.lap("setup-end")
	if s.Container {
		return setupContained(s, sync)
	}
	if err := mountRootfs(s); err != nil {
		return 0, stepErr(StepMount, err)
	}
	s.lap(StepMount)
	if err := pivotRoot(); err != nil {
		return 0, stepErr(StepPivot, err)
	}
	if err := unix.Sethostname([]byte("moat")); err != nil {
		return 0, stepErr(StepHostname, os.NewSyscallError("sethostname", err))
	}
	if err := loopbackUp(); err != nil {
		return 0, stepErr(StepNetwork, err)
	}
	if s.EgressFD != 0 {
		if err := sendEgressSockets(s.EgressFD); err != nil {
			return 0, stepErr(StepEgress, err)
		}
	}
	s.lap("hostname+lo")
	if err := awaitGo(sync); err != nil {
		return 0, stepErr(StepAwaitGo, err)
	}
	s.lap(StepAwaitGo)
	if err := copyFiles(s); err != nil {
		return 0, stepErr(StepFiles, err)
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return 0, stepErr(StepCgroupNS, os.NewSyscallError("unshare(CLONE_NEWCGROUP)", err))
	}
	s.lap("files+cgroupns")
	if err := setRlimits(s); err != nil {
		return 0, stepErr(StepRlimits, err)
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) //nolint:errcheck // cannot fail for 0
	if s.Zygote {
		// The zygote makes each box's namespaces and mounts: it keeps the capabilities
		// for that, and nothing else (zygote_linux.go).
		if err := caps.DropBounding(zygoteCaps...); err != nil {
			return 0, stepErr(StepCaps, err)
		}
		return 0, nil
	}
	if s.Rootless {
		// Rootless init must still create the code's user namespace, which seccomp
		// would forbid: the second stage (exec_linux.go) confines itself instead.
		return landlock.ABI(), nil
	}
	return confine(s, false, s.connectPorts())
}

// connectPorts are the TCP ports of the box's loopback the code may connect to
// (Landlock): the egress proxy's, when the box has one.
func (s *initSpec) connectPorts() []uint16 {
	if s.EgressFD != 0 {
		return []uint16{box.EgressProxyPort}
	}
	return nil
}

// codeAsBoxUser says whether init runs as root and so must make the code (and what
// it copies into the workspace) the box's user's. A native box's init is root of the
// box's user namespace (but rootless, where only one id is mapped). A contained init
// is the box's user, without privileges, unless the runtime started it as the
// container's root: a gVisor box's agent and init are, with container.RootCaps
// only, so that the code, as another user, cannot open their fds or signal them.
func (s *initSpec) codeAsBoxUser() bool {
	return !s.Rootless && (!s.Container || os.Geteuid() == 0)
}

// setupContained is setup in a box another runtime made (initSpec.Container): its
// namespaces, read-only root, /tmp, /workspace and /.moat (a tmpfs) exist, its limits
// hold, and init runs as the box's user with no capabilities and no_new_privs (or as
// the container's root: see codeAsBoxUser). Init
// places the code and the files, and confines itself as in a native box (rlimits but
// RLIMIT_NPROC, which would count every process of the user on the host: the
// runtime's pids limit holds instead; Landlock where the runtime allows it; moat's
// seccomp filter on top of the runtime's).
// Preconditions: must be called with the OS thread locked.
func setupContained(s *initSpec, sync *os.File) (landlockABI int, err error) {
	s.Pids = 0
	if err := writeCode(s, ""); err != nil {
		return 0, stepErr(StepMount, err)
	}
	if err := awaitGo(sync); err != nil {
		return 0, stepErr(StepAwaitGo, err)
	}
	if err := copyFiles(s); err != nil {
		return 0, stepErr(StepFiles, err)
	}
	if err := setRlimits(s); err != nil {
		return 0, stepErr(StepRlimits, err)
	}
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) //nolint:errcheck // cannot fail for 0
	return confine(s, false, nil)
}

// confine applies, in order, the protections that need no further privilege from the
// caller: an empty bounding set (and, with dropAll, no capabilities at all),
// no_new_privs, Landlock (which needs no_new_privs) and seccomp (last: it forbids
// what the earlier steps use). Every process the caller forks inherits them.
// Preconditions: must be called with the OS thread locked.
func confine(s *initSpec, dropAll bool, connect []uint16) (landlockABI int, err error) {
	if s.Container && os.Geteuid() != 0 {
		// Nothing to drop: a contained init that is the box's user has no
		// capabilities, and the bounding set is the runtime's to clear (it needs
		// CAP_SETPCAP). A contained init that is the container's root (gVisor's,
		// container.RootCaps) empties it as a native init does.
	} else if err := caps.DropBounding(); err != nil {
		return 0, stepErr(StepCaps, err)
	}
	if dropAll {
		if err := caps.ClearAll(); err != nil {
			return 0, stepErr(StepCaps, err)
		}
	}
	if err := caps.NoNewPrivs(); err != nil {
		return 0, stepErr(StepNNP, err)
	}
	s.lap("caps+nnp")
	abi, err := landlock.Restrict(writableDirs, devicePaths(), connect...)
	if err != nil {
		return 0, stepErr(StepLandlock, err)
	}
	s.lap(StepLandlock)
	if err := seccomp.InstallEncoded(s.Seccomp); err != nil {
		return 0, stepErr(StepSeccomp, err)
	}
	return abi, nil
}

// awaitGo blocks until the parent says init is in the box's cgroup. On cgroup v1 the
// parent moves init after clone (there is no CLONE_INTO_CGROUP), and that move waits for
// an RCU grace period; building the root meanwhile hides most of it. Nothing the code
// controls runs before the go frame.
func awaitGo(sync *os.File) error {
	var g goFrame
	if err := readFrame(sync, maxInitFrame, &g); err != nil {
		return err
	}
	if !g.Go {
		return errors.New("parent aborted the box")
	}
	return nil
}

func devicePaths() []string {
	out := make([]string, len(devices))
	for i, d := range devices {
		out[i] = "/dev/" + d
	}
	return out
}

// nprocLimit is init's RLIMIT_NPROC: the code's plus init's own threads; unlimited
// when pids is 0 (a contained box, bounded by its runtime's pids limit).
func nprocLimit(pids int64) uint64 {
	if pids == 0 {
		return unix.RLIM_INFINITY
	}
	return uint64(pids + initReserve)
}

func setRlimits(s *initSpec) error {
	type limit struct {
		res  int
		name string
		v    uint64
	}
	limits := []limit{
		{unix.RLIMIT_CORE, "core", 0},
		{unix.RLIMIT_NOFILE, "nofile", uint64(s.OpenFiles)},
		{unix.RLIMIT_NPROC, "nproc", nprocLimit(s.Pids)}, // the code's own: codeRlimits
		{unix.RLIMIT_CPU, "cpu", s.CPUSecs},
	}
	if s.SigPending > 0 {
		limits = append(limits, limit{unix.RLIMIT_SIGPENDING, "sigpending", s.SigPending})
	}
	for _, l := range limits {
		// Lowering is always allowed; raising past the inherited hard limit is not
		// (CAP_SYS_RESOURCE in the host namespace), so never ask for more.
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.res, &cur); err != nil {
			return fmt.Errorf("getrlimit %s: %w", l.name, err)
		}
		v := min(l.v, cur.Max)
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", l.name, v, err)
		}
	}
	return nil
}

// setCodeRlimits sets the limits that must bind the code but not init's Go runtime
// (whose threads would count against RLIMIT_NPROC and whose address space reservation
// exceeds any useful RLIMIT_AS): the exact process limit and, without cgroups, the
// address space. pid 0 is the calling process.
//
// Rootless, the second stage calls it on itself right before exec: no window. As root,
// init calls it on the code right after the fork returned, while the interpreter is
// still loading; in that window the box is still bounded by the pids cgroup
// (Limits.Pids plus initReserve) and the memory cgroup (RLIMIT_AS is only the fallback
// when there are no cgroups).
func setCodeRlimits(pid int, pids, addressSpace int64) error {
	set := func(res int, name string, v int64) error {
		if v <= 0 {
			return nil
		}
		lim := unix.Rlimit{Cur: uint64(v), Max: uint64(v)}
		if err := unix.Prlimit(pid, res, &lim, nil); err != nil {
			return stepErr(StepRlimits, fmt.Errorf("prlimit %s=%d: %w", name, v, err))
		}
		return nil
	}
	if err := set(unix.RLIMIT_NPROC, "nproc", pids); err != nil {
		return err
	}
	return set(unix.RLIMIT_AS, "as", addressSpace)
}

// loopbackUp brings up lo in the box's empty network namespace, so code can talk to
// itself on 127.0.0.1; there is no other interface and no route out.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("ioctl(SIOCGIFFLAGS)", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("ioctl(SIOCSIFFLAGS)", err)
	}
	return nil
}

// runCode forks the code as uid/gid 65534 with no capabilities, reaps every orphan the
// box produces, and returns when the code itself exits. Returning ends init, and the
// kernel then kills everything left in the PID namespace.
func runCode(s *initSpec, began time.Time) (initMsg, error) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	if err := closeOnExec(); err != nil {
		return initMsg{}, err
	}
	argv := append([]string{}, s.Argv...)
	if s.CodePath != "" {
		argv = append(argv, s.CodePath)
	}
	// In a container the host cannot read the box's cgroup once the code has ended
	// (the runtime removes it with the container): the CPU the whole box used while
	// the code ran is measured here, so that what the code left running in the
	// background counts too (wait4's account has only the code and what it waited for).
	var cpuBefore time.Duration
	boxCPU := false
	if s.Container {
		cpuBefore, boxCPU = cgroup.OwnCPU()
	}
	pid, err := startCode(s, argv)
	if s.ReportFD != 0 {
		unix.Close(s.ReportFD) // the code holds it now; EOF reaches the parent when the box ends
	}
	s.lap("fork-exec")
	setupMicros := time.Since(began).Microseconds()
	if err != nil {
		return initMsg{}, err
	}
	go func() {
		for sig := range sigs {
			_ = unix.Kill(pid, sig.(unix.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		wpid, err := unix.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return initMsg{}, os.NewSyscallError("wait4", err)
		}
		if wpid != pid {
			continue // an orphan re-parented to PID 1: reaped
		}
		s.lap("code")
		msg := exitMsg(ws, &ru)
		if cpuAfter, ok := cgroup.OwnCPU(); boxCPU && ok && cpuAfter >= cpuBefore {
			msg.CPUMicros = max(msg.CPUMicros, (cpuAfter - cpuBefore).Microseconds())
		}
		msg.SetupMicros = setupMicros
		msg.Laps = strings.Join(s.laps, " ")
		return msg, nil
	}
}

// exitMsg describes how the code ended.
func exitMsg(ws unix.WaitStatus, ru *unix.Rusage) initMsg {
	msg := initMsg{
		Kind:        "exit",
		CPUMicros:   ru.Utime.Sec*1e6 + ru.Utime.Usec + ru.Stime.Sec*1e6 + ru.Stime.Usec,
		MaxRSSBytes: ru.Maxrss * 1024,
	}
	switch {
	case ws.Exited():
		msg.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		msg.Signal = int(ws.Signal())
		msg.ExitCode = 128 + msg.Signal
	}
	return msg
}

// closeOnExec marks every fd but 0-2 close-on-exec: the code inherits only what
// startCode hands it.
func closeOnExec() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// No CLOSE_RANGE_CLOEXEC: kernels before 5.11, and gVisor (runsc) before
		// 2023. Mark each open fd instead.
		return cloexecEach()
	}
	if err != nil {
		return os.NewSyscallError("close_range", err)
	}
	return nil
}

// cloexecEach marks every fd listed in /proc/self/fd but 0-2 close-on-exec. Every fd
// this process opens from now on is close-on-exec already (Go opens them so).
func cloexecEach() error {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd < 3 {
			continue
		}
		// EBADF: the directory's own fd, closed above.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return os.NewSyscallError("fcntl(F_SETFD)", err)
		}
	}
	return nil
}

// startCode forks argv as the box's user, in a session and process group of its own,
// with stdin /dev/null (or the request pipe, RequestOnStdin), the box's stdout and
// stderr, the report pipe as fd 3 and the request pipe as fd 4 when there are ones.
// Preconditions: closeOnExec has run; must be called with the OS thread locked.
func startCode(s *initSpec, argv []string) (int, error) {
	devnull, err := os.Open("/dev/null")
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	stdin := devnull.Fd()
	if s.RequestOnStdin && s.RequestFD != 0 {
		stdin = uintptr(s.RequestFD)
	}
	report := devnull.Fd()
	if s.ReportFD != 0 {
		report = uintptr(s.ReportFD)
	}
	request := uintptr(0)
	if s.RequestFD != 0 && !s.RequestOnStdin {
		request = uintptr(s.RequestFD)
	}
	var pid int
	if s.Zygote {
		// The zygote: root of the box's user namespace, its control socket as fd 3.
		pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
			Dir:   "/",
			Env:   s.Env,
			Files: []uintptr{devnull.Fd(), 1, 2, uintptr(s.ZygoteFD)},
			Sys:   &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL},
		})
	} else if s.Rootless {
		pid, err = startStage2(stdin, report, request, execSpec{Argv: argv, Env: s.Env, Seccomp: s.Seccomp, Pids: s.Pids, AddressSpace: s.AddressSpace, Request: request != 0, Connect: s.connectPorts()})
	} else {
		files := []uintptr{stdin, 1, 2}
		if s.ReportFD != 0 || request != 0 {
			files = append(files, report) // the code's fd 3
		}
		if request != 0 {
			files = append(files, request) // the code's fd 4
		}
		attr := &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: boxUID, Gid: boxGID, Groups: []uint32{}},
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		}
		if !s.codeAsBoxUser() {
			attr.Credential = nil // init already is the box's user, with no privilege to change it
		}
		pid, err = syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
			Dir:   "/workspace",
			Env:   s.Env,
			Files: files,
			Sys:   attr,
		})
		if err == nil {
			err = setCodeRlimits(pid, s.Pids, s.AddressSpace) // rootless: the second stage set them before exec
		}
	}
	if err != nil {
		return pid, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return pid, nil
}

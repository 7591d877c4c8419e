package native

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/linux/seccomp"
)

// launchSpec is what a box is started with: init's spec (its Argv, Env, Code, CPUSecs
// and session fields; launch fills in the rest), the limits, the files to copy in, and
// which extra channels the code gets.
type launchSpec struct {
	init   initSpec
	limits box.Limits // with defaults applied
	files  []box.File
	report bool // a report pipe: the code's fd 3
	// request makes a request pipe for a session's interpreter: the parent writes,
	// the interpreter reads it as fd 4 (or as stdin, init.RequestOnStdin).
	request bool
	// egress, when set, serves the box's proxy and DNS sockets (egress_linux.go).
	egress box.Egress
}

// boxProc is a started box: init runs in its namespaces, waiting for the spec. The
// caller hands it over (handOver), reads its pipes, waits for cmd, and must call
// release once done.
type boxProc struct {
	cmd      *exec.Cmd
	cg       *cgroup.Box // nil without cgroups
	rootless bool
	// sock is the parent's end of the sync socket.
	sock *os.File
	// The parent's ends of the code's pipes; reportR and requestW only when asked for.
	stdoutR, stderrR, reportR, requestW *os.File
	// warnings are the protections weakened for this box.
	warnings []string
	// egress serves the box's way out, if it has one; release closes it.
	egress box.Egress

	is      *initSpec
	filterc <-chan filterResult
	exe     *os.File
}

// launch creates the box's cgroup and starts init in fresh namespaces. Nothing the
// caller controls runs yet: init waits for the spec (handOver).
func (b *Backend) launch(ls launchSpec, tr *phaseTrace) (_ *boxProc, err error) {
	rootless := os.Geteuid() != 0
	lim := ls.limits
	// The seccomp filter is assembled here, once per process and concurrently with
	// starting the box, so init only loads it.
	filterc := make(chan filterResult, 1)
	go func() { b, err := seccomp.Encoded(); filterc <- filterResult{b, err} }()
	bp := &boxProc{rootless: rootless, filterc: filterc}
	defer func() {
		if err != nil {
			bp.release(b.log(), tr)
		}
	}()

	cg, cgErr := cgroup.New(boxName(), cgroup.Limits{MemoryBytes: lim.Memory, Pids: lim.Pids + initReserve, CPUs: lim.CPUs})
	if cgErr != nil && !rootless && cgroup.Detect().Version != cgroup.None {
		// The host has cgroups and we are root: failing to use them is a broken
		// machine, not a reason to run the code with weaker limits.
		return nil, fmt.Errorf("create the box's cgroup: %w", cgErr)
	}
	if cgErr != nil {
		bp.warnings = append(bp.warnings, "cgroups unavailable ("+cgErr.Error()+"): memory is limited by RLIMIT_AS, processes by RLIMIT_NPROC, CPU time by RLIMIT_CPU only")
		b.log().Debug("cgroups unavailable, falling back to rlimits", "err", cgErr) // the result's warnings say it
	} else {
		bp.cg = cg
	}
	tr.mark("cgroup")

	exe, hostExe, err := openSelf()
	if err != nil {
		return nil, err
	}
	bp.exe = exe
	parentSock, childSock, err := socketpair()
	if err != nil {
		return nil, err
	}
	bp.sock = parentSock
	defer childSock.Close()
	var stdoutW, stderrW *os.File
	if bp.stdoutR, stdoutW, err = boxPipe(rootless); err != nil {
		return nil, err
	}
	defer stdoutW.Close()
	if bp.stderrR, stderrW, err = boxPipe(rootless); err != nil {
		return nil, err
	}
	defer stderrW.Close()

	is := ls.init
	is.TmpBytes, is.DiskBytes = lim.Tmp, lim.Disk
	is.Pids, is.OpenFiles = lim.Pids, lim.OpenFiles
	is.HostExe, is.Trace, is.Rootless = hostExe, traceEnabled, rootless
	if bp.cg == nil {
		is.AddressSpace = lim.Memory
	}
	extra := []*os.File{childSock, exe}
	for i, f := range ls.files {
		is.Files = append(is.Files, initFile{Dest: f.Dest, FD: fdFirstFile + i})
		extra = append(extra, f.Src)
	}
	// The init's ends of the extra pipes are closed once init holds them.
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	if ls.report {
		var w *os.File
		if bp.reportR, w, err = boxPipe(rootless); err != nil {
			return nil, err
		}
		childEnds = append(childEnds, w)
		is.ReportFD = fdSync + len(extra) // ExtraFiles[i] is fd 3+i in init
		extra = append(extra, w)
	}
	var egressSock *os.File
	if ls.egress != nil {
		parent, child, err := socketpair()
		if err != nil {
			return nil, err
		}
		egressSock, bp.egress = parent, ls.egress
		childEnds = append(childEnds, child)
		is.EgressFD = fdSync + len(extra)
		extra = append(extra, child)
	}
	if ls.request {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		bp.requestW = w
		childEnds = append(childEnds, r)
		is.RequestFD = fdSync + len(extra)
		extra = append(extra, r)
	}
	bp.is = &is

	cmd := &exec.Cmd{
		Path:        "/proc/self/fd/" + strconv.Itoa(fdExe),
		Args:        []string{"moat-init", InitRole},
		Env:         []string{},
		Stdout:      stdoutW,
		Stderr:      stderrW,
		ExtraFiles:  extra,
		SysProcAttr: initAttr(rootless),
	}
	if bp.cg != nil {
		if fd, ok := bp.cg.FD(); ok {
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = fd
		}
	}
	tr.mark("prepare")
	if err := cmd.Start(); err != nil {
		if egressSock != nil {
			egressSock.Close()
		}
		return nil, startError(err, rootless)
	}
	bp.cmd = cmd
	if egressSock != nil {
		go func() {
			if err := receiveEgress(egressSock, ls.egress); err != nil {
				b.log().Debug("box egress not served", "err", err) // init's own report says why
			}
		}()
	}
	tr.mark("start")
	return bp, nil
}

// handOver sends init its spec, moves init into the box's cgroup where that could not
// happen at clone time (v1), then lets it go. On failure the box is killed and the
// error says why; the caller still waits for it.
func (bp *boxProc) handOver() error {
	filter := <-bp.filterc
	bp.is.Seccomp = filter.prog
	err := filter.err
	if err == nil {
		// The spec goes first so init builds the root while it is moved into the
		// cgroup (v1); the go frame releases it once it is there.
		err = writeFrame(bp.sock, bp.is)
	}
	if err == nil && bp.cg != nil {
		if _, ok := bp.cg.FD(); !ok {
			err = bp.cg.AddProc(bp.cmd.Process.Pid)
		}
	}
	if err == nil {
		err = writeFrame(bp.sock, goFrame{Go: true})
	}
	bp.is.Code, bp.is.Seccomp = nil, nil // not needed any more
	if err != nil {
		bp.kill()
	}
	return err
}

// kill ends init, and with it the PID namespace and every process of the box.
func (bp *boxProc) kill() {
	if bp.cmd != nil && bp.cmd.Process != nil {
		_ = bp.cmd.Process.Signal(syscall.SIGKILL)
	}
	if bp.cg != nil {
		_ = bp.cg.Kill()
	}
}

// release closes the parent's ends and removes the cgroup. The caller has waited for
// init (or never started it).
func (bp *boxProc) release(log *slog.Logger, tr *phaseTrace) {
	for _, f := range []*os.File{bp.sock, bp.stdoutR, bp.stderrR, bp.reportR, bp.requestW, bp.exe} {
		if f != nil {
			f.Close()
		}
	}
	if bp.egress != nil {
		bp.egress.Close()
	}
	if bp.cg != nil {
		if err := bp.cg.Destroy(); err != nil {
			log.Error("destroy cgroup", "err", err)
		}
		tr.mark("destroy")
	}
}

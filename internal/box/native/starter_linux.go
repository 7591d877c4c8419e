package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// A box is its init: moat's own PID 1, which sets the box up, starts the code and
// serves a session's requests, talking to this process over the fds it is started
// with. The native backend starts init in fresh namespaces of this host (nsStarter).
// Another backend starts the same init elsewhere — in a container, say — through a
// Starter of its own, and then init runs in container mode (initSpec.Container): the
// runtime made the namespaces, the root and the limits, and init does the rest as it
// does in a native box (files, rlimits, Landlock, seccomp, the code, the session).

// FDDir says which way data flows on one of init's fds.
type FDDir int

const (
	// FDNone: nothing; init closes the fd at once (the binary's fd of a native box).
	FDNone FDDir = iota
	// FDIn: init reads (a file to copy in, a session's request pipe).
	FDIn
	// FDOut: init writes (the report pipe).
	FDOut
	// FDBoth: a stream socket both ways (the sync socket, egress).
	FDBoth
)

// FD is one of init's fds, from 3 on.
type FD struct {
	File *os.File // nil for FDNone
	Dir  FDDir
}

// StartRequest is what a Starter starts init with.
type StartRequest struct {
	// FDs are init's fds 3, 4, ... in order. The Starter must give init an fd of the
	// same number for each one that carries the same data (FDNone: any fd, or none).
	FDs []FD
	// Stdout and Stderr are init's fds 1 and 2, which the code writes.
	Stdout, Stderr *os.File
	// Limits bound the box; the Starter enforces memory, CPU and processes.
	Limits box.Limits
	// Language is the box's language (a key of box.Languages).
	Language string
}

// A Starter starts a box's init. Start returns once init runs; init then waits for
// its spec on the sync socket (FDs[0]). The Starter's boxes run init in container
// mode.
type Starter interface {
	Start(req *StartRequest) (Proc, error)
}

// ErrProcLost: a Starter lost track of its box (its runtime stopped answering), so
// nothing is known of how the box ended. Proc.Wait wraps it.
var ErrProcLost = errors.New("lost the box")

// Proc is a started init.
type Proc interface {
	// Wait returns once init (and with it the box's every process) is gone; an error
	// wrapping ErrProcLost when the Starter cannot tell how it ended.
	Wait() error
	// Kill ends the box at once; it is safe to call at any time, more than once.
	Kill()
	// LimitsMemory says whether the box's memory is bounded by the Starter (a
	// cgroup); if not, init bounds each process's address space instead.
	LimitsMemory() bool
	// Placed runs once init has its spec, before it is let go: a native box moves
	// init into its cgroup here where that could not happen at clone time.
	Placed() error
	// Usage reports the box's CPU time, peak memory and how many processes its memory
	// limit killed so far; ok is false when the Proc cannot tell.
	Usage() (u ProcUsage, ok bool)
	// Isolation lists the protections in force, given the Landlock ABI init enforced.
	Isolation(landlockABI int) []string
	// Warnings lists protections weaker than configured.
	Warnings() []string
	// Release frees what the box held, once it is gone (Wait returned).
	Release() error
}

// ProcUsage is what a box used. A zero CPU or PeakMemoryBytes means unknown: the
// result then has init's own account of the code (its rusage).
type ProcUsage struct {
	CPU             time.Duration
	PeakMemoryBytes int64
	OOMKills        int64
}

// nsStarter starts init in fresh namespaces of this host, in a cgroup of its own.
type nsStarter struct{ rootless bool }

// nsProc is a native box's init.
type nsProc struct {
	cmd      *os.Process
	wait     func() error
	cg       *cgroup.Box // nil without cgroups
	born     bool        // init was born in cg (startThread)
	rootless bool
	warnings []string
	exe      *os.File
}

func (st nsStarter) Start(req *StartRequest) (_ Proc, err error) {
	lim := req.Limits
	p := &nsProc{rootless: st.rootless}
	defer func() {
		if err != nil {
			_ = p.Release()
		}
	}()
	cg, cgErr := cgroup.New(BoxName(), cgroup.Limits{MemoryBytes: lim.Memory, Pids: lim.Pids + initReserve, CPUs: lim.CPUs})
	if cgErr != nil && !st.rootless && cgroup.Detect().Version != cgroup.None {
		// The host has cgroups and we are root: failing to use them is a broken
		// machine, not a reason to run the code with weaker limits.
		return nil, fmt.Errorf("create the box's cgroup: %w", cgErr)
	}
	if cgErr != nil {
		p.warnings = append(p.warnings, "cgroups unavailable ("+cgErr.Error()+"): memory is limited by RLIMIT_AS, processes by RLIMIT_NPROC, CPU time by RLIMIT_CPU only")
	} else {
		p.cg = cg
	}
	exe, err := openSelf()
	if err != nil {
		return nil, err
	}
	p.exe = exe
	extra := make([]*os.File, len(req.FDs))
	for i, fd := range req.FDs {
		extra[i] = fd.File
	}
	extra[fdExe-fdSync] = exe
	cmd := &exec.Cmd{
		Path:        "/proc/self/fd/" + strconv.Itoa(fdExe),
		Args:        []string{"moat-init", InitRole},
		Env:         []string{},
		Stdout:      req.Stdout,
		Stderr:      req.Stderr,
		ExtraFiles:  extra,
		SysProcAttr: initAttr(st.rootless),
	}
	owner := 0
	if !st.rootless {
		owner = nextOwner()
	}
	if p.born, err = startThread(cmd, p.cg, owner); err != nil {
		return nil, startError(err, st.rootless)
	}
	p.cmd, p.wait = cmd.Process, cmd.Wait
	return p, nil
}

// StartInCgroup starts cmd so that its process is born in the cgroup cg (nil: none),
// and says whether it was: on v2 with CLONE_INTO_CGROUP, on v1 from a thread that
// entered cg (cgroup.EnterThread). A process born outside (no cgroup, or a failed
// start) must be moved in with cg.AddProc before it runs untrusted code.
func StartInCgroup(cmd *exec.Cmd, cg *cgroup.Box) (born bool, err error) {
	return startThread(cmd, cg, 0)
}

// startThread is StartInCgroup with, when owner is not 0, effective uid owner while
// the child's user namespace is made (startAs). It starts cmd from a locked thread of
// its own (on v1 it would otherwise pay an RCU grace period, ~9 ms, in AddProc). The
// thread goes back to the Go runtime only once it is moat's own again (out of the
// cgroup, root); otherwise it ends with its goroutine.
func startThread(cmd *exec.Cmd, cg *cgroup.Box, owner int) (born bool, err error) {
	viaFD := false
	if cg != nil {
		if fd, ok := cg.FD(); ok {
			if cmd.SysProcAttr == nil {
				cmd.SysProcAttr = &syscall.SysProcAttr{}
			}
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = fd
			viaFD = true
		}
	}
	v1 := cg != nil && cg.Version() == cgroup.V1
	if !v1 && owner == 0 {
		err = cmd.Start()
		return viaFD && err == nil, err
	}
	type outcome struct {
		entered bool
		err     error
	}
	c := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		var o outcome
		clean := false
		o.entered, clean, o.err = startOnThread(cmd, cg, owner)
		if clean {
			runtime.UnlockOSThread()
		}
		c <- o
	}()
	o := <-c
	return (o.entered || viaFD) && o.err == nil, o.err
}

// startOnThread is startThread's work on its locked thread; clean says the thread is
// as it was.
func startOnThread(cmd *exec.Cmd, cg *cgroup.Box, owner int) (entered, clean bool, err error) {
	var leave func() error
	if cg != nil && cg.Version() == cgroup.V1 {
		if leave, err = cg.EnterThread(); err != nil {
			return false, false, fmt.Errorf("start %s in the box's cgroup: %w", cmd.Path, err)
		}
	}
	if owner != 0 {
		err, clean = startAs(cmd, owner)
	} else {
		err, clean = cmd.Start(), true
	}
	if leave != nil {
		if lerr := leave(); lerr != nil {
			if err == nil { // a process nobody would wait for: end it here
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			return false, false, errors.Join(err, fmt.Errorf("leave the box's cgroup: %w", lerr))
		}
	}
	return leave != nil && err == nil, clean, err
}

func (p *nsProc) Wait() error { return p.wait() }

func (p *nsProc) Kill() {
	if p.cmd != nil {
		_ = p.cmd.Signal(syscall.SIGKILL)
	}
	if p.cg != nil {
		_ = p.cg.Kill()
	}
}

func (p *nsProc) LimitsMemory() bool { return p.cg != nil }

func (p *nsProc) Placed() error {
	if p.cg == nil {
		return nil
	}
	if p.born {
		return nil
	}
	return p.cg.AddProc(p.cmd.Pid)
}

func (p *nsProc) Usage() (ProcUsage, bool) { return cgroupUsage(p.cg) }

// cgroupUsage is what a box's cgroup (nil: none) says the box used.
func cgroupUsage(cg *cgroup.Box) (ProcUsage, bool) {
	if cg == nil {
		return ProcUsage{}, false
	}
	st, err := cg.Stats()
	if err != nil {
		return ProcUsage{}, false
	}
	return ProcUsage{CPU: st.CPUUsage, PeakMemoryBytes: st.PeakMemoryBytes, OOMKills: st.OOMKills}, true
}

func (p *nsProc) Isolation(landlockABI int) []string {
	return isolationList(p.cg, landlockABI, p.rootless)
}

func (p *nsProc) Warnings() []string { return append([]string(nil), p.warnings...) }

func (p *nsProc) Release() error {
	if p.exe != nil {
		p.exe.Close()
	}
	if p.cg != nil {
		return p.cg.Destroy()
	}
	return nil
}

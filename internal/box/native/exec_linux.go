package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/childproc"
)

// ExecRole is argv[1] of the rootless second stage.
//
// # Why a second stage
//
// As root, init maps two ids (0 for itself, 65534 for the code) and forks the code with
// setuid(65534), which drops every capability. An unprivileged user may map only its own
// uid, once: init is uid 0 of the box's user namespace and nothing else exists. So in
// rootless mode init forks the code into a nested user namespace where 65534 maps to
// init's uid. That fork needs clone(CLONE_NEWUSER), which the seccomp filter forbids, so
// init cannot confine itself first; the second stage, already in the nested namespace,
// confines itself — no capabilities at all, no_new_privs, Landlock, seccomp — and only
// then executes the code. Init itself runs no untrusted code; the code cannot ptrace it
// (seccomp, and init is not dumpable) nor read its /proc entries.
const ExecRole = "__moat-exec"

// The second stage's fds besides stdio.
const (
	fdExecReport = 3 // the code's report channel (or /dev/null), kept across exec
	fdExecSpec   = 4 // read: one frame with the argv and env
	fdExecErr    = 5 // write: one error frame if confinement or exec fails; closed by exec
	// fdExecRequest, when open, is a session's request pipe: moved to fd 4 once the
	// spec is read, as the code's fd 4.
	fdExecRequest = 6
)

type execSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// Seccomp is the encoded filter stack, as in initSpec.
	Seccomp []byte `json:"seccomp"`
	// Pids and AddressSpace are the code's own RLIMIT_NPROC and RLIMIT_AS (0: unset),
	// set here right before exec, so no instruction of the code runs without them.
	Pids         int64 `json:"pids"`
	AddressSpace int64 `json:"address_space"`
	// Request says fd fdExecRequest is a session's request pipe, for the code's fd 4.
	Request bool `json:"request"`
	// Connect lists the loopback TCP ports the code may connect to (Landlock).
	Connect []uint16 `json:"connect"`
}

func stage2Files(stdin, report, spec, errw, request uintptr) []uintptr {
	files := []uintptr{stdin, 1, 2, report, spec, errw}
	if request != 0 {
		files = append(files, request)
	}
	return files
}

func init() { childproc.Add(ExecRole, runExec) }

// startStage2 forks the second stage into a nested user namespace (65534 inside = init's
// uid), hands it argv and env, and waits until it has exec'd the code or failed.
// report is the code's fd 3 (/dev/null without a report channel); request, when
// non-zero, becomes its fd 4.
func startStage2(stdin, report, request uintptr, es execSpec) (int, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer specR.Close()
	defer specW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer errR.Close()
	defer errW.Close()
	ids := []syscall.SysProcIDMap{{ContainerID: boxUID, HostID: 0, Size: 1}}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"moat-exec", ExecRole}, &syscall.ProcAttr{
		Dir:   "/workspace",
		Env:   []string{},
		Files: stage2Files(stdin, report, specR.Fd(), errW.Fd(), request),
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: ids,
			GidMappings: []syscall.SysProcIDMap{{ContainerID: boxGID, HostID: 0, Size: 1}},
			// The box's namespace already denies setgroups (an unprivileged parent made it).
			GidMappingsEnableSetgroups: false,
			Credential:                 &syscall.Credential{Uid: boxUID, Gid: boxGID, NoSetGroups: true},
			// CAP_SETPCAP of the nested namespace survives the exec (ambient) only so that
			// the second stage can empty its bounding set; confine then clears every set.
			AmbientCaps: []uintptr{unix.CAP_SETPCAP},
			Setsid:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("start second stage: %w", err)
	}
	specR.Close()
	errW.Close()
	if err := writeFrame(specW, es); err != nil {
		return pid, err
	}
	specW.Close()
	var m initMsg
	switch err := readFrame(errR, maxInitFrame, &m); {
	case errors.Is(err, io.EOF):
		return pid, nil // exec closed the error pipe: the code runs
	case err != nil:
		return pid, fmt.Errorf("second stage: %w", err)
	default:
		return pid, &stepError{step: m.Step, err: errors.New(m.Detail)}
	}
}

// runExec is the rootless second stage: uid 65534 of a nested user namespace, holding
// that namespace's capabilities until confine drops them all.
func runExec() int {
	runtime.LockOSThread()
	errPipe := os.NewFile(fdExecErr, "exec-err")
	fail := func(err error) int {
		msg := initMsg{Kind: "error", Step: StepExec, Detail: err.Error()}
		var se *stepError
		if errors.As(err, &se) {
			msg.Step, msg.Detail = se.step, se.err.Error()
		}
		_ = writeFrame(errPipe, msg)
		return 126
	}
	var es execSpec
	if err := readFrame(os.NewFile(fdExecSpec, "exec-spec"), maxSpecFrame, &es); err != nil {
		return fail(fmt.Errorf("read exec spec: %w", err))
	}
	unix.Close(fdExecSpec)
	if es.Request {
		if err := unix.Dup3(fdExecRequest, fdExecSpec, 0); err != nil {
			return fail(os.NewSyscallError("dup3", err))
		}
		unix.Close(fdExecRequest)
	}
	if len(es.Argv) == 0 {
		return fail(errors.New("empty argv"))
	}
	if _, err := confine(&initSpec{Seccomp: es.Seccomp}, true, es.Connect); err != nil {
		return fail(err)
	}
	first := uint(fdExecSpec) // the request pipe, when there is one, is fd 4 now: kept
	if es.Request {
		first++
	}
	if err := unix.CloseRange(first, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(os.NewSyscallError("close_range", err))
	}
	// execve's arguments are made before the rlimits: without cgroups RLIMIT_AS
	// bounds memory, and once it is set the Go heap may not grow (a span for them
	// made after it failed now and then: "fatal error: runtime: out of memory").
	path, err := syscall.BytePtrFromString(es.Argv[0])
	if err != nil {
		return fail(err)
	}
	argv, err := syscall.SlicePtrFromStrings(es.Argv)
	if err != nil {
		return fail(err)
	}
	envv, err := syscall.SlicePtrFromStrings(es.Env)
	if err != nil {
		return fail(err)
	}
	if err := setCodeRlimits(0, es.Pids, es.AddressSpace); err != nil {
		return fail(err)
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	return fail(os.NewSyscallError("execve", errno))
}

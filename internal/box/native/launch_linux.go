package native

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/linux/seccomp"
)

// launchSpec is what a box is started with: init's spec (its Argv, Env, Code, CPUSecs
// and session fields; launch fills in the rest), the limits, the files to copy in, and
// which extra channels the code gets.
type launchSpec struct {
	// language is the box's language (box.Languages), for Starters whose boxes
	// differ by language (a docker image per language).
	language string
	init     initSpec
	limits   box.Limits // with defaults applied
	files    []box.File
	report   bool // a report pipe: the code's fd 3
	// request makes a request pipe for a session's interpreter: the parent writes,
	// the interpreter reads it as fd 4 (or as stdin, init.RequestOnStdin).
	request bool
	// egress, when set, serves the box's proxy and DNS sockets (egress_linux.go).
	egress box.Egress
	// zygote makes the box a zygote's: a control socket, and init starts the
	// interpreter as the zygote (zygote_linux.go).
	zygote bool
}

// boxProc is a started box: init runs, waiting for the spec. The caller hands it over
// (handOver), reads its pipes, waits for proc, and must call release once done.
type boxProc struct {
	proc Proc
	// sock is the parent's end of the sync socket.
	sock *os.File
	// The parent's ends of the code's pipes; reportR and requestW only when asked for.
	stdoutR, stderrR, reportR, requestW *os.File
	// warnings are the protections weakened for this box.
	warnings []string
	// egress serves the box's way out, if it has one; release closes it.
	egress box.Egress
	// ctl is a zygote box's control socket (launchSpec.zygote); release closes it.
	ctl *os.File
	// zy, for a box forked from a zygote, does the hand-over (zygote_linux.go).
	zy *zygoteBox
	// ws, when set, is the box's /workspace held open by the server, which then serves
	// the session's file operations itself (agentfs_linux.go); release closes it. Nil
	// when the box's init serves them.
	ws *workspace

	is      *initSpec
	filterc <-chan filterResult
}

// launch makes init's fds and starts init (through the backend's Starter: in fresh
// namespaces of this host unless the backend has another). Nothing the caller
// controls runs yet: init waits for the spec (handOver).
func (b *Backend) launch(ls launchSpec, tr *phaseTrace) (_ *boxProc, err error) {
	st, contained := b.starter()
	rootless := os.Geteuid() != 0 && !contained
	lim := ls.limits
	// The seccomp filter is assembled here, once per process and concurrently with
	// starting the box, so init only loads it.
	filterc := make(chan filterResult, 1)
	go func() { b, err := seccomp.Encoded(); filterc <- filterResult{b, err} }()
	bp := &boxProc{filterc: filterc}
	defer func() {
		if err != nil {
			bp.release(b.log(), tr)
		}
	}()
	// A contained box's pipes end in this process (its Starter carries them across);
	// a native box's are the code's own.
	pipe := func() (*os.File, *os.File, error) { return boxPipe(rootless || contained) }

	parentSock, childSock, err := socketpair()
	if err != nil {
		return nil, err
	}
	bp.sock = parentSock
	defer childSock.Close()
	var stdoutW, stderrW *os.File
	if bp.stdoutR, stdoutW, err = pipe(); err != nil {
		return nil, err
	}
	defer stdoutW.Close()
	if bp.stderrR, stderrW, err = pipe(); err != nil {
		return nil, err
	}
	defer stderrW.Close()

	is := ls.init
	is.TmpBytes, is.DiskBytes = lim.Tmp, lim.Disk
	is.Pids, is.OpenFiles = lim.Pids, lim.OpenFiles
	is.Trace, is.Rootless, is.Container = traceEnabled, rootless, contained
	if rootless {
		// The box's namespaces are the user's own: without a share, the code could
		// take all of the user's inotify instances and queued signals.
		is.UserLimits, is.SigPending = userLimitShares(), uint64(sigPendingShare())
	}
	if !contained {
		if is.HostExe, err = selfPath(); err != nil {
			return nil, err
		}
	}
	// fdSync, then fdExe (the native Starter puts the binary there), then the rest.
	fds := []FD{{File: childSock, Dir: FDBoth}, {Dir: FDNone}}
	for _, f := range ls.files {
		is.Files = append(is.Files, initFile{Dest: f.Dest, FD: fdSync + len(fds)})
		fds = append(fds, FD{File: f.Src, Dir: FDIn})
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
		if bp.reportR, w, err = pipe(); err != nil {
			return nil, err
		}
		childEnds = append(childEnds, w)
		is.ReportFD = fdSync + len(fds)
		fds = append(fds, FD{File: w, Dir: FDOut})
	}
	if ls.request {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		bp.requestW = w
		childEnds = append(childEnds, r)
		is.RequestFD = fdSync + len(fds)
		fds = append(fds, FD{File: r, Dir: FDIn})
	}
	var egressSock *os.File
	if ls.egress != nil {
		if contained {
			return nil, fmt.Errorf("the docker and gvisor backends have no network egress yet: network must be none (the native backend enforces allowlists)")
		}
		parent, child, err := socketpair()
		if err != nil {
			return nil, err
		}
		egressSock, bp.egress = parent, ls.egress
		childEnds = append(childEnds, child)
		is.EgressFD = fdSync + len(fds)
		fds = append(fds, FD{File: child, Dir: FDBoth})
	}
	if ls.zygote {
		parent, child, err := seqpacketPair()
		if err != nil {
			return nil, err
		}
		bp.ctl = parent
		childEnds = append(childEnds, child)
		is.Zygote, is.ZygoteFD, is.Pids = true, fdSync+len(fds), 0
		fds = append(fds, FD{File: child, Dir: FDBoth})
	}
	bp.is = &is
	tr.mark("prepare")

	proc, err := st.Start(&StartRequest{FDs: fds, Stdout: stdoutW, Stderr: stderrW, Limits: lim, Language: ls.language})
	if err != nil {
		if egressSock != nil {
			egressSock.Close()
		}
		return nil, err
	}
	bp.proc = proc
	bp.warnings = proc.Warnings()
	if !proc.LimitsMemory() {
		bp.is.AddressSpace = lim.Memory // the fallback: RLIMIT_AS
	}
	tr.mark("start")
	if egressSock != nil {
		go func() {
			if err := receiveEgress(egressSock, ls.egress); err != nil {
				b.log().Debug("box egress not served", "err", err) // init's own report says why
			}
		}()
	}
	return bp, nil
}

// handOver sends init its spec, places init (into the box's cgroup, where that could
// not happen at start: v1), then lets it go. On failure the box is killed and the
// error says why; the caller still waits for it.
func (bp *boxProc) handOver() error {
	if bp.zy != nil {
		return bp.zy.handOver(bp)
	}
	filter := <-bp.filterc
	bp.is.Seccomp = filter.prog
	err := filter.err
	if err == nil {
		// The spec goes first so init builds the root while it is placed (v1); the
		// go frame releases it once it is there.
		err = writeFrame(bp.sock, bp.is)
	}
	if err == nil {
		err = bp.proc.Placed()
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

// kill ends init, and with it every process of the box.
func (bp *boxProc) kill() {
	if bp.proc != nil {
		bp.proc.Kill()
	}
}

// release closes the parent's ends and frees the box's resources (its cgroup, its
// container). The caller has waited for init (or never started it).
func (bp *boxProc) release(log *slog.Logger, tr *phaseTrace) {
	for _, f := range []*os.File{bp.sock, bp.stdoutR, bp.stderrR, bp.reportR, bp.requestW, bp.ctl} {
		if f != nil {
			f.Close()
		}
	}
	if bp.egress != nil {
		bp.egress.Close()
	}
	if bp.ws != nil {
		bp.ws.close()
	}
	if bp.proc != nil {
		if err := bp.proc.Release(); err != nil {
			log.Error("release box", "err", err)
		}
		tr.mark("destroy")
	}
}

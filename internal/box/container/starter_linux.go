package container

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box/native"
)

// Bounds of the host's calls to the daemon and of a box's end.
const (
	// startTimeout bounds creating, attaching and starting a container.
	startTimeout = time.Minute
	// killTimeout and removeTimeout bound Kill's and Release's calls.
	killTimeout   = 10 * time.Second
	removeTimeout = 30 * time.Second
	// streamGrace is how long the stream may outlive the container's exit, and
	// exitGrace how long the daemon may take to report the exit once the stream ended.
	streamGrace = 5 * time.Second
	exitGrace   = 5 * time.Second
	// flushGrace bounds writing what arrived into the parent's fds once the stream
	// ended (nobody reads a session's stdout between calls).
	flushGrace = 2 * time.Second
	// maxAgentLog bounds what the host logs of the agent's stderr.
	maxAgentLog  = 64 << 10
	maxAgentLine = 1 << 10
)

// Starter starts a box's init in a container that Runtime makes; the agent (MuxRole)
// is its PID 1 and carries init's fds over the container's stdin and stdout (mux.go).
// It implements native.Starter.
type Starter struct {
	Runtime Runtime
	// Log receives the agent's complaints and failures to clean up; nil is
	// slog.Default().
	Log *slog.Logger
}

func (s *Starter) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Close closes the Runtime when it is an io.Closer (docker's connection to its
// daemon). The backend must have no box left.
func (s *Starter) Close() error {
	if c, ok := s.Runtime.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Start implements native.Starter. It keeps duplicates of req's files (the caller
// closes them when Start returns) and closes them when the stream ends, so the
// parent's readers see EOF once the box is gone.
func (s *Starter) Start(req *native.StartRequest) (_ native.Proc, err error) {
	p := &proc{s: s, log: s.log(), done: make(chan struct{})}
	p.waitCtx, p.waitCancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			p.abandon()
		}
	}()
	plan, err := p.wire(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := s.Runtime.Start(ctx, req.Language, req.Limits)
	if err != nil {
		return nil, err
	}
	p.c = c
	p.log = s.log().With("container", c.ID())
	go p.logAgent(c.Stderr())
	p.fw = &frameWriter{w: c.Stdin()}
	if err := sendPlan(p.fw, plan); err != nil {
		return nil, fmt.Errorf("send the plan to the box: %w", err)
	}
	for _, ib := range p.inboxes {
		if ib != nil {
			go ib.run()
		}
	}
	for _, sd := range p.senders {
		go p.send(sd.ch, sd.f)
	}
	go p.supervise()
	return p, nil
}

// proc is a box's container, seen from the host.
type proc struct {
	s       *Starter
	log     *slog.Logger
	c       Container // nil until the runtime started it
	fw      *frameWriter
	cr      *credits
	inboxes [256]*inbox
	sendsOn [256]bool
	senders []sender
	files   []*os.File // the duplicates of req's files

	waitCtx    context.Context
	waitCancel context.CancelFunc
	closeOnce  sync.Once
	// stopped is set once the host kills the container or closes its stream on
	// purpose (Kill, Release): an end by SIGKILL is then moat's own doing.
	stopped atomic.Bool

	done    chan struct{} // closed once the container exited and the stream is done
	exit    Exit          // valid once done, if exited
	exited  bool
	waitErr error

	logMu     sync.Mutex
	lastAgent string // the agent's last complaint

	// The container's last CPU time and peak memory the runtime told (Usage): they
	// stand once the container is gone.
	usageMu  sync.Mutex
	lastCPU  time.Duration
	lastPeak int64
	hasUsage bool
}

type sender struct {
	ch uint8
	f  *os.File
}

// wire duplicates req's files and makes the plan, the inboxes (channels to the host)
// and the senders (channels to the container).
func (p *proc) wire(req *native.StartRequest) (*Plan, error) {
	keep := func(f *os.File) (*os.File, error) {
		d, err := dupFile(f)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, d)
		return d, nil
	}
	in := func(ch uint8, f *os.File, closeDst func(*os.File) error) error {
		d, err := keep(f)
		if err != nil {
			return err
		}
		p.inboxes[ch] = newInbox(ch, d, func() error { return closeDst(d) }, p.grant)
		return nil
	}
	closeFile := func(f *os.File) error { return f.Close() }
	if err := in(chanStdout, req.Stdout, closeFile); err != nil {
		return nil, err
	}
	if err := in(chanStderr, req.Stderr, closeFile); err != nil {
		return nil, err
	}
	plan := &Plan{FDs: make([]PlanFD, 0, len(req.FDs))}
	var chans []uint8
	for i, fd := range req.FDs {
		n := chanFirstFD + i
		if n > 255 {
			return nil, fmt.Errorf("box init has %d fds; a box container carries at most %d", len(req.FDs), maxPlanFDs)
		}
		ch := uint8(n)
		dir := dirName(fd.Dir)
		if fd.File == nil {
			dir = dirNone
		}
		plan.FDs = append(plan.FDs, PlanFD{FD: n, Dir: dir})
		if sends(dir, true) { // init writes
			closeDst := closeFile
			if dir == dirBoth {
				closeDst = shutdownWrite
			}
			if err := in(ch, fd.File, closeDst); err != nil {
				return nil, err
			}
		}
		if sends(dir, false) { // init reads
			var d *os.File
			if dir == dirBoth {
				d = p.inboxes[ch].dst.(*os.File) // one duplicate both ways
			} else {
				var err error
				if d, err = keep(fd.File); err != nil {
					return nil, err
				}
			}
			p.senders = append(p.senders, sender{ch: ch, f: d})
			p.sendsOn[ch] = true
			chans = append(chans, ch)
		}
	}
	p.cr = newCredits(chans, nil)
	return plan, nil
}

func dirName(d native.FDDir) string {
	switch d {
	case native.FDIn:
		return dirIn
	case native.FDOut:
		return dirOut
	case native.FDBoth:
		return dirBoth
	}
	return dirNone
}

// dupFile duplicates f's fd (close-on-exec) into a File of its own, non-blocking where
// the fd can be polled, so that closing it wakes a blocked read or write. f's mode is
// not touched through f (Fd would make it blocking).
func dupFile(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	nfd, derr := -1, error(nil)
	if err := sc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	if derr != nil {
		return nil, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", derr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}

// grant gives the agent back n bytes of ch's window (an inbox wrote them).
func (p *proc) grant(ch uint8, n int) {
	if err := p.fw.grant(ch, n); err != nil {
		p.log.Debug("box stream: grant", "err", err)
	}
}

// send carries one of init's "in" or "both" fds to the container until its end.
func (p *proc) send(ch uint8, f *os.File) {
	buf := make([]byte, muxChunk)
	for {
		n := p.cr.wait(ch)
		if n == 0 {
			return // the stream is done
		}
		k, err := f.Read(buf[:min(n, len(buf))])
		if k > 0 {
			p.cr.take(ch, k)
			if p.fw.send(ch, buf[:k]) != nil {
				return
			}
		}
		if err != nil {
			_ = p.fw.send(ch, nil)
			return
		}
	}
}

// receive reads the agent's frames until the stream ends: nil at a clean end, else
// why it broke.
func (p *proc) receive() error {
	fr := newFrameReader(p.c.Stdout())
	for {
		ch, data, err := fr.next()
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		case ch == chanControl:
			err = p.cr.applyGrants(data, func(c uint8) bool { return p.sendsOn[c] })
		case p.inboxes[ch] != nil:
			err = p.inboxes[ch].push(data)
			if err == nil && len(data) == 0 && p.channelsEnded() {
				p.release()
			}
		default:
			err = protocolErr("frame on channel %d, which takes nothing from the box", ch)
		}
		if err != nil {
			return err
		}
	}
}

// release answers the end of every channel from the box: init has exited and the
// agent has killed what was left, so the container's counters hold the box's whole
// usage. The agent keeps the container until this answer (at most releaseWait):
// without it the runtime may remove the container, and its cgroup, before the
// channels' ends even reach the host, and a one-shot box is asked for its usage only
// after that. Then the host ends channel 0, and the agent exits.
func (p *proc) release() {
	p.sampleUsage()
	if err := p.fw.send(chanControl, nil); err != nil {
		p.log.Debug("box stream: release", "err", err)
	}
}

type waitResult struct {
	exit Exit
	err  error
}

// supervise watches the container and its stream, and once both are done (or one is
// and the other does not follow within its grace) closes everything and done.
func (p *proc) supervise() {
	recvc := make(chan error, 1)
	go func() { recvc <- p.receive() }()
	exitc := make(chan waitResult, 1)
	go func() {
		ex, err := p.c.Wait(p.waitCtx)
		exitc <- waitResult{ex, err}
	}()
	var r waitResult
	var recvErr error
	select {
	case r = <-exitc:
		select {
		case recvErr = <-recvc:
		case <-time.After(streamGrace):
			p.closeStream()
			recvErr = <-recvc
		}
	case recvErr = <-recvc:
		if recvErr != nil && errors.Is(recvErr, errProtocol) {
			p.log.Warn("box stream broken: killing the box", "err", recvErr)
			p.Kill()
		}
		select {
		case r = <-exitc:
		case <-time.After(exitGrace):
			p.waitCancel()
			r = <-exitc
		}
	}
	agentEnded := p.channelsEnded()
	p.finish()
	p.exit, p.exited = r.exit, r.err == nil
	switch {
	case r.err != nil:
		p.waitErr = fmt.Errorf("%s backend: %w: lost the box's container: %w", p.s.Runtime.Name(), native.ErrProcLost, r.err)
	case recvErr != nil && !errors.Is(recvErr, io.ErrClosedPipe):
		p.waitErr = fmt.Errorf("%s backend: %w: the box's stream broke: %w", p.s.Runtime.Name(), native.ErrProcLost, recvErr)
	case r.exit.Code == ExitKilled && !r.exit.OOMKilled && !agentEnded && !p.stopped.Load() && !p.s.Runtime.AgentKillable():
		// The agent is the container's PID 1: nothing inside the container can
		// SIGKILL it (the host's kernel drops the signal; gVisor's does not, see
		// Runtime.AgentKillable), and when the code kills init
		// the agent still ends every channel before it exits. A SIGKILLed agent
		// with channels still open, not OOM-killed and not killed by moat, was
		// killed from outside: `docker kill` or `docker stop`, or a daemon that
		// stops (dockerd's shutdown stops every container: SIGTERM, which the
		// agent ignores, then SIGKILL after StopTimeout). Without this the box
		// would look as if the code had killed its own init.
		hint := ""
		if p.s.Runtime.Name() == "docker" {
			hint = " (docker kill or stop, or the Docker daemon stopping or restarting)"
		}
		p.waitErr = fmt.Errorf("%s backend: %w: the box's container was killed from outside moat%s", p.s.Runtime.Name(), native.ErrProcLost, hint)
	case r.exit.OOMKilled && r.exit.Code != 0:
		// The OOM killer took the agent or, under gVisor, the sandbox that runs
		// the whole box: a session then ends with this as its reason.
		p.waitErr = fmt.Errorf("the box's container was killed at its memory limit (OOM killer; container exited with status %d)", r.exit.Code)
	case r.exit.Code != 0:
		p.waitErr = fmt.Errorf("container exited with status %d%s", r.exit.Code, p.agentSaid())
	}
	close(p.done)
}

// channelsEnded reports whether the agent ended every channel it sends, as it does
// before a clean exit. Call it once receive has returned and before finish.
func (p *proc) channelsEnded() bool {
	for _, ib := range p.inboxes {
		if ib == nil {
			continue
		}
		ib.mu.Lock()
		eof := ib.eof
		ib.mu.Unlock()
		if !eof {
			return false
		}
	}
	return true
}

// finish ends the channels once the stream is done: what arrived is written into the
// parent's fds (within flushGrace), then every duplicate is closed.
func (p *proc) finish() {
	for _, ib := range p.inboxes {
		if ib != nil {
			ib.end()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushGrace)
	defer cancel()
	for _, ib := range p.inboxes {
		if ib == nil {
			continue
		}
		select {
		case <-ib.done:
		case <-ctx.Done():
			ib.stop()
		}
	}
	p.cr.close()
	for _, f := range p.files {
		f.Close() // wakes a blocked inbox write or sender read
	}
	for _, ib := range p.inboxes {
		if ib != nil {
			<-ib.done
		}
	}
	p.closeStream()
	p.waitCancel()
}

// closeStream closes the attach connection: the agent reads the end of its stdin and
// kills the box.
func (p *proc) closeStream() {
	p.closeOnce.Do(func() {
		if p.c != nil {
			p.c.CloseStream()
		}
	})
}

// abandon undoes a Start that failed part way.
func (p *proc) abandon() {
	p.closeStream()
	for _, f := range p.files {
		f.Close()
	}
	if p.cr != nil {
		p.cr.close()
	}
	p.waitCancel()
	if p.c != nil {
		p.remove()
	}
}

// logAgent logs what the agent writes to stderr (bounded) and keeps its last line for
// Wait's error.
func (p *proc) logAgent(r io.Reader) {
	sc := bufio.NewScanner(io.LimitReader(r, maxAgentLog))
	sc.Buffer(make([]byte, 0, 4096), maxAgentLine)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		p.log.Warn("box agent", "said", line)
		p.logMu.Lock()
		p.lastAgent = line
		p.logMu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

func (p *proc) agentSaid() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if p.lastAgent == "" {
		return ""
	}
	return " (" + p.lastAgent + ")"
}

// Wait implements native.Proc: it returns once the container exited and its stream is
// done, or the daemon lost it.
func (p *proc) Wait() error {
	<-p.done
	return p.waitErr
}

// Kill implements native.Proc. When the runtime cannot kill the container, the
// stream is closed: the agent then kills the box itself.
func (p *proc) Kill() {
	if p.c == nil {
		return
	}
	p.stopped.Store(true)
	select {
	case <-p.done:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	if err := p.c.Kill(ctx); err != nil {
		p.log.Warn("kill box container", "err", err)
		p.closeStream()
	}
}

// LimitsMemory implements native.Proc: the container's memory cgroup bounds the box.
func (p *proc) LimitsMemory() bool { return true }

// Placed implements native.Proc: the container is the box from the start.
func (p *proc) Placed() error { return nil }

// Usage implements native.Proc: the OOM kills the runtime saw so far (once the
// container exited, also its exit's), and the CPU time and peak memory of the whole
// container, the last ones the runtime told once it is gone (unknown when it never
// could: init's account of the code stands).
func (p *proc) Usage() (native.ProcUsage, bool) {
	u := native.ProcUsage{OOMKills: p.c.OOMKills()}
	p.sampleUsage()
	p.usageMu.Lock()
	if p.hasUsage {
		u.CPU, u.PeakMemoryBytes = p.lastCPU, p.lastPeak
	}
	p.usageMu.Unlock()
	select {
	case <-p.done:
		if p.exit.OOMKilled && u.OOMKills == 0 {
			u.OOMKills = 1
		}
	default:
	}
	return u, true
}

// sampleUsage keeps the container's CPU time and peak memory when the runtime can
// tell them now (both only grow: a sample that raced a later one changes nothing);
// the last ones kept stand once it cannot.
func (p *proc) sampleUsage() {
	cpu, peak, ok := p.c.Usage()
	if !ok {
		return
	}
	p.usageMu.Lock()
	p.lastCPU, p.lastPeak, p.hasUsage = max(p.lastCPU, cpu), max(p.lastPeak, peak), true
	p.usageMu.Unlock()
}

// Isolation implements native.Proc: the runtime's, and Landlock where init has it.
func (p *proc) Isolation(landlockABI int) []string {
	iso := p.s.Runtime.Isolation()
	if landlockABI > 0 {
		iso = append(iso, "landlock_abi_"+strconv.Itoa(landlockABI))
	}
	return iso
}

// Warnings implements native.Proc: the runtime's warnings on making the container (a
// limit the kernel cannot enforce, say).
func (p *proc) Warnings() []string {
	return p.c.Warnings()
}

// Release implements native.Proc: it removes the container. A failure is logged, not
// returned: the runtime's sweep removes what is left when moat next starts.
func (p *proc) Release() error {
	p.stopped.Store(true)
	p.closeStream()
	p.remove()
	return nil
}

func (p *proc) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	if err := p.c.Remove(ctx); err != nil {
		p.log.Error("remove box container", "err", err)
	}
}

package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// Bounds on a session's channels.
const (
	// maxReportLine bounds one line of the report channel (a display's PNG in base64);
	// longer lines are dropped.
	maxReportLine = 8 << 20
	// maxCallReport bounds what one call's report keeps.
	maxCallReport = box.MaxReportBytes
	// readyTimeout bounds the interpreter's start, up to its ready line.
	readyTimeout = 30 * time.Second
)

// StartSession implements box.SessionBackend.
func (b *Backend) StartSession(ctx context.Context, spec *box.SessionSpec) (box.Session, error) {
	lang, err := box.LookupLanguage(spec.Language)
	if err != nil {
		return nil, err
	}
	if err := box.CheckNetwork(spec.Network, spec.Egress); err != nil {
		return nil, err
	}
	argv, onStdin, err := box.SessionArgv(lang.Name)
	if len(spec.Interpreter) > 0 {
		argv, err = spec.Interpreter, nil
	}
	if err != nil {
		return nil, err
	}
	lim := spec.Limits.WithDefaults()
	if b.canZygote(spec, onStdin) {
		s, err := b.startFromZygote(ctx, spec, lang.Name, lim)
		if !errors.Is(err, errZygoteUnusable) {
			return s, err
		}
		b.log().Debug("session box made cold", "why", err)
	}
	tr := newPhaseTrace(time.Now())
	bp, err := b.launch(launchSpec{
		language: lang.Name,
		init: initSpec{
			Support: spec.Support,
			Argv:    argv,
			Env:     box.MergeEnv(spec.Env),
			// CPU time is bounded per call by the timeout and overall by the cgroup's
			// bandwidth; RLIMIT_CPU would end a long session.
			CPUSecs:        math.MaxUint64,
			Session:        true,
			RequestOnStdin: onStdin,
		},
		limits:  lim,
		report:  true,
		request: true,
		egress:  spec.Egress,
	}, tr)
	if err != nil {
		return nil, err
	}
	return b.beginSession(ctx, bp, lang.Name, lim)
}

// beginSession makes a session of a launched box and waits until its interpreter is
// ready; on failure the box is destroyed.
func (b *Backend) beginSession(ctx context.Context, bp *boxProc, lang string, lim box.Limits) (box.Session, error) {
	s := &session{
		b: b, bp: bp, lang: lang, lim: lim,
		replies: make(chan reply, 4),
		exitedc: make(chan agentMsg, 4),
		done:    make(chan struct{}),
		dead:    make(chan struct{}),
		ended:   make(chan struct{}),
		wakeR:   -1, wakeW: -1,
	}
	if err := s.begin(ctx); err != nil {
		s.destroy(err)
		<-s.done
		return nil, err
	}
	return s, nil
}

// session is a native box kept alive for calls. mu serialises operations; the event
// loop of a call runs on the caller's goroutine and reads the pipes itself (poll), so
// output written before the interpreter's "done" line is all read before the call
// returns.
type session struct {
	b    *Backend
	bp   *boxProc
	lang string
	lim  box.Limits

	mu         sync.Mutex // one operation at a time
	interpDead bool       // the interpreter ended; the next call starts a new one
	exited     *agentMsg  // how it ended (read from exitedc under mu)
	report     []byte     // a partial report line carried over
	isolation  []string
	warnings   []string

	// fds polled by calls (non-blocking; owned by bp's files) and the wake pipe.
	outFD, errFD, repFD int
	wakeR, wakeW        int

	replies chan reply    // answers from init, read by the socket reader
	exitedc chan agentMsg // news that the interpreter ended

	stateMu sync.Mutex
	pending bool // an operation waits for an answer
	gone    error
	dead    chan struct{} // closed when gone is set
	done    chan struct{} // closed once the box is released
	ended   chan struct{} // closed once the Proc's Wait returned (await)
}

// reply is one frame from init: a message or a data chunk.
type reply struct {
	msg     agentMsg
	data    []byte
	isChunk bool
}

// begin hands the spec over, waits until init has confined the box and started the
// interpreter, bootstraps it and waits for its ready line.
func (s *session) begin(ctx context.Context) error {
	go s.await()
	s.mu.Lock() // await releases the pipes under mu
	defer s.mu.Unlock()
	p := make([]int, 2)
	if err := unix.Pipe2(p, unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	s.stateMu.Lock()
	s.wakeR, s.wakeW = p[0], p[1]
	s.stateMu.Unlock()
	// The poll loop reads each pipe until EAGAIN, so each must be non-blocking, as
	// os.Pipe made them; os.File.Fd would put them in blocking mode.
	for _, p := range []struct {
		f  *os.File
		fd *int
	}{{s.bp.stdoutR, &s.outFD}, {s.bp.stderrR, &s.errFD}, {s.bp.reportR, &s.repFD}} {
		fd, err := nonblockingFD(p.f)
		if err != nil {
			return err
		}
		*p.fd = fd
	}
	if err := s.bp.handOver(); err != nil {
		return fmt.Errorf("hand the spec to box init: %w", err)
	}
	// Until the interpreter runs, init speaks as in a one-shot box: "confined", then
	// "started" (or an "error" frame).
	abi := 0
	for {
		var m struct {
			initMsg
			Kind string `json:"kind"`
		}
		if err := readFrame(s.bp.sock, maxInitFrame, &m); err != nil {
			return fmt.Errorf("box init ended during setup: %w", err)
		}
		if m.Kind == "confined" {
			abi = m.LandlockABI
			if traceEnabled && m.Laps != "" {
				s.b.log().Info("box setup", "laps", m.Laps)
			}
			continue
		}
		if m.Kind == "error" {
			return m.childError()
		}
		if m.Kind == "started" {
			break
		}
		return fmt.Errorf("box init said %q during setup", m.Kind)
	}
	s.isolation = s.bp.proc.Isolation(abi)
	s.warnings = append(s.bp.warnings, warnings(abi)...)
	go s.readSocket()
	return s.awaitReady(ctx)
}

// awaitReady bootstraps a freshly started interpreter and waits for its ready line,
// dropping what it printed meanwhile (a shell's notice that it has no job control).
func (s *session) awaitReady(ctx context.Context) error {
	if boot := box.SessionBootstrap(s.lang); boot != nil {
		if err := s.writeRequest(boot); err != nil {
			return fmt.Errorf("bootstrap the interpreter: %w", err)
		}
	}
	deadline := time.Now().Add(readyTimeout)
	errs := box.NewCapture(4<<10, nil) // the interpreter's complaint, if it fails
	for {
		if err := s.wait(ctx, deadline); err != nil {
			return err
		}
		s.readInto(s.outFD, io.Discard, nil)
		s.readInto(s.errFD, errs, nil)
		for _, line := range s.readReport() {
			if l, ok := box.ParseSessionLine(line); ok && l.Kind == "ready" {
				// What the interpreter printed before its ready line is in the pipes
				// by now, but may have come after the reads above: drop it too, or
				// the first call would get it.
				s.readInto(s.outFD, io.Discard, nil)
				s.readInto(s.errFD, io.Discard, nil)
				return nil
			}
		}
		s.takeExited()
		if s.exited != nil {
			return fmt.Errorf("the interpreter ended as it started (exit status %d): %s", s.exited.ExitCode, box.LastLine(errs.String(), 300))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the interpreter was not ready within %s", readyTimeout)
		}
	}
}

// wait polls the output pipes, the report and the wake pipe until one is readable or
// the deadline passes. It fails only when the session is gone or ctx ends.
func (s *session) wait(ctx context.Context, deadline time.Time) error {
	if err := s.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ms := int(time.Until(deadline).Milliseconds()) + 1
	ms = max(0, min(ms, 200)) // wake up now and then to see ctx and the session
	fds := []unix.PollFd{
		{Fd: int32(s.outFD), Events: unix.POLLIN},
		{Fd: int32(s.errFD), Events: unix.POLLIN},
		{Fd: int32(s.repFD), Events: unix.POLLIN},
		{Fd: int32(s.wakeR), Events: unix.POLLIN},
	}
	if _, err := unix.Poll(fds, ms); err != nil && !errors.Is(err, unix.EINTR) {
		return os.NewSyscallError("poll", err)
	}
	var b [64]byte
	for {
		if n, _ := unix.Read(s.wakeR, b[:]); n <= 0 {
			break
		}
	}
	return nil
}

// takeExited notes the interpreter's end, if init has told of it. Called under mu.
func (s *session) takeExited() {
	select {
	case m := <-s.exitedc:
		s.exited = &m
		s.interpDead = true
	default:
	}
}

// wake interrupts a call's poll.
func (s *session) wake() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.wakeW >= 0 {
		_, _ = unix.Write(s.wakeW, []byte{1})
	}
}

// readInto reads what fd holds now into w, counting bytes into *n.
func (s *session) readInto(fd int, w io.Writer, n *int64) {
	chunk := chunks.Get().(*[readChunk]byte)
	defer chunks.Put(chunk)
	buf := chunk[:]
	for {
		k, err := unix.Read(fd, buf)
		if k <= 0 || err != nil {
			return
		}
		_, _ = w.Write(buf[:k])
		if n != nil {
			*n += int64(k)
		}
	}
}

// readReport reads what the report pipe holds now and returns the complete lines.
func (s *session) readReport() [][]byte {
	chunk := chunks.Get().(*[readChunk]byte)
	defer chunks.Put(chunk)
	buf := chunk[:]
	for {
		k, err := unix.Read(s.repFD, buf)
		if k <= 0 || err != nil {
			break
		}
		s.report = append(s.report, buf[:k]...)
		if len(s.report) > maxReportLine && bytes.IndexByte(s.report, '\n') < 0 {
			s.report = s.report[:0] // an overlong line: dropped
		}
	}
	var lines [][]byte
	for {
		i := bytes.IndexByte(s.report, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(nil), s.report[:i]...)
		s.report = s.report[i+1:]
		if len(line) <= maxReportLine {
			lines = append(lines, line)
		}
	}
	if len(s.report) == 0 {
		s.report = nil
	}
	return lines
}

// writeRequest writes to the interpreter's request channel. The write can block while
// the interpreter is busy; a call's loop keeps reading meanwhile (writeAsync).
func (s *session) writeRequest(p []byte) error {
	_, err := s.bp.requestW.Write(p)
	return err
}

func (s *session) writeAsync(p []byte) <-chan error {
	c := make(chan error, 1)
	go func() { c <- s.writeRequest(p); s.wake() }()
	return c
}

// Exec implements box.Session.
func (s *session) Exec(ctx context.Context, call *box.Call) (*box.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Err(); err != nil {
		return nil, err
	}
	s.takeExited()
	if s.interpDead {
		if err := s.restart(ctx); err != nil {
			return nil, err
		}
	}
	timeout := call.Timeout
	if timeout <= 0 {
		timeout = s.lim.Timeout
	}
	start := time.Now()
	before := s.stats()
	outCap := box.NewCapture(s.lim.Output, call.Stdout)
	errCap := box.NewCapture(s.lim.Output, call.Stderr)
	outSink, errSink := filtered(call.Filter, outCap), filtered(call.Filter, errCap)
	var outN, errN int64
	var report []byte
	id := box.NewCallID()
	writeErr := s.writeAsync(box.EncodeCall(s.lang, id, call.Code))

	deadline := start.Add(timeout)
	var stopFor box.Status // why the call was stopped, if it was
	var graceEnd time.Time
	exit, finished, lost := 0, false, false
	interrupt := func(why box.Status) {
		stopFor = why
		s.signal(unix.SIGINT)
		if p := box.EncodeInterrupt(s.lang, id); p != nil {
			_ = s.writeAsync(p)
		}
		graceEnd = time.Now().Add(box.InterruptGrace)
	}
	for !finished {
		werr := s.wait(context.Background(), earliest(deadline, graceEnd))
		s.readInto(s.outFD, outSink, &outN)
		s.readInto(s.errFD, errSink, &errN)
		for _, line := range s.readReport() {
			if l, ok := box.ParseSessionLine(line); ok {
				if l.Kind == "done" && l.ID == id {
					exit, finished = l.Exit, true
				}
				continue
			}
			if len(report)+len(line) < maxCallReport {
				report = append(append(report, line...), '\n')
			}
		}
		if finished {
			// The output written before "done" reached the pipes before "done"
			// reached the report; the reads above may have run before both.
			s.readInto(s.outFD, outSink, &outN)
			s.readInto(s.errFD, errSink, &errN)
			break
		}
		s.takeExited()
		if s.exited != nil { // the interpreter ended: its output is all in the pipes
			s.readInto(s.outFD, outSink, &outN)
			s.readInto(s.errFD, errSink, &errN)
			exit, finished = s.exited.ExitCode, true
			break
		}
		if werr != nil { // the box is gone
			lost = true
			break
		}
		select {
		case err := <-writeErr:
			if err != nil && !s.interpDead {
				// The interpreter closed its request channel: it is ending; its
				// "exited" follows.
				s.b.log().Debug("session request write failed", "err", err)
			}
		default:
		}
		now := time.Now()
		switch {
		case stopFor == "" && (box.Flooded(outN, s.lim.Output) || box.Flooded(errN, s.lim.Output)):
			stopFor = box.StatusOutputLimit
			s.signal(unix.SIGKILL)
			graceEnd = now.Add(box.InterruptGrace)
		case stopFor == "" && ctx.Err() != nil && call.OneShot:
			stopFor = box.StatusKilled
			s.destroy(fmt.Errorf("%w: the request was cancelled", box.ErrSessionClosed))
			lost = true
		case stopFor == "" && ctx.Err() != nil:
			interrupt(box.StatusKilled)
		case stopFor == "" && !now.Before(deadline) && call.OneShot:
			stopFor = box.StatusTimeout
			s.destroy(fmt.Errorf("%w: killed after the timeout of %s", box.ErrSessionClosed, timeout))
			lost = true
		case stopFor == "" && !now.Before(deadline):
			interrupt(box.StatusTimeout)
		case stopFor != "" && !now.Before(graceEnd):
			s.destroy(fmt.Errorf("%w: the code did not stop within %s of being interrupted, so its box was destroyed", box.ErrSessionLost, box.InterruptGrace))
			lost = true
		}
		if lost {
			break
		}
	}
	_ = outSink.Close()
	_ = errSink.Close()
	res := &box.Result{
		Stdout: outCap.String(), Stderr: errCap.String(),
		Truncated:  outCap.Truncated() || errCap.Truncated(),
		DurationMS: time.Since(start).Milliseconds(),
		Timing:     box.Timing{Run: time.Since(start)},
		Isolation:  s.isolation,
		Warnings:   append([]string(nil), s.warnings...),
		Report:     report,
		ExitCode:   exit,
	}
	after := s.stats()
	// max: a box whose counters went with it (a container removed) reads as zero.
	res.Usage = box.Usage{CPUMS: max(after.cpu-before.cpu, 0).Milliseconds(), PeakMemoryBytes: after.peak}
	oom := after.oomKills > before.oomKills
	switch {
	case lost && stopFor == "":
		return nil, s.Err()
	case lost && call.OneShot && stopFor == box.StatusTimeout:
		res.Status, res.ExitCode = stopFor, -1
		res.Stderr += fmt.Sprintf("\n[moat: killed after the timeout of %s]\n", timeout)
	case lost && call.OneShot:
		res.Status, res.ExitCode = stopFor, -1
	case lost:
		res.Status, res.ExitCode = stopFor, -1
		res.Stderr += fmt.Sprintf("\n[moat: %s; the session's box was destroyed and its state is lost]\n", stopReason(stopFor, timeout))
	case stopFor == box.StatusOutputLimit:
		res.Status, res.ExitCode = stopFor, -1
		res.Stderr += fmt.Sprintf("\n[moat: the interpreter was killed for flooding output far past the cap of %d bytes]\n", s.lim.Output)
	case stopFor != "":
		res.Status, res.ExitCode = stopFor, -1
		res.Stderr += fmt.Sprintf("\n[moat: %s; the session lives on]\n", stopReason(stopFor, timeout))
	case s.interpDead && oom:
		res.Status = box.StatusMemoryLimit
		res.Stderr += fmt.Sprintf("\n[moat: killed at the memory limit of %d bytes]\n", s.lim.Memory)
	case s.interpDead && s.exited.Signal != 0:
		res.Status = box.StatusKilled
	case exit != 0:
		res.Status = box.StatusError
	default:
		res.Status = box.StatusOK
	}
	if s.interpDead && !lost && !call.OneShot {
		res.Warnings = append(res.Warnings, "the interpreter ended: the next call starts a fresh one (variables, imports and functions are gone; files are kept)")
	}
	res.Normalize()
	return res, nil
}

func stopReason(st box.Status, timeout time.Duration) string {
	if st == box.StatusTimeout {
		return "interrupted after the timeout of " + timeout.String()
	}
	return "interrupted: the request was cancelled"
}

func earliest(a, b time.Time) time.Time {
	if b.IsZero() || a.Before(b) {
		return a
	}
	return b
}

// restart starts a new interpreter after the last one ended.
func (s *session) restart(ctx context.Context) error {
	// What is left in the pipes belongs to the ended interpreter: dropped before the
	// new one starts, which may say it is ready before "started" reaches us (its ready
	// line, dropped with the rest, once left the call waiting for it in vain).
	s.readInto(s.outFD, io.Discard, nil)
	s.readInto(s.errFD, io.Discard, nil)
	s.readReport()
	s.report = nil
	if _, err := s.op(agentReq{Op: opStart}, "started"); err != nil {
		return err
	}
	if startedHook != nil {
		startedHook()
	}
	s.interpDead, s.exited = false, nil
	return s.awaitReady(ctx)
}

// startedHook, when a test sets it, runs as soon as a restarted interpreter is
// said to be started: a server that is slow to go on (TestSessionRestartReady).
var startedHook func()

// signal asks init to signal the interpreter's process group.
func (s *session) signal(sig unix.Signal) {
	if err := writeFrame(s.bp.sock, agentReq{Op: opSignal, Signal: int(sig)}); err != nil {
		s.b.log().Debug("session signal", "err", err)
	}
}

type usage struct {
	cpu      time.Duration
	peak     int64
	oomKills int64
}

func (s *session) stats() usage {
	u, ok := s.bp.proc.Usage()
	if !ok {
		return usage{}
	}
	return usage{cpu: u.CPU, peak: u.PeakMemoryBytes, oomKills: u.OOMKills}
}

// nonblockingFD returns f's descriptor, in non-blocking mode, without os.File.Fd's
// switch to blocking mode: f keeps owning it.
func nonblockingFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil && fl&unix.O_NONBLOCK == 0 {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK)
	}
	if err != nil {
		return -1, os.NewSyscallError("fcntl", err)
	}
	return fd, nil
}

// boxEndGrace is how long readSocket, once init's socket broke, waits for the Proc
// to report the box's end.
const boxEndGrace = time.Second

// readSocket reads init's frames for the session's life: answers go to the waiting
// operation, "exited" marks the interpreter dead. Anything unexpected ends the box.
func (s *session) readSocket() {
	for {
		var m agentMsg
		data, isChunk, err := readAny(s.bp.sock, maxAgentFrame, &m)
		if err != nil {
			// The socket breaks when the box ends. Let await tell first how it
			// ended: the Starter's account (a container killed from outside, or
			// lost with its daemon) says more than an EOF here. A no-op destroy
			// when await was first.
			select {
			case <-s.ended:
			case <-time.After(boxEndGrace):
			}
			s.destroy(fmt.Errorf("%w: the box's init stopped answering (%v)", box.ErrSessionLost, err))
			return
		}
		if !isChunk && m.Kind == "exited" {
			select {
			case s.exitedc <- m:
			default: // the interpreter cannot end more often than it is started
			}
			s.wake()
			continue
		}
		s.stateMu.Lock()
		pending := s.pending
		s.stateMu.Unlock()
		if !pending {
			s.destroy(fmt.Errorf("%w: the box's init sent an unexpected frame", box.ErrSessionLost))
			return
		}
		select {
		case s.replies <- reply{msg: m, data: data, isChunk: isChunk}:
		case <-s.dead:
			return
		}
	}
}

func (s *session) setPending(p bool) {
	s.stateMu.Lock()
	s.pending = p
	s.stateMu.Unlock()
}

// next returns init's next answer.
func (s *session) next() (reply, error) {
	select {
	case r := <-s.replies:
		return r, nil
	case <-s.dead:
		return reply{}, s.Err()
	}
}

// op sends one request and returns its answer, which must be of kind want or "fail".
// Called under mu.
func (s *session) op(req agentReq, want string) (agentMsg, error) {
	if err := s.Err(); err != nil {
		return agentMsg{}, err
	}
	s.setPending(true)
	defer s.setPending(false)
	if err := writeFrame(s.bp.sock, req); err != nil {
		return agentMsg{}, s.broken(err)
	}
	return s.answer(want, req.Path)
}

// answer reads the answer to the request in flight.
func (s *session) answer(want, path string) (agentMsg, error) {
	r, err := s.next()
	if err != nil {
		return agentMsg{}, err
	}
	switch {
	case r.isChunk:
		return agentMsg{}, s.broken(errors.New("a data chunk instead of an answer"))
	case r.msg.Kind == "fail":
		return agentMsg{}, failError(r.msg, path)
	case r.msg.Kind != want:
		return agentMsg{}, s.broken(fmt.Errorf("answer %q instead of %q", r.msg.Kind, want))
	}
	return r.msg, nil
}

// broken ends a session whose box no longer follows the protocol.
func (s *session) broken(err error) error {
	s.destroy(fmt.Errorf("%w: talking to the box's init failed (%v)", box.ErrSessionLost, err))
	return s.Err()
}

// failError turns init's "fail" answer about path into a box error with a message
// for the client (init's own text only where it adds something: sizes, the rare
// unclassified failure).
func failError(m agentMsg, path string) error {
	switch m.Code {
	case failNotFound:
		return fmt.Errorf("%w: no file %q in the workspace", box.ErrFileNotFound, path)
	case failBadPath:
		return fmt.Errorf("%w: %q leads outside the workspace (through \"..\", an absolute path or a symlink) or is not a path", box.ErrBadPath, path)
	case failNotRegular:
		return fmt.Errorf("%w: %q is a directory, device, pipe or socket", box.ErrNotRegular, path)
	case failTooLarge:
		return fmt.Errorf("%w: %s", box.ErrFileTooLarge, workspaceDetail(m.Error))
	case failNoSpace:
		return fmt.Errorf("%w: no room left for %q (the workspace's disk limit)", box.ErrWorkspaceFull, path)
	case failConflict:
		return fmt.Errorf("%w: %q is a directory in the way, or one that is not empty", box.ErrFileConflict, path)
	default:
		return fmt.Errorf("workspace operation on %q failed: %s", path, workspaceDetail(m.Error))
	}
}

// workspaceDetail keeps an error from inside the box short.
func workspaceDetail(s string) string {
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// PutFile implements box.Session.
func (s *session) PutFile(ctx context.Context, path string, r io.Reader, size int64) error {
	if _, err := cleanPath(path, false); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%w: negative size", box.ErrFileTooLarge)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Err(); err != nil {
		return err
	}
	up := &upload{ctx: ctx, r: r, size: size}
	if ws := s.bp.ws; ws != nil {
		return up.result(localError(ws.put(path, up, size), path))
	}
	s.setPending(true)
	defer s.setPending(false)
	if err := writeFrame(s.bp.sock, agentReq{Op: opPut, Path: path, Max: size}); err != nil {
		return s.broken(err)
	}
	// Stream exactly size bytes; if r ends early or fails, end the data early: init
	// then refuses the short upload and changes nothing.
	buf := make([]byte, maxChunk)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if err := writeChunk(s.bp.sock, buf[:n]); err != nil {
				return s.broken(err)
			}
		}
		if err != nil {
			break
		}
	}
	if err := writeChunk(s.bp.sock, nil); err != nil {
		return s.broken(err)
	}
	_, err := s.answer("ok", path)
	return up.result(err)
}

// upload reads what PutFile uploads from the caller's reader: at most size bytes, then
// io.EOF, also early once ctx is done; it counts what it read and keeps the reader's
// error.
type upload struct {
	ctx   context.Context
	r     io.Reader
	size  int64
	sent  int64
	short bool  // the data ended before size bytes
	err   error // the reader's error other than io.EOF
}

func (u *upload) Read(p []byte) (int, error) {
	if u.sent >= u.size {
		return 0, io.EOF
	}
	if u.ctx.Err() != nil {
		u.short = true
		return 0, io.EOF
	}
	n, err := u.r.Read(p[:min(int64(len(p)), u.size-u.sent)])
	u.sent += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		u.short = u.sent < u.size
	case err != nil:
		u.err = err
	}
	return n, err
}

// result is the upload's outcome given err, the writer's (init's or the server's):
// when the reader failed or ended early, that is why.
func (u *upload) result(err error) error {
	switch {
	case err != nil && u.err != nil:
		return fmt.Errorf("read the upload: %w", u.err)
	case err != nil && u.short:
		return fmt.Errorf("upload ended after %d of %d bytes", u.sent, u.size)
	}
	return err
}

// GetFile implements box.Session.
func (s *session) GetFile(ctx context.Context, path string, w io.Writer, max int64) (int64, error) {
	if _, err := cleanPath(path, false); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.bp.ws; ws != nil {
		if err := s.Err(); err != nil {
			return 0, err
		}
		f, size, err := ws.openFile(path, max)
		if err != nil {
			return 0, localError(err, path)
		}
		defer f.Close()
		n, werr := copyOut(w, f, max)
		return n, received(path, size, n, werr)
	}
	m, err := s.op(agentReq{Op: opGet, Path: path, Max: max}, "file")
	if err != nil {
		return 0, err
	}
	s.setPending(true)
	defer s.setPending(false)
	var n int64
	var werr error
	for {
		r, err := s.next()
		if err != nil {
			return n, err
		}
		if !r.isChunk {
			return n, s.broken(errors.New("an answer instead of a data chunk"))
		}
		if len(r.data) == 0 {
			break
		}
		n += int64(len(r.data))
		if n > max {
			return n, s.broken(fmt.Errorf("more than the %d bytes asked for", max))
		}
		if werr == nil {
			_, werr = w.Write(r.data)
		}
	}
	return n, received(path, m.Size, n, werr)
}

// received is the outcome of a download of path announced as size bytes, of which n
// came and went to the caller's writer (werr its error).
func received(path string, size, n int64, werr error) error {
	if werr != nil {
		return werr
	}
	if n != size {
		return fmt.Errorf("%s changed while it was read (%d bytes announced, %d sent)", path, size, n)
	}
	return nil
}

// ListFiles implements box.Session.
func (s *session) ListFiles(ctx context.Context, dir string) ([]box.FileInfo, error) {
	if _, err := cleanPath(dir, true); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		files []box.FileInfo
		cut   bool
	)
	if ws := s.bp.ws; ws != nil {
		if err := s.Err(); err != nil {
			return nil, err
		}
		var err error
		files, err = ws.list(dir)
		if cut = errors.Is(err, box.ErrListTruncated); err != nil && !cut {
			return nil, localError(err, dir)
		}
	} else {
		m, err := s.op(agentReq{Op: opList, Path: dir}, "list")
		if err != nil {
			return nil, err
		}
		files, cut = m.Files, m.Truncated
	}
	// The box's agent is held to the same bounds, but answers from inside the box.
	if len(files) > box.MaxListEntries {
		files, cut = files[:box.MaxListEntries], true
	}
	if files == nil {
		files = []box.FileInfo{}
	}
	if cut {
		return files, box.ErrListTruncated
	}
	return files, nil
}

// RemoveFile implements box.Session.
func (s *session) RemoveFile(ctx context.Context, path string) error {
	if _, err := cleanPath(path, false); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.bp.ws; ws != nil {
		if err := s.Err(); err != nil {
			return err
		}
		return localError(ws.remove(path), path)
	}
	_, err := s.op(agentReq{Op: opRemove, Path: path}, "ok")
	return err
}

// localError turns the error of a file operation the server served itself (the box's
// workspace) into the box error init's "fail" answer would have become: the same
// classification (failCode) and the same message (failError).
func localError(err error, path string) error {
	if err == nil {
		return nil
	}
	return failError(answer(agentMsg{}, err), path)
}

// Done implements box.Session.
func (s *session) Done() <-chan struct{} { return s.done }

// Err implements box.Session.
func (s *session) Err() error {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	return s.gone
}

// Isolation implements box.Session.
func (s *session) Isolation() []string { return append([]string(nil), s.isolation...) }

// Warnings implements box.Session.
func (s *session) Warnings() []string { return append([]string(nil), s.warnings...) }

// Close implements box.Session: it destroys the box and returns once it is gone.
func (s *session) Close() error {
	s.destroy(box.ErrSessionClosed)
	<-s.done
	return nil
}

// destroy kills the box (once) and records why; the first reason wins. The waiter
// started by begin releases everything once init is reaped, then closes done.
func (s *session) destroy(why error) {
	s.stateMu.Lock()
	first := s.gone == nil
	if first {
		s.gone = why
		close(s.dead)
	}
	s.stateMu.Unlock()
	if first {
		s.bp.kill()
		s.wake()
	}
}

// await reaps init, then releases the box under mu (no call is polling its pipes any
// more) and closes done.
func (s *session) await() {
	err := s.bp.proc.Wait()
	s.destroy(fmt.Errorf("%w: the box ended (%v)", box.ErrSessionLost, err))
	close(s.ended)
	s.mu.Lock()
	s.bp.release(s.b.log(), newPhaseTrace(time.Now()))
	s.stateMu.Lock()
	if s.wakeR >= 0 {
		unix.Close(s.wakeR)
		unix.Close(s.wakeW)
		s.wakeR, s.wakeW = -1, -1
	}
	s.stateMu.Unlock()
	s.mu.Unlock()
	close(s.done)
}

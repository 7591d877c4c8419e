package container

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/childproc"
)

func init() { childproc.Add(MuxRole, runMux) }

// Bounds of the agent.
const (
	// orderStall is how long data of another channel waits for stdout and stderr
	// to be taken by the host before it is sent anyway (see mux.go, Order).
	orderStall = 2 * time.Second
	// drainLimit bounds sending what init's fds still hold once init has exited.
	drainLimit = 10 * time.Second
	// releaseWait bounds how long the agent keeps the container, every channel
	// ended, for the host's release (proc.release).
	releaseWait = 2 * time.Second
)

// Exit statuses of the agent when init did not give one.
const (
	exitAgentFailed = 125 // the agent could not start init, or the stream broke
	exitHostGone    = 137 // the host closed the stream: everything was killed
)

// runMux is the agent, PID 1 of a box container, running as the box's user with no
// capabilities (under runsc: as the container's root with RootCaps only; see doc.go). It reads the plan from stdin, makes init's fds, starts init, and then
// carries the fds over the stream until init has exited and its fds are drained; it
// exits with init's exit status. It reaps every process of the container, and kills
// them all when init exits or when the host goes away. Its stdout is the stream and
// nothing else writes there; its complaints go to stderr, which the host logs.
func runMux() int {
	// Not dumpable: the code runs as the same user (under runc), and must not ptrace
	// the agent, read its memory or open its fds through /proc/1 (the other ends of
	// init's pipes). The kernel then makes /proc/1/* owned by root.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return agentFail(fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err))
	}
	// Signals from the code (same user) must not end the agent early: catch them.
	// Caught, not ignored: an ignored signal would stay ignored in init and the code.
	signal.Notify(make(chan os.Signal, 1), unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	fr := newFrameReader(os.Stdin)
	plan, err := readPlan(fr)
	if err != nil {
		return agentFail(err)
	}
	a, childFiles, err := newAgent(plan, &frameWriter{w: os.Stdout}, fr)
	if err != nil {
		return agentFail(err)
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"moat-init", native.InitRole},
		Env:        []string{},
		Stdout:     childFiles[0],
		Stderr:     childFiles[1],
		ExtraFiles: childFiles[2:],
	}
	err = cmd.Start()
	for _, f := range childFiles {
		f.Close()
	}
	if err != nil {
		return agentFail(fmt.Errorf("start init: %w", err))
	}
	go a.reap(cmd.Process.Pid)
	go a.demux()
	if err := a.pump(); err != nil {
		_ = unix.Kill(-1, unix.SIGKILL)
		if errors.Is(err, errHostGone) {
			return exitHostGone
		}
		return agentFail(err)
	}
	// Every channel has ended: the container lives on until the host has read its
	// usage and releases it (proc.release), or stops reading, or releaseWait passed.
	select {
	case <-a.released:
	case <-time.After(releaseWait):
	}
	return a.status
}

func agentFail(err error) int {
	fmt.Fprintf(os.Stderr, "moat-mux: %v\n", err)
	return exitAgentFailed
}

// outPort is a channel the agent sends: the read end of one of init's fds.
type outPort struct {
	ch    uint8
	fd    int // non-blocking
	stdio bool
	eof   bool
}

type agent struct {
	fw      *frameWriter
	fr      *frameReader
	cr      *credits
	ports   []*outPort // stdout and stderr first
	inboxes [256]*inbox
	sendsOn [256]bool
	wakeR   int
	wakeW   int
	// released is closed when the host ends channel 0 (it read the box's usage) or
	// the stream from the host ends.
	released    chan struct{}
	releaseOnce sync.Once

	mu         sync.Mutex
	failed     error
	initExited bool
	status     int // init's exit status, once initExited
	// stdioGranted is set when the host grants stdout or stderr credit: it is
	// taking output again.
	stdioGranted bool
}

// newAgent makes init's fds from the plan. childFiles are init's ends: stdout,
// stderr, then fd 3, 4, ...; the caller closes them once init is started.
func newAgent(plan *Plan, fw *frameWriter, fr *frameReader) (a *agent, childFiles []*os.File, err error) {
	a = &agent{fw: fw, fr: fr, wakeR: -1, wakeW: -1, released: make(chan struct{})}
	var ours []int
	defer func() {
		if err != nil {
			for _, f := range childFiles {
				f.Close()
			}
			for _, fd := range ours {
				unix.Close(fd)
			}
		}
	}()
	p := make([]int, 2)
	if err := unix.Pipe2(p, unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	a.wakeR, a.wakeW = p[0], p[1]
	// out makes a pipe init writes: init's end blocking, ours not.
	out := func(ch uint8) error {
		if err := unix.Pipe2(p, unix.O_CLOEXEC); err != nil {
			return os.NewSyscallError("pipe2", err)
		}
		ours = append(ours, p[0])
		childFiles = append(childFiles, os.NewFile(uintptr(p[1]), "init-out"))
		if err := unix.SetNonblock(p[0], true); err != nil {
			return os.NewSyscallError("fcntl", err)
		}
		a.ports = append(a.ports, &outPort{ch: ch, fd: p[0], stdio: ch < chanFirstFD})
		a.sendsOn[ch] = true
		return nil
	}
	if err := out(chanStdout); err != nil {
		return nil, nil, err
	}
	if err := out(chanStderr); err != nil {
		return nil, nil, err
	}
	for _, f := range plan.FDs {
		ch := uint8(f.FD)
		switch f.Dir {
		case dirNone:
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return nil, nil, err
			}
			childFiles = append(childFiles, null)
		case dirOut:
			if err := out(ch); err != nil {
				return nil, nil, err
			}
		case dirIn:
			if err := unix.Pipe2(p, unix.O_CLOEXEC); err != nil {
				return nil, nil, os.NewSyscallError("pipe2", err)
			}
			childFiles = append(childFiles, os.NewFile(uintptr(p[0]), "init-in"))
			if err := unix.SetNonblock(p[1], true); err != nil {
				unix.Close(p[1])
				return nil, nil, os.NewSyscallError("fcntl", err)
			}
			w := os.NewFile(uintptr(p[1]), "init-in") // pollable: a blocked write is woken by Close
			a.inboxes[ch] = newInbox(ch, w, w.Close, a.grant)
		case dirBoth:
			s, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return nil, nil, os.NewSyscallError("socketpair", err)
			}
			childFiles = append(childFiles, os.NewFile(uintptr(s[1]), "init-sock"))
			if err := unix.SetNonblock(s[0], true); err != nil {
				unix.Close(s[0])
				return nil, nil, os.NewSyscallError("fcntl", err)
			}
			// The pump reads s[0] itself; the inbox writes it through a pollable
			// File and half-closes it at the channel's end.
			sock := os.NewFile(uintptr(s[0]), "init-sock")
			a.inboxes[ch] = newInbox(ch, sock, func() error { return shutdownWrite(sock) }, a.grant)
			a.ports = append(a.ports, &outPort{ch: ch, fd: s[0]})
			a.sendsOn[ch] = true
		}
	}
	chans := make([]uint8, 0, len(a.ports))
	for _, port := range a.ports {
		chans = append(chans, port.ch)
	}
	a.cr = newCredits(chans, a.granted)
	for _, ib := range a.inboxes {
		if ib != nil {
			go ib.run()
		}
	}
	return a, childFiles, nil
}

// shutdownWrite half-closes a socket: the peer reads EOF, and may still answer.
func shutdownWrite(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil {
		return err
	}
	return os.NewSyscallError("shutdown", serr)
}

// grant gives the host back n bytes of ch's window (an inbox wrote them).
func (a *agent) grant(ch uint8, n int) {
	if err := a.fw.grant(ch, n); err != nil {
		a.fail(fmt.Errorf("write to the host: %w", err))
	}
}

// granted is called when the host granted credit on ch.
func (a *agent) granted(ch uint8) {
	if ch == chanStdout || ch == chanStderr {
		a.mu.Lock()
		a.stdioGranted = true
		a.mu.Unlock()
	}
	a.wake()
}

func (a *agent) wake() { _, _ = unix.Write(a.wakeW, []byte{1}) }

// fail records the first fatal error and wakes the pump, which then ends the box.
func (a *agent) fail(err error) {
	a.mu.Lock()
	if a.failed == nil {
		a.failed = err
	}
	a.mu.Unlock()
	a.wake()
}

func (a *agent) release() { a.releaseOnce.Do(func() { close(a.released) }) }

// demux reads the host's frames: credit grants, data for init's "in" and "both"
// fds, and the release. Any violation, or the end of the stream, is fatal.
func (a *agent) demux() {
	defer a.release()
	for {
		ch, data, err := a.fr.next()
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			a.fail(errHostGone)
			return
		case err != nil:
			a.fail(fmt.Errorf("read from the host: %w", err))
			return
		case ch == chanControl && len(data) == 0:
			a.release()
		case ch == chanControl:
			err = a.cr.applyGrants(data, func(c uint8) bool { return a.sendsOn[c] })
		case a.inboxes[ch] != nil:
			err = a.inboxes[ch].push(data)
		default:
			err = protocolErr("frame on channel %d, which takes nothing from the host", ch)
		}
		if err != nil {
			a.fail(err)
			return
		}
	}
}

// reap is the container's PID 1 duty: it reaps every process that ends, init's
// children re-parented to the agent included. When init ends it notes init's status
// and kills every other process of the container (kill(-1) from PID 1 spares only
// the caller), so that nothing the code left behind keeps init's fds open.
func (a *agent) reap(initPID int) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing left to reap until something new is born
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if pid != initPID {
			continue
		}
		status := ws.ExitStatus()
		if ws.Signaled() {
			status = 128 + int(ws.Signal())
		}
		_ = unix.Kill(-1, unix.SIGKILL)
		a.mu.Lock()
		a.initExited, a.status = true, status
		a.mu.Unlock()
		a.wake()
	}
}

// pending is data of a channel other than stdout and stderr, read and waiting for
// those two to be taken by the host (mux.go, Order). Empty data is the channel's end.
type pending struct {
	port  *outPort
	data  []byte
	since time.Time
}

// pump sends init's output until init has exited and every out channel has ended
// (nil), or a failure. It is the only reader of the out channels, so it sees in
// which order data arrived.
func (a *agent) pump() error {
	buf := make([]byte, muxChunk)
	var held *pending
	var drainBy time.Time
	orderBroken := false // gave up waiting for stdout and stderr; until the host takes them again
	for {
		a.mu.Lock()
		failed, exited := a.failed, a.initExited
		if a.stdioGranted {
			a.stdioGranted, orderBroken = false, false
		}
		a.mu.Unlock()
		if failed != nil {
			return failed
		}
		if exited && drainBy.IsZero() {
			drainBy = time.Now().Add(drainLimit)
		}
		if held != nil {
			ready, err := a.flushStdio(buf)
			if err != nil {
				return err
			}
			if !ready && !orderBroken && time.Since(held.since) >= orderStall {
				orderBroken = true
			}
			if ready || orderBroken {
				if err := a.sendPort(held.port, held.data); err != nil {
					return err
				}
				held = nil
			}
		}
		if exited && held == nil && a.allEnded() {
			return nil
		}
		if exited && time.Now().After(drainBy) {
			return fmt.Errorf("init's output did not drain within %s of its exit", drainLimit)
		}

		fds := []unix.PollFd{{Fd: int32(a.wakeR), Events: unix.POLLIN}}
		var polled []*outPort
		for _, p := range a.ports {
			if p.eof || a.cr.get(p.ch) == 0 || (!p.stdio && held != nil) {
				continue
			}
			fds = append(fds, unix.PollFd{Fd: int32(p.fd), Events: unix.POLLIN})
			polled = append(polled, p)
		}
		timeout := -1
		if held != nil && !orderBroken {
			timeout = max(1, int(time.Until(held.since.Add(orderStall)).Milliseconds())+1)
		}
		if exited {
			t := max(1, int(time.Until(drainBy).Milliseconds())+1)
			if timeout < 0 || t < timeout {
				timeout = t
			}
		}
		if _, err := unix.Poll(fds, timeout); err != nil && !errors.Is(err, unix.EINTR) {
			return os.NewSyscallError("poll", err)
		}
		var b [64]byte
		for {
			if n, _ := unix.Read(a.wakeR, b[:]); n <= 0 {
				break
			}
		}
		for i, p := range polled {
			if fds[i+1].Revents == 0 {
				continue
			}
			if p.stdio {
				if _, err := a.readSend(p, buf); err != nil {
					return err
				}
				continue
			}
			if held != nil {
				continue // one held at a time: channels after stdio keep their order too
			}
			room := min(len(buf), a.cr.get(p.ch))
			if room == 0 {
				continue
			}
			n, err := unix.Read(p.fd, buf[:room])
			switch {
			case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			case n > 0:
				a.cr.take(p.ch, n)
				held = &pending{port: p, data: append([]byte(nil), buf[:n]...), since: time.Now()}
			default: // the end, or an error that ends it
				held = &pending{port: p, since: time.Now()}
			}
		}
	}
}

// flushStdio sends what stdout and stderr hold now, as far as their windows allow.
// ready means both are empty and all their data was taken by the host.
func (a *agent) flushStdio(buf []byte) (ready bool, err error) {
	ready = true
	for _, p := range a.ports {
		if !p.stdio || p.eof {
			continue
		}
		if a.cr.get(p.ch) < muxWindow {
			ready = false // the host has not written all of it yet
			continue
		}
		n, err := a.readSend(p, buf)
		if err != nil {
			return false, err
		}
		if n > 0 {
			ready = false
		}
	}
	return ready, nil
}

// readSend reads what p holds now (within its window) and sends it, or its end.
func (a *agent) readSend(p *outPort, buf []byte) (int, error) {
	room := min(len(buf), a.cr.get(p.ch))
	if room == 0 {
		return 0, nil // a read of 0 bytes would look like the end
	}
	n, err := unix.Read(p.fd, buf[:room])
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		return 0, nil
	case n > 0:
		a.cr.take(p.ch, n)
		return n, a.sendPort(p, buf[:n])
	default:
		return 0, a.sendPort(p, nil)
	}
}

// sendPort sends data of p, or its end (empty data).
func (a *agent) sendPort(p *outPort, data []byte) error {
	if len(data) == 0 {
		p.eof = true
	}
	if err := a.fw.send(p.ch, data); err != nil {
		return fmt.Errorf("write to the host: %w", err)
	}
	return nil
}

func (a *agent) allEnded() bool {
	for _, p := range a.ports {
		if !p.eof {
			return false
		}
	}
	return true
}

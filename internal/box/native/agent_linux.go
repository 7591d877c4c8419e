package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// serveSession is init's life in a session box, once the box is confined: it starts the
// interpreter, then serves the parent's requests (agentReq) on the sync socket until the
// parent closes it, and tells the parent each time the interpreter ends. Returning
// ends init, and with it the box.
//
// Every request is served here, inside the box, after pivot_root: a path in a request
// is resolved below /workspace by the kernel (openat2 RESOLVE_BENEATH, see
// agentfs_linux.go), never on the host. The interpreter and everything it starts run
// as the box's user; init serves nothing to them (the sync socket is close-on-exec).
// Preconditions: must be called with the OS thread locked (the thread Landlock
// confined, as root).
func serveSession(s *initSpec, sock *os.File) int {
	if err := closeOnExec(); err != nil {
		_ = writeFrame(sock, initMsg{Kind: "error", Step: StepExec, Detail: err.Error()})
		return 1
	}
	a := &agent{s: s, sock: sock, ws: &workspace{dir: -1, path: box.WorkspaceDir, uid: boxUID, gid: boxGID}}
	if s.Rootless {
		a.ws.uid, a.ws.gid = -1, -1 // 65534 is not mapped; files stay init's (rootfs_linux.go)
	}
	a.reaped = sync.NewCond(&a.mu)
	go a.reap()
	if err := a.start(); err != nil {
		_ = a.send(initMsg{Kind: "error", Step: StepExec, Detail: err.Error()})
		return 1
	}
	if err := a.send(agentMsg{Kind: "started"}); err != nil {
		return 1
	}
	for {
		var req agentReq
		if err := readFrame(sock, maxAgentFrame, &req); err != nil {
			return 0 // the parent is gone or broke the protocol: end the box
		}
		if err := a.serve(&req); err != nil {
			return 1
		}
	}
}

// agent is the state of a session's init.
type agent struct {
	s    *initSpec
	sock *os.File
	ws   *workspace // /workspace, opened for each file operation
	wmu  sync.Mutex // one writer on the socket at a time: answers and "exited"

	mu      sync.Mutex
	pid     int  // the interpreter; 0 when it is not running
	started bool // an interpreter was started before
	reaped  *sync.Cond
}

// send writes one frame to the parent.
func (a *agent) send(v any) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return writeFrame(a.sock, v)
}

// start forks the interpreter. The pid is recorded before the reaper can look at it.
func (a *agent) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pid != 0 {
		return nil
	}
	if a.started {
		drainRequests(a.s.RequestFD)
	}
	a.started = true
	pid, err := startCode(a.s, a.s.Argv)
	if err != nil {
		return err
	}
	a.pid = pid
	// The reaper may be waiting for a child to exist (it found none before this
	// start, the first one included): wake it, or the interpreter's end goes
	// unreported and its call waits for its timeout.
	a.reaped.Broadcast()
	return nil
}

// reap waits for every process re-parented to init; when the interpreter ends it tells
// the parent.
func (a *agent) reap() {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		wpid, err := unix.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			a.mu.Lock()
			for a.pid == 0 { // nothing to wait for until the next start
				a.reaped.Wait()
			}
			a.mu.Unlock()
			continue
		}
		if err != nil {
			return
		}
		a.mu.Lock()
		mine := wpid == a.pid
		if mine {
			a.pid = 0
		}
		a.mu.Unlock()
		if mine {
			m := exitMsg(ws, &ru)
			_ = a.send(agentMsg{Kind: "exited", ExitCode: m.ExitCode, Signal: m.Signal})
		}
	}
}

// serve answers one request. Only a broken socket is an error; a failed operation is
// an answer.
func (a *agent) serve(req *agentReq) error {
	switch req.Op {
	case opStart:
		if err := a.start(); err != nil {
			return a.send(agentMsg{Kind: "fail", Code: failOther, Error: err.Error()})
		}
		return a.send(agentMsg{Kind: "started"})
	case opSignal:
		// Signal the interpreter's process group: it is a session leader, and what it
		// starts in the foreground shares its group (SIGINT reaches a running command
		// of the shell as it would from a terminal).
		a.mu.Lock()
		pid := a.pid
		a.mu.Unlock()
		sig := syscall.Signal(req.Signal)
		if pid != 0 && (sig == unix.SIGINT || sig == unix.SIGKILL) {
			_ = unix.Kill(-pid, sig)
		}
		return nil
	case opPut:
		cr := &chunkReader{r: a.sock, max: req.Max}
		err := a.ws.put(req.Path, cr, req.Max)
		// put stops at its first error: read the rest so the stream stays in step.
		if derr := cr.drain(); derr != nil {
			return derr
		}
		return a.send(answer(agentMsg{Kind: "ok"}, err))
	case opGet:
		return a.getFile(req.Path, req.Max)
	case opList:
		files, err := a.ws.list(req.Path)
		cut := errors.Is(err, box.ErrListTruncated)
		if cut {
			err = nil
		}
		return a.send(answer(agentMsg{Kind: "list", Files: files, Truncated: cut}, err))
	case opRemove:
		return a.send(answer(agentMsg{Kind: "ok"}, a.ws.remove(req.Path)))
	default:
		return a.send(agentMsg{Kind: "fail", Code: failOther, Error: fmt.Sprintf("unknown operation %q", req.Op)})
	}
}

// answer turns an operation's error into a "fail" answer, or returns ok.
func answer(ok agentMsg, err error) agentMsg {
	if err == nil {
		return ok
	}
	return agentMsg{Kind: "fail", Code: failCode(err), Error: err.Error()}
}

// protocolError is a broken data stream from the parent: the box ends.
type protocolError struct{ err error }

func (e *protocolError) Error() string { return "protocol: " + e.err.Error() }
func (e *protocolError) Unwrap() error { return e.err }

// getFile answers "file" with the size of p and sends its content as data chunks, or
// answers "fail". Only a broken socket is an error.
func (a *agent) getFile(p string, max int64) error {
	f, size, err := a.ws.openFile(p, max)
	if err != nil {
		return a.send(answer(agentMsg{}, err))
	}
	defer f.Close()
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if err := writeFrame(a.sock, agentMsg{Kind: "file", Size: size}); err != nil {
		return err
	}
	if _, err := copyOut(chunkWriter{a.sock}, f, max); err != nil {
		return err
	}
	return writeChunk(a.sock, nil)
}

// chunkWriter writes what it is given as data chunks.
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += maxChunk {
		if err := writeChunk(c.w, p[off:min(off+maxChunk, len(p))]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// chunkReader reads the data chunks of an upload from the parent: their bytes, then
// io.EOF at the empty chunk. More than max bytes in all, or anything but a chunk, is a
// *protocolError, and so is every read after it.
type chunkReader struct {
	r     io.Reader
	max   int64
	total int64
	rest  []byte // what the last chunk holds that was not read yet
	err   error  // io.EOF once the data ended, or a *protocolError
}

// next reads the next chunk into rest, or sets err.
func (c *chunkReader) next() {
	var none struct{}
	data, isChunk, err := readAny(c.r, 0, &none)
	switch {
	case err != nil:
		c.err = &protocolError{err}
	case !isChunk:
		c.err = &protocolError{errors.New("expected a data chunk")}
	case len(data) == 0:
		c.err = io.EOF
	case c.total+int64(len(data)) > c.max:
		c.err = &protocolError{fmt.Errorf("more data than the %d bytes announced", c.max)}
	default:
		c.total += int64(len(data))
		c.rest = data
	}
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.rest) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		c.next()
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

// WriteTo writes each chunk to w as it comes, in one write (io.Copy uses it). On w's
// error it stops, leaving the rest of the data unread.
func (c *chunkReader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		for len(c.rest) == 0 {
			if errors.Is(c.err, io.EOF) {
				return n, nil
			}
			if c.err != nil {
				return n, c.err
			}
			c.next()
		}
		m, err := w.Write(c.rest)
		n += int64(m)
		c.rest = c.rest[m:]
		if err != nil {
			return n, err
		}
	}
}

// drain reads and drops what is left of the data, so that the stream stays in step.
// Its error is a *protocolError: the stream from the parent is broken.
func (c *chunkReader) drain() error {
	c.rest = nil
	_, err := c.WriteTo(io.Discard)
	return err
}

// drainRequests drops what an ended interpreter left unread in the request pipe (a
// call sent as it died), so that its successor does not run it.
func drainRequests(fd int) {
	if fd == 0 || unix.SetNonblock(fd, true) != nil {
		return
	}
	defer unix.SetNonblock(fd, false) //nolint:errcheck // as it was
	buf := make([]byte, 64<<10)
	for {
		if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
			return
		}
	}
}

package container

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The stream mux carries a box init's fds over the one byte stream a container has
// with moat: its attached stdin (host to container) and stdout (container to host).
// The host end is the Starter (starter_linux.go), the container end the agent
// (agent_linux.go); both use what this file defines.
//
// # Frames
//
//	+---------+-------------------+-----------------+
//	| channel | length (uint32 BE)| data (length)   |
//	| 1 byte  | 4 bytes           | <= MaxFrameData |
//	+---------+-------------------+-----------------+
//
// Length 0 is the end of the channel in that direction: the receiver closes the fd's
// write end (shutdown(SHUT_WR) for a socket). A longer frame, or one that does not
// fit the channel's direction or window, is a protocol error: it ends the box, never
// the host process.
//
// # Channels
//
//	0      control: the host's first frame is the plan (JSON, at most maxPlanBytes);
//	       after it, each side sends credit grants (see below). The host ends
//	       channel 0 once every channel from the container has ended: the release,
//	       after which the agent exits (until then it keeps the container, and with
//	       it the counters of its usage, at most releaseWait)
//	1, 2   init's stdout and stderr (container to host)
//	N >= 3 init's fd N: host to container for "in" and "both",
//	       container to host for "out" and "both"
//
// # Credit
//
// Each direction of each data channel has a window of muxWindow bytes: the sender
// may have at most that many bytes sent but not yet written to the receiver's fd.
// The receiver queues a channel's data and writes it from a goroutine of its own;
// once a chunk is written it grants the bytes back on channel 0, as entries of five
// bytes: [channel][bytes uint32 BE]. So a destination nobody reads (a session's stdout
// between calls, a file pipe init has not reached yet) holds up its own channel only,
// and a receiver never buffers more than a window per channel.
//
// # Order
//
// The native box promises its parent that what the code wrote to stdout or stderr
// before it wrote to another fd (the report, or init's sync socket) is in the stdout
// pipe when the other fd's data is read. The agent keeps that promise: before it
// sends data of another channel it sends what stdout and stderr hold and waits until
// the host granted all of it back, that is until the host wrote it into the parent's
// pipes. If stdout stays full (nobody reads it: code printing between a session's
// calls), the wait gives up after orderStall rather than hold up the session.

// Sizes and bounds of the stream.
const (
	// MaxFrameData bounds the data of one frame.
	MaxFrameData = 256 << 10
	frameHeader  = 5
	// muxWindow is each channel's window in each direction.
	muxWindow = 256 << 10
	// muxChunk is how much a sender reads from an fd at once.
	muxChunk = 64 << 10
	// maxPlanBytes bounds the plan frame.
	maxPlanBytes = 64 << 10
	// maxPlanFDs bounds init's fds: channel numbers are one byte.
	maxPlanFDs  = 255 - chanFirstFD + 1
	creditEntry = 5
)

// Channels of the stream.
const (
	chanControl = 0
	chanStdout  = 1
	chanStderr  = 2
	chanFirstFD = 3
)

// Directions of a plan's fds, relative to init ("in": init reads).
const (
	dirNone = "none"
	dirIn   = "in"
	dirOut  = "out"
	dirBoth = "both"
)

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// writeFrame writes one frame. len(data) must be at most MaxFrameData; nil or empty
// data is the channel's end.
func writeFrame(w io.Writer, ch uint8, data []byte) error {
	if len(data) > MaxFrameData {
		return protocolErr("frame of %d bytes on channel %d", len(data), ch)
	}
	buf := make([]byte, frameHeader+len(data))
	buf[0] = ch
	binary.BigEndian.PutUint32(buf[1:frameHeader], uint32(len(data)))
	copy(buf[frameHeader:], data)
	_, err := w.Write(buf)
	return err
}

// frameReader reads frames from one stream into a buffer of its own.
type frameReader struct {
	r   io.Reader
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, buf: make([]byte, frameHeader+MaxFrameData)}
}

// next returns the next frame. data is valid until the following call; an empty data
// is the channel's end. The error is io.EOF at a clean end of the stream (between
// frames), io.ErrUnexpectedEOF inside a frame, and wraps errProtocol for a frame
// longer than MaxFrameData (nothing of it is read).
func (fr *frameReader) next() (ch uint8, data []byte, err error) {
	hdr := fr.buf[:frameHeader]
	if _, err := io.ReadFull(fr.r, hdr); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrameData {
		return 0, nil, protocolErr("frame of %d bytes on channel %d (at most %d)", n, hdr[0], MaxFrameData)
	}
	data = fr.buf[frameHeader : frameHeader+int(n)]
	if _, err := io.ReadFull(fr.r, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], data, nil
}

// frameWriter serialises frames onto one stream: it is the only writer of the
// container's stdout (in the agent) and of its stdin (on the host). The first error
// sticks: a stream that failed once is not written again.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (fw *frameWriter) send(ch uint8, data []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.err != nil {
		return fw.err
	}
	fw.err = writeFrame(fw.w, ch, data)
	return fw.err
}

// grant sends a credit grant of n bytes for channel ch.
func (fw *frameWriter) grant(ch uint8, n int) error {
	var e [creditEntry]byte
	e[0] = ch
	binary.BigEndian.PutUint32(e[1:], uint32(n))
	return fw.send(chanControl, e[:])
}

// Plan tells the agent which fds init gets. It is the host's first frame, on channel 0.
type Plan struct {
	FDs []PlanFD `json:"fds"`
}

// PlanFD is one of init's fds: FD is 3, 4, ... in order; Dir is "none", "in", "out"
// or "both", relative to init.
type PlanFD struct {
	FD  int    `json:"fd"`
	Dir string `json:"dir"`
}

// validate checks that the fds are 3, 4, ... in order, each with a known direction.
func (p *Plan) validate() error {
	if len(p.FDs) > maxPlanFDs {
		return protocolErr("plan has %d fds (at most %d)", len(p.FDs), maxPlanFDs)
	}
	for i, f := range p.FDs {
		if f.FD != chanFirstFD+i {
			return protocolErr("plan's fd %d is %d, want %d", i, f.FD, chanFirstFD+i)
		}
		switch f.Dir {
		case dirNone, dirIn, dirOut, dirBoth:
		default:
			return protocolErr("plan's fd %d has direction %q", f.FD, f.Dir)
		}
	}
	return nil
}

// sendPlan writes the plan frame.
func sendPlan(fw *frameWriter, p *Plan) error {
	if err := p.validate(); err != nil {
		return err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if len(b) > maxPlanBytes {
		return protocolErr("plan of %d bytes", len(b))
	}
	return fw.send(chanControl, b)
}

// readPlan reads and checks the plan frame, the first of the stream.
func readPlan(fr *frameReader) (*Plan, error) {
	ch, data, err := fr.next()
	if err != nil {
		return nil, fmt.Errorf("read the plan: %w", err)
	}
	if ch != chanControl || len(data) == 0 || len(data) > maxPlanBytes {
		return nil, protocolErr("first frame: channel %d, %d bytes; want the plan", ch, len(data))
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, protocolErr("plan: %v", err)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// sends reports whether the side that is the container (agent true) or the host
// (agent false) sends data on a channel of direction dir.
func sends(dir string, agent bool) bool {
	switch dir {
	case dirBoth:
		return true
	case dirOut:
		return agent
	case dirIn:
		return !agent
	}
	return false
}

// credits is the sending side's windows: how many bytes each channel may still send.
type credits struct {
	mu      sync.Mutex
	cond    *sync.Cond
	avail   [256]int
	closed  bool
	onGrant func(ch uint8) // called after a grant, without mu held
}

// newCredits opens a full window on each channel in chans.
func newCredits(chans []uint8, onGrant func(uint8)) *credits {
	c := &credits{onGrant: onGrant}
	c.cond = sync.NewCond(&c.mu)
	for _, ch := range chans {
		c.avail[ch] = muxWindow
	}
	return c
}

// applyGrants adds the grants of one control frame. A grant on a channel this side does
// not send on, or past the window, is a protocol error.
func (c *credits) applyGrants(data []byte, sending func(uint8) bool) error {
	if len(data) == 0 || len(data)%creditEntry != 0 {
		return protocolErr("control frame of %d bytes", len(data))
	}
	var granted []uint8
	c.mu.Lock()
	for i := 0; i < len(data); i += creditEntry {
		ch := data[i]
		n := binary.BigEndian.Uint32(data[i+1 : i+creditEntry])
		if !sending(ch) || int64(c.avail[ch])+int64(n) > muxWindow {
			c.mu.Unlock()
			return protocolErr("grant of %d bytes on channel %d", n, ch)
		}
		c.avail[ch] += int(n)
		granted = append(granted, ch)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if c.onGrant != nil {
		for _, ch := range granted {
			c.onGrant(ch)
		}
	}
	return nil
}

// wait blocks until ch may send, and returns how many bytes; 0 once closed.
func (c *credits) wait(ch uint8) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.avail[ch] == 0 && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0
	}
	return c.avail[ch]
}

// get returns what ch may send now.
func (c *credits) get(ch uint8) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.avail[ch]
}

// take spends n bytes of ch's window.
func (c *credits) take(ch uint8, n int) {
	c.mu.Lock()
	c.avail[ch] -= n
	c.mu.Unlock()
}

// close wakes every waiter for good.
func (c *credits) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// inbox is the receiving end of one channel: it queues the channel's data in order and
// writes it to dst from a goroutine of its own (run), granting each chunk back once
// written. The peer may have at most muxWindow bytes queued; more is a protocol error.
// After a write fails (nobody reads any more), the rest is dropped and still granted,
// so the peer never waits on a dead destination.
type inbox struct {
	ch       uint8
	dst      io.Writer
	closeDst func() error // at the channel's end; nil for none
	grant    func(ch uint8, n int)

	mu     sync.Mutex
	queue  [][]byte
	queued int
	eof    bool // the end was received
	abort  bool // stop writing: the stream is gone
	ready  chan struct{}
	done   chan struct{}
}

func newInbox(ch uint8, dst io.Writer, closeDst func() error, grant func(uint8, int)) *inbox {
	return &inbox{ch: ch, dst: dst, closeDst: closeDst, grant: grant, ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// push queues a frame's data (copied); empty data is the end.
func (ib *inbox) push(data []byte) error {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	switch {
	case ib.eof:
		return protocolErr("data on channel %d after its end", ib.ch)
	case len(data) == 0:
		ib.eof = true
	case ib.queued+len(data) > muxWindow:
		return protocolErr("channel %d sent %d bytes past its window", ib.ch, ib.queued+len(data)-muxWindow)
	default:
		ib.queue = append(ib.queue, append([]byte(nil), data...))
		ib.queued += len(data)
	}
	ib.wake()
	return nil
}

// end marks the channel's end if the peer never sent it (the stream is gone): run
// writes what is queued, then closes dst.
func (ib *inbox) end() {
	ib.mu.Lock()
	ib.eof = true
	ib.mu.Unlock()
	ib.wake()
}

// stop makes run drop what is queued and close dst. A write in progress is the
// caller's to break (by closing dst's file).
func (ib *inbox) stop() {
	ib.mu.Lock()
	ib.abort = true
	ib.mu.Unlock()
	ib.wake()
}

func (ib *inbox) wake() {
	select {
	case ib.ready <- struct{}{}:
	default:
	}
}

// run writes the queue to dst until the channel's end (then closes dst) or stop.
func (ib *inbox) run() {
	defer close(ib.done)
	broken := false
	for {
		ib.mu.Lock()
		var chunk []byte
		if len(ib.queue) > 0 && !ib.abort {
			chunk = ib.queue[0]
			ib.queue[0] = nil
			ib.queue = ib.queue[1:]
		}
		end := (ib.eof && len(ib.queue) == 0 && chunk == nil) || ib.abort
		ib.mu.Unlock()
		if chunk != nil {
			if !broken {
				if _, err := ib.dst.Write(chunk); err != nil {
					broken = true
				}
			}
			ib.mu.Lock()
			ib.queued -= len(chunk)
			ib.mu.Unlock()
			ib.grant(ib.ch, len(chunk))
			continue
		}
		if end {
			if ib.closeDst != nil {
				_ = ib.closeDst()
			}
			return
		}
		<-ib.ready
	}
}

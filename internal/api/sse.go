package api

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// wantsStream reports whether the client asked for server-sent events.
func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// eventStream writes server-sent events:
//
//	event: stdout            a chunk of output, as the filter let it through
//	data: {"data":"..."}
//
//	: heartbeat              a comment, every heartbeat interval
//
//	event: result            last: the Result
//	data: {...}
//
// The response (200, text/event-stream) begins with the first event, so an error
// before any output (a busy session, a bad profile) is still a plain JSON error with
// its own status. Every event is flushed as it is written. Writes never fail towards
// the engine: a client that went away is noticed through the request's context.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	started bool
	closed  bool
	outs    []*chunkWriter

	stop chan struct{}
	wg   sync.WaitGroup
}

// newEventStream prepares a stream on w and starts its heartbeat.
func newEventStream(w http.ResponseWriter, heartbeat time.Duration) *eventStream {
	s := &eventStream{w: w, rc: http.NewResponseController(w), stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.write(": heartbeat\n\n")
			}
		}
	}()
	return s
}

// output returns the writer for one output stream ("stdout" or "stderr").
func (s *eventStream) output(name string) io.Writer {
	cw := &chunkWriter{s: s, event: name}
	s.mu.Lock()
	s.outs = append(s.outs, cw)
	s.mu.Unlock()
	return cw
}

// end stops the heartbeat and sends what the output writers still hold. It reports
// whether the response has begun: if not, the caller may still answer with a plain
// response.
func (s *eventStream) end() bool {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	outs := s.outs
	s.mu.Unlock()
	for _, o := range outs {
		o.flush()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// send writes one event whose data is one line of JSON.
func (s *eventStream) send(event string, data []byte) {
	s.write(fmt.Sprintf("event: %s\ndata: %s\n\n", event, data))
}

// close ends the stream; nothing is written afterwards.
func (s *eventStream) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

func (s *eventStream) write(frame string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	_, _ = io.WriteString(s.w, frame)
	_ = s.rc.Flush()
}

// chunkWriter turns the writes of one output stream into events. It holds back an
// incomplete UTF-8 sequence at the end of a write until the next, so that a
// character split across writes arrives whole rather than as two U+FFFD.
type chunkWriter struct {
	s     *eventStream
	event string

	mu    sync.Mutex
	carry []byte
}

// chunk is the data of an output event.
type chunk struct {
	Data string `json:"data"`
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := append(c.carry, p...)
	whole, rest := splitUTF8(buf)
	c.carry = append([]byte(nil), rest...)
	if len(whole) > 0 {
		c.emit(whole)
	}
	return len(p), nil
}

func (c *chunkWriter) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.carry) > 0 {
		c.emit(c.carry)
		c.carry = nil
	}
}

func (c *chunkWriter) emit(b []byte) {
	data, err := marshal(chunk{Data: string(b)})
	if err != nil {
		return // a string always encodes
	}
	c.s.send(c.event, data)
}

// splitUTF8 splits b before a UTF-8 sequence that its last bytes begin but do not
// finish. Invalid bytes count as complete (they become U+FFFD in JSON).
func splitUTF8(b []byte) (whole, rest []byte) {
	for i := len(b) - 1; i >= 0 && i > len(b)-utf8.UTFMax; i-- {
		if b[i] < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i], b[i:]
			}
			break
		}
	}
	return b, nil
}

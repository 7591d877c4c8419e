package filter

import "io"

// Stream redacts a stream written in chunks of any size and writes the result to the
// writer given to Redactor.Stream. Build it with Redactor.Stream. It is not safe for
// concurrent use; Count may be called from another goroutine only after Close.
type Stream struct {
	next   io.Writer
	sc     *scanner
	buf    []byte // held back: the start of the next frame
	out    []byte
	count  int
	err    error
	closed bool
}

// Stream returns a writer that redacts what is written to it and writes the result
// to next. Its output is exactly Redact's output on the concatenation of the writes,
// and Count after Close is Redact's count, however the input is chunked: a secret
// split across two writes, or written one byte at a time, is redacted all the same.
//
// Output is delayed: the stream holds back less than one frame (step + window bytes,
// about 20 KiB with the default rules) and writes to next a frame's worth at a time,
// in one Write per frame. Memory stays bounded whatever the input. Close writes what
// is held back; it does not close next. A Write error from next is returned by that
// Write and every later call.
func (r *Redactor) Stream(next io.Writer) *Stream {
	return &Stream{next: next, sc: r.newScanner()}
}

// Write redacts p. It returns len(p) unless next failed.
func (s *Stream) Write(p []byte) (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	if s.err != nil {
		return 0, s.err
	}
	fs := s.sc.r.frameSize()
	// s.buf grows as written, up to a frame: most executions print a few bytes,
	// and a whole frame for each stream was most of what the server allocated
	// for one of them.
	n := 0
	for len(p) > 0 {
		k := min(len(p), fs-len(s.buf))
		if need := len(s.buf) + k; need > cap(s.buf) {
			grown := make([]byte, len(s.buf), min(fs, max(need, 2*cap(s.buf), 512)))
			copy(grown, s.buf)
			s.buf = grown
		}
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		n += k
		if len(s.buf) == fs {
			if err := s.process(false); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Close writes out what the stream holds back. Later Writes fail with ErrClosed;
// later Closes return nil, or next's error.
func (s *Stream) Close() error {
	if s.closed {
		return s.err
	}
	s.closed = true
	if s.err != nil {
		return s.err
	}
	err := s.process(true)
	s.buf, s.out = nil, nil
	return err
}

// Count returns the number of replacements written so far.
func (s *Stream) Count() int { return s.count }

// CountByRule returns the replacements written so far by rule name (SecretRuleName
// for exact secret values); nil when there were none.
func (s *Stream) CountByRule() map[string]int { return s.sc.byRule() }

// process runs one frame, the whole buffer, and writes its output.
func (s *Stream) process(final bool) error {
	out, used, n := s.sc.step(s.buf, final, s.out[:0])
	s.out = out
	s.count += n
	s.buf = s.buf[:copy(s.buf, s.buf[used:])]
	if len(out) == 0 {
		return nil
	}
	w, err := s.next.Write(out)
	if err == nil && w < len(out) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.err = err
	}
	return err
}

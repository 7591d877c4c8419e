package box

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// FloodFactor: a stream that produces more than FloodFactor times the output cap is a
// flood, and the box is killed with StatusOutputLimit. Below that the output is only
// truncated (head and tail kept) and the code runs to its end.
const FloodFactor = 8

// Capture keeps a bounded copy of one output stream: the first half of the cap and the
// last half, with the middle elided. Its memory use is bounded by the cap whatever the
// code prints. When Live is set, the first Limit bytes are also written through as they
// arrive. Capture is not safe for concurrent use; one reader goroutine owns it.
type Capture struct {
	limit int64
	live  io.Writer
	head  []byte
	tail  []byte // ring buffer of at most limit-len(head) bytes once full
	tpos  int    // next write position in tail when full
	total int64
}

// NewCapture returns a Capture keeping at most limit bytes, writing through to live
// (which may be nil).
func NewCapture(limit int64, live io.Writer) *Capture {
	return &Capture{limit: limit, live: live}
}

// Write records p. It never fails, so the code's writes are never blocked by a full cap.
func (c *Capture) Write(p []byte) (int, error) {
	n := len(p)
	if c.live != nil && c.total < c.limit {
		w := p
		if rest := c.limit - c.total; int64(len(w)) > rest {
			w = w[:rest]
		}
		_, _ = c.live.Write(w) // a broken terminal must not stop the capture
	}
	c.total += int64(n)
	headCap := int(c.limit / 2)
	if room := headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.writeTail(p)
	return n, nil
}

func (c *Capture) writeTail(p []byte) {
	tailCap := int(c.limit) - int(c.limit/2)
	if tailCap <= 0 || len(p) == 0 {
		return
	}
	if len(p) >= tailCap {
		c.tail = append(c.tail[:0], p[len(p)-tailCap:]...)
		c.tpos = 0
		return
	}
	if len(c.tail) < tailCap {
		free := tailCap - len(c.tail)
		k := min(free, len(p))
		c.tail = append(c.tail, p[:k]...)
		p = p[k:]
		if len(p) == 0 {
			return
		}
	}
	for len(p) > 0 {
		k := copy(c.tail[c.tpos:], p)
		p = p[k:]
		c.tpos = (c.tpos + k) % tailCap
	}
}

// Total is the number of bytes the stream produced.
func (c *Capture) Total() int64 { return c.total }

// Truncated reports whether bytes were elided.
func (c *Capture) Truncated() bool { return c.total > c.limit }

// Flooded reports whether total raw bytes of a stream capped at limit are a flood
// (see FloodFactor).
func Flooded(total, limit int64) bool { return total > limit*FloodFactor }

// String returns the kept output. When bytes were elided, a marker line in the middle
// says how many; cut points are moved to whole UTF-8 characters.
func (c *Capture) String() string {
	tail := c.tail
	if c.tpos > 0 {
		tail = append(append([]byte{}, c.tail[c.tpos:]...), c.tail[:c.tpos]...)
	}
	if !c.Truncated() {
		return string(c.head) + string(tail)
	}
	head := trimPartialEnd(c.head)
	tail = trimPartialStart(tail)
	elided := c.total - int64(len(head)) - int64(len(tail))
	return fmt.Sprintf("%s\n[moat: %d bytes elided; %d bytes in all, cap %d]\n%s", head, elided, c.total, c.limit, tail)
}

func trimPartialEnd(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		r, size := utf8.DecodeLastRune(b[:len(b)-i])
		if r != utf8.RuneError || size > 1 {
			return b[:len(b)-i]
		}
	}
	return b
}

func trimPartialStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}

// LastLine returns the last non-empty line of s, cut to max bytes, for messages that
// quote what a box printed.
func LastLine(s string, max int) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > max {
		s = string(trimPartialEnd([]byte(s[:max])))
	}
	return s
}

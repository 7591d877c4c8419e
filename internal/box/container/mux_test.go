package container

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func frameBytes(ch uint8, n uint32, data []byte) []byte {
	b := []byte{ch, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], n)
	return append(b, data...)
}

func TestFrameRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("x"), MaxFrameData)
	frames := []struct {
		ch   uint8
		data []byte
	}{
		{1, []byte("hello\n")},
		{2, nil}, // the end of channel 2
		{3, big}, // the largest frame
		{255, []byte{0, 1, 2}},
		{0, []byte(`{"fds":[]}`)},
	}
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf}
	for _, f := range frames {
		if err := fw.send(f.ch, f.data); err != nil {
			t.Fatal(err)
		}
	}
	fr := newFrameReader(&buf)
	for i, f := range frames {
		ch, data, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if ch != f.ch || !bytes.Equal(data, f.data) {
			t.Fatalf("frame %d: channel %d, %d bytes; want channel %d, %d bytes", i, ch, len(data), f.ch, len(f.data))
		}
	}
	if _, _, err := fr.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFrameErrors(t *testing.T) {
	cases := []struct {
		name   string
		stream []byte
		want   error
	}{
		{"empty stream", nil, io.EOF},
		{"short header", []byte{1, 0, 0}, io.ErrUnexpectedEOF},
		{"short data", frameBytes(1, 10, []byte("abc")), io.ErrUnexpectedEOF},
		{"header only", frameBytes(1, 1, nil), io.ErrUnexpectedEOF},
		{"oversized frame", frameBytes(1, MaxFrameData+1, nil), errProtocol},
		{"huge length", frameBytes(3, 0xffffffff, []byte("garbage")), errProtocol},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := newFrameReader(bytes.NewReader(c.stream)).next()
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	t.Run("writer refuses an oversized frame", func(t *testing.T) {
		var buf bytes.Buffer
		if err := writeFrame(&buf, 1, make([]byte, MaxFrameData+1)); !errors.Is(err, errProtocol) || buf.Len() != 0 {
			t.Fatalf("got %v and %d bytes written", err, buf.Len())
		}
	})
	t.Run("writer error sticks", func(t *testing.T) {
		fw := &frameWriter{w: failWriter{}}
		if err := fw.send(1, []byte("a")); err == nil {
			t.Fatal("no error")
		}
		fw.w = io.Discard
		if err := fw.send(1, []byte("a")); err == nil {
			t.Fatal("a failed stream was written again")
		}
	})
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken") }

func TestPlan(t *testing.T) {
	good := &Plan{FDs: []PlanFD{{3, "both"}, {4, "none"}, {5, "in"}, {6, "out"}}}
	var buf bytes.Buffer
	if err := sendPlan(&frameWriter{w: &buf}, good); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `{"fds":[{"fd":3,"dir":"both"},{"fd":4,"dir":"none"},{"fd":5,"dir":"in"},{"fd":6,"dir":"out"}]}`) {
		t.Errorf("plan frame %q", buf.String())
	}
	got, err := readPlan(newFrameReader(&buf))
	if err != nil || len(got.FDs) != 4 || got.FDs[2] != (PlanFD{5, "in"}) {
		t.Fatalf("readPlan: %+v, %v", got, err)
	}

	bad := []struct {
		name   string
		stream []byte
	}{
		{"not JSON", frameBytes(0, 3, []byte("abc"))},
		{"empty", frameBytes(0, 0, nil)},
		{"data channel first", frameBytes(1, 2, []byte("{}"))},
		{"fds out of order", planFrame(`{"fds":[{"fd":4,"dir":"in"}]}`)},
		{"fd below 3", planFrame(`{"fds":[{"fd":0,"dir":"in"}]}`)},
		{"unknown direction", planFrame(`{"fds":[{"fd":3,"dir":"sideways"}]}`)},
		{"too many fds", planFrame(manyFDs(maxPlanFDs + 1))},
		{"too long", frameBytes(0, maxPlanBytes+1, make([]byte, maxPlanBytes+1))},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if _, err := readPlan(newFrameReader(bytes.NewReader(c.stream))); !errors.Is(err, errProtocol) {
				t.Fatalf("got %v, want a protocol error", err)
			}
		})
	}
	t.Run("no plan at all", func(t *testing.T) {
		if _, err := readPlan(newFrameReader(bytes.NewReader(nil))); !errors.Is(err, io.EOF) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("the most fds", func(t *testing.T) {
		if _, err := readPlan(newFrameReader(bytes.NewReader(planFrame(manyFDs(maxPlanFDs))))); err != nil {
			t.Fatal(err)
		}
	})
}

func planFrame(js string) []byte { return frameBytes(0, uint32(len(js)), []byte(js)) }

func manyFDs(n int) string {
	var b strings.Builder
	b.WriteString(`{"fds":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"fd":` + strconv.Itoa(chanFirstFD+i) + `,"dir":"none"}`)
	}
	b.WriteString("]}")
	return b.String()
}

func grantFrame(entries ...[2]int) []byte {
	var b []byte
	for _, e := range entries {
		var x [creditEntry]byte
		x[0] = uint8(e[0])
		binary.BigEndian.PutUint32(x[1:], uint32(e[1]))
		b = append(b, x[:]...)
	}
	return b
}

func TestCredits(t *testing.T) {
	sending := func(ch uint8) bool { return ch == 3 || ch == 4 }
	var woke []uint8
	c := newCredits([]uint8{3, 4}, func(ch uint8) { woke = append(woke, ch) })
	if c.get(3) != muxWindow || c.get(5) != 0 {
		t.Fatalf("initial windows %d %d", c.get(3), c.get(5))
	}
	c.take(3, 1000)
	c.take(4, muxWindow)
	if err := c.applyGrants(grantFrame([2]int{3, 600}, [2]int{4, 10}), sending); err != nil {
		t.Fatal(err)
	}
	if c.get(3) != muxWindow-400 || c.get(4) != 10 || len(woke) != 2 {
		t.Fatalf("after grants: %d %d, woke %v", c.get(3), c.get(4), woke)
	}
	bad := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"partial entry", []byte{3, 0, 0}},
		{"past the window", grantFrame([2]int{3, 401})},
		{"a channel this side does not send", grantFrame([2]int{5, 1})},
		{"huge", grantFrame([2]int{4, 0xffffffff})},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			if err := c.applyGrants(b.data, sending); !errors.Is(err, errProtocol) {
				t.Fatalf("got %v", err)
			}
		})
	}

	// wait blocks until a grant, and returns 0 once closed.
	c.take(4, c.get(4))
	got := make(chan int, 1)
	go func() { got <- c.wait(4) }()
	select {
	case n := <-got:
		t.Fatalf("wait returned %d without credit", n)
	case <-time.After(20 * time.Millisecond):
	}
	if err := c.applyGrants(grantFrame([2]int{4, 7}), sending); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 7 {
		t.Fatalf("wait = %d, want 7", n)
	}
	c.take(4, 7)
	go func() { got <- c.wait(4) }()
	c.close()
	if n := <-got; n != 0 {
		t.Fatalf("wait after close = %d", n)
	}
}

// slowWriter blocks each write until released.
type slowWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	release chan struct{}
}

func (w *slowWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func TestInbox(t *testing.T) {
	t.Run("writes in order, grants each chunk, closes at the end", func(t *testing.T) {
		var buf bytes.Buffer
		var granted int
		closed := false
		ib := newInbox(3, &buf, func() error { closed = true; return nil }, func(ch uint8, n int) { granted += n })
		go ib.run()
		for _, s := range []string{"one ", "two ", "three"} {
			if err := ib.push([]byte(s)); err != nil {
				t.Fatal(err)
			}
		}
		if err := ib.push(nil); err != nil {
			t.Fatal(err)
		}
		<-ib.done
		if buf.String() != "one two three" || granted != 13 || !closed {
			t.Fatalf("wrote %q, granted %d, closed %v", buf.String(), granted, closed)
		}
		if err := ib.push([]byte("late")); !errors.Is(err, errProtocol) {
			t.Fatalf("data after the end: %v", err)
		}
	})
	t.Run("a slow destination holds its channel to the window", func(t *testing.T) {
		w := &slowWriter{release: make(chan struct{})}
		ib := newInbox(1, w, nil, func(uint8, int) {})
		go ib.run()
		if err := ib.push(make([]byte, muxWindow)); err != nil {
			t.Fatal(err)
		}
		// The first chunk may be taken off the queue by the blocked write; the
		// window still counts it until it is written.
		if err := ib.push([]byte{1}); !errors.Is(err, errProtocol) {
			t.Fatalf("past the window: %v", err)
		}
		close(w.release)
		ib.end()
		<-ib.done
		if w.buf.Len() != muxWindow {
			t.Fatalf("wrote %d bytes", w.buf.Len())
		}
	})
	t.Run("a broken destination drops and still grants", func(t *testing.T) {
		var granted int
		ib := newInbox(4, failWriter{}, nil, func(ch uint8, n int) { granted += n })
		go ib.run()
		_ = ib.push([]byte("abc"))
		_ = ib.push([]byte("de"))
		_ = ib.push(nil)
		<-ib.done
		if granted != 5 {
			t.Fatalf("granted %d", granted)
		}
	})
	t.Run("stop drops what is queued", func(t *testing.T) {
		w := &slowWriter{release: make(chan struct{})}
		closed := make(chan struct{})
		ib := newInbox(1, w, func() error { close(closed); return nil }, func(uint8, int) {})
		go ib.run()
		_ = ib.push([]byte("first"))
		_ = ib.push([]byte("second"))
		time.Sleep(10 * time.Millisecond) // run is blocked writing "first"
		ib.stop()
		close(w.release)
		<-ib.done
		<-closed
		if w.buf.String() != "first" {
			t.Fatalf("wrote %q", w.buf.String())
		}
	})
}

// FuzzFrameReader feeds arbitrary streams to the frame reader and the plan reader:
// they must return an error or a frame within bounds, never panic or over-read.
func FuzzFrameReader(f *testing.F) {
	f.Add(planFrame(`{"fds":[{"fd":3,"dir":"both"}]}`))
	f.Add(frameBytes(1, 3, []byte("abc")))
	f.Add(frameBytes(1, 0xffffffff, nil))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		_, _ = readPlan(newFrameReader(bytes.NewReader(stream)))
		fr := newFrameReader(bytes.NewReader(stream))
		for {
			_, data, err := fr.next()
			if err != nil {
				return
			}
			if len(data) > MaxFrameData {
				t.Fatalf("frame of %d bytes", len(data))
			}
		}
	})
}

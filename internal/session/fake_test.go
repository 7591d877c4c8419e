package session

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeBox records Close calls and can be made to die on its own.
type fakeBox struct {
	mu      sync.Mutex
	closes  int
	err     error
	done    chan struct{}
	once    sync.Once
	onClose func() // called by Close before it returns, if set
}

func newFakeBox() *fakeBox { return &fakeBox{done: make(chan struct{})} }

var errFakeClosed = errors.New("fake box closed")

func (b *fakeBox) Close() error {
	b.mu.Lock()
	b.closes++
	if b.err == nil {
		b.err = errFakeClosed
	}
	onClose := b.onClose
	b.mu.Unlock()
	b.once.Do(func() { close(b.done) })
	if onClose != nil {
		onClose()
	}
	return nil
}

func (b *fakeBox) Done() <-chan struct{} { return b.done }

func (b *fakeBox) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// die makes the box go away on its own, as a killed box does.
func (b *fakeBox) die(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
	b.once.Do(func() { close(b.done) })
}

func (b *fakeBox) closeCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closes
}

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newTestStore returns a store on a fake clock, closed when the test ends.
func newTestStore(t *testing.T, opts Options) (*Store[*fakeBox], *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	s, err := New[*fakeBox](opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clk
}

// create commits a new session of owner with a fresh fake box.
func create(t *testing.T, s *Store[*fakeBox], owner string, info Info) (Info, *fakeBox) {
	t.Helper()
	slot, err := s.Reserve(owner, 100)
	if err != nil {
		t.Fatalf("Reserve(%q): %v", owner, err)
	}
	b := newFakeBox()
	got, err := slot.Commit(info, b)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return got, b
}

// wantLost checks that err is a *LostError for id with the reason.
func wantLost(t *testing.T, err error, id, reason string) {
	t.Helper()
	var lost *LostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrLost) {
		t.Fatalf("err = %v, want a *LostError", err)
	}
	if lost.ID != id || lost.Reason != reason {
		t.Fatalf("LostError{%q, %q}, want {%q, %q}", lost.ID, lost.Reason, id, reason)
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

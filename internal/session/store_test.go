package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestCreateGetListDelete(t *testing.T) {
	s, clk := newTestStore(t, Options{})
	a1, box1 := create(t, s, "alice", Info{Language: "python", Profile: "default"})
	clk.Advance(time.Second)
	a2, _ := create(t, s, "alice", Info{Language: "bash"})
	create(t, s, "bob", Info{Language: "python"})

	if !validID(a1.ID) || a1.ID == a2.ID {
		t.Fatalf("ids %q, %q: want two distinct s_ ids", a1.ID, a2.ID)
	}
	start := newFakeClock().Now()
	want := Info{
		ID: a1.ID, Owner: "alice", Language: "python", Profile: "default",
		CreatedAt: start, LastUsed: start, ExpiresAt: start.Add(DefaultIdleTTL),
		IdleTTL: DefaultIdleTTL, MaxLifetime: DefaultMaxLifetime,
	}
	if a1 != want {
		t.Errorf("Commit = %+v\nwant %+v", a1, want)
	}
	if got, err := s.Get("alice", a1.ID); err != nil || got != want {
		t.Errorf("Get = %+v, %v\nwant %+v", got, err, want)
	}
	list := s.List("alice")
	if len(list) != 2 || list[0].ID != a1.ID || list[1].ID != a2.ID {
		t.Errorf("List(alice) = %+v, want [%s %s] (oldest first)", list, a1.ID, a2.ID)
	}
	if n := s.Len(); n != 3 {
		t.Errorf("Len = %d, want 3", n)
	}

	if err := s.Delete("alice", a1.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if n := box1.closeCount(); n != 1 {
		t.Errorf("box closed %d times, want 1", n)
	}
	if _, err := s.Get("alice", a1.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound (not lost: the owner deleted it)", err)
	}
	if err := s.Delete("alice", a1.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if n := s.Len(); n != 2 {
		t.Errorf("Len = %d, want 2", n)
	}
}

func TestOwnerIsolation(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	live, liveBox := create(t, s, "alice", Info{})
	lost, lostBox := create(t, s, "alice", Info{})
	lostBox.die(errors.New("killed"))
	if _, err := s.Get("alice", lost.ID); !errors.Is(err, ErrLost) {
		t.Fatalf("Get of a dead session: %v, want ErrLost", err)
	}

	for _, id := range []string{live.ID, lost.ID, "s_doesnotexist"} {
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"Get", func() error { _, err := s.Get("mallory", id); return err }},
			{"Acquire", func() error { _, _, err := s.Acquire("mallory", id); return err }},
			{"Delete", func() error { return s.Delete("mallory", id) }},
		} {
			t.Run(op.name+"/"+id, func(t *testing.T) {
				if err := op.do(); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s by another owner: %v, want ErrNotFound", op.name, err)
				}
			})
		}
	}
	if l := s.List("mallory"); len(l) != 0 {
		t.Errorf("List(mallory) = %+v, want none", l)
	}
	if _, err := s.Get("alice", live.ID); err != nil {
		t.Errorf("alice's session after mallory's attempts: %v", err)
	}
	if n := liveBox.closeCount(); n != 0 {
		t.Errorf("alice's box closed %d times by mallory's Delete", n)
	}
	if _, err := s.Get("alice", lost.ID); !errors.Is(err, ErrLost) {
		t.Errorf("alice's tombstone after mallory's Delete: %v, want ErrLost", err)
	}
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name        string
		maxTotal    int
		maxPerOwner int
		// hold are the owners whose slots are taken first (all must succeed).
		hold      []string
		owner     string
		wantScope string // "" = Reserve succeeds
		wantLimit int
	}{
		{"under both limits", 3, 2, []string{"alice", "bob"}, "alice", "", 0},
		{"total reached", 2, 5, []string{"alice", "bob"}, "carol", ScopeTotal, 2},
		{"owner reached", 10, 2, []string{"alice", "alice", "bob"}, "alice", ScopeOwner, 2},
		{"other owner unaffected", 10, 1, []string{"alice"}, "bob", "", 0},
		{"quota of zero allows none", 10, 0, nil, "alice", ScopeOwner, 0},
		{"negative quota allows none", 10, -1, nil, "alice", ScopeOwner, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newTestStore(t, Options{MaxTotal: tt.maxTotal})
			for i, owner := range tt.hold {
				slot, err := s.Reserve(owner, tt.maxPerOwner)
				if err != nil {
					t.Fatalf("Reserve #%d: %v", i, err)
				}
				if i%2 == 0 { // committed and reserved slots both count
					if _, err := slot.Commit(Info{}, newFakeBox()); err != nil {
						t.Fatal(err)
					}
				}
			}
			slot, err := s.Reserve(tt.owner, tt.maxPerOwner)
			if tt.wantScope == "" {
				if err != nil {
					t.Fatalf("Reserve: %v, want success", err)
				}
				slot.Cancel()
				return
			}
			var le *LimitError
			if !errors.As(err, &le) || !errors.Is(err, ErrLimit) {
				t.Fatalf("Reserve: %v, want *LimitError", err)
			}
			if le.Scope != tt.wantScope || le.Limit != tt.wantLimit {
				t.Errorf("LimitError{%q, %d}, want {%q, %d}", le.Scope, le.Limit, tt.wantScope, tt.wantLimit)
			}
		})
	}
}

func TestLimitSlotsFreed(t *testing.T) {
	tests := []struct {
		name string
		free func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, slot *Slot[*fakeBox])
	}{
		{"Cancel", func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, slot *Slot[*fakeBox]) {
			slot.Cancel()
			slot.Cancel() // a second Cancel must not free another slot
		}},
		{"Delete", func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, slot *Slot[*fakeBox]) {
			info, err := slot.Commit(Info{}, newFakeBox())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Delete("alice", info.ID); err != nil {
				t.Fatal(err)
			}
		}},
		{"expiry", func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, slot *Slot[*fakeBox]) {
			if _, err := slot.Commit(Info{}, newFakeBox()); err != nil {
				t.Fatal(err)
			}
			clk.Advance(DefaultIdleTTL)
			s.Sweep()
		}},
		{"box death", func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, slot *Slot[*fakeBox]) {
			b := newFakeBox()
			if _, err := slot.Commit(Info{}, b); err != nil {
				t.Fatal(err)
			}
			b.die(errors.New("oom"))
			waitFor(t, "the dead box to be closed", func() bool { return b.closeCount() == 1 })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One slot in total and per owner: bob's Reserve also checks that the
			// total is freed, not only alice's count.
			s, clk := newTestStore(t, Options{MaxTotal: 1})
			slot, err := s.Reserve("alice", 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Reserve("alice", 1); !errors.Is(err, ErrLimit) {
				t.Fatalf("second Reserve: %v, want ErrLimit", err)
			}
			tt.free(t, s, clk, slot)
			slot2, err := s.Reserve("bob", 1)
			if err != nil {
				t.Fatalf("Reserve after %s: %v", tt.name, err)
			}
			if _, err := s.Reserve("alice", 1); !errors.Is(err, ErrLimit) {
				t.Fatalf("Reserve over a freed slot taken again: %v, want ErrLimit", err)
			}
			slot2.Cancel()
		})
	}
}

func TestBusy(t *testing.T) {
	s, clk := newTestStore(t, Options{})
	info, box := create(t, s, "alice", Info{})

	b, release, err := s.Acquire("alice", info.ID)
	if err != nil || b != box {
		t.Fatalf("Acquire = %p, %v; want the session's box", b, err)
	}
	if _, _, err := s.Acquire("alice", info.ID); !errors.Is(err, ErrBusy) {
		t.Errorf("second Acquire: %v, want ErrBusy", err)
	}
	if got, _ := s.Get("alice", info.ID); !got.Busy {
		t.Errorf("Get while acquired: Busy = false")
	}
	clk.Advance(time.Minute)
	release(true)
	release(true) // later calls do nothing
	got, _ := s.Get("alice", info.ID)
	if got.Busy || got.Calls != 1 || !got.LastUsed.Equal(clk.Now()) || !got.ExpiresAt.Equal(clk.Now().Add(DefaultIdleTTL)) {
		t.Errorf("after release(true): %+v; want idle, 1 call, LastUsed and ExpiresAt refreshed", got)
	}

	_, release, err = s.Acquire("alice", info.ID)
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	release(false) // a file operation
	if got, _ := s.Get("alice", info.ID); got.Calls != 1 {
		t.Errorf("Calls = %d after a file operation, want 1", got.Calls)
	}
}

func TestAcquireOneAtATime(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	info, _ := create(t, s, "alice", Info{})
	var wins, busy atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			_, _, err := s.Acquire("alice", info.ID)
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, ErrBusy):
				busy.Add(1)
			default:
				t.Errorf("Acquire: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || busy.Load() != 49 {
		t.Errorf("%d acquired, %d busy; want 1 and 49", wins.Load(), busy.Load())
	}
}

func TestExpiry(t *testing.T) {
	const idle = "expired after 10m0s idle"
	const lifetime = "reached its maximum lifetime of 1h0m0s"
	tests := []struct {
		name string
		info Info
		// run acts on the session; it returns with the session acquired or not.
		run        func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string)
		sweep      bool   // call Sweep before checking (else Get must notice on its own)
		wantReason string // "" = still alive
	}{
		{"idle TTL reached", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(DefaultIdleTTL)
		}, true, idle},
		{"just before the idle TTL", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(DefaultIdleTTL - time.Nanosecond)
		}, true, ""},
		{"idle TTL noticed by Get without a sweep", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(DefaultIdleTTL)
		}, false, idle},
		{"release restarts the idle TTL", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(9 * time.Minute)
			use(t, s, id)
			clk.Advance(9 * time.Minute)
		}, true, ""},
		{"busy does not expire by idle TTL", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			if _, _, err := s.Acquire("alice", id); err != nil {
				t.Fatal(err)
			}
			clk.Advance(3 * DefaultIdleTTL)
		}, true, ""},
		{"max lifetime while busy", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			if _, _, err := s.Acquire("alice", id); err != nil {
				t.Fatal(err)
			}
			clk.Advance(DefaultMaxLifetime)
		}, true, lifetime},
		{"max lifetime while in use", Info{}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			for range 6 {
				clk.Advance(9 * time.Minute)
				use(t, s, id)
			}
			clk.Advance(9 * time.Minute) // 63m, used 9m ago
		}, true, lifetime},
		{"shorter idle TTL of its own", Info{IdleTTL: time.Minute}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(time.Minute)
		}, true, "expired after 1m0s idle"},
		{"shorter lifetime of its own", Info{MaxLifetime: 5 * time.Minute}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(4 * time.Minute)
			use(t, s, id)
			clk.Advance(time.Minute)
		}, true, "reached its maximum lifetime of 5m0s"},
		{"longer idle TTL is clamped", Info{IdleTTL: 5 * time.Hour}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			clk.Advance(DefaultIdleTTL)
		}, true, idle},
		{"longer lifetime is clamped", Info{MaxLifetime: 5 * time.Hour}, func(t *testing.T, s *Store[*fakeBox], clk *fakeClock, id string) {
			if _, _, err := s.Acquire("alice", id); err != nil {
				t.Fatal(err)
			}
			clk.Advance(DefaultMaxLifetime)
		}, true, lifetime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, Options{})
			info, box := create(t, s, "alice", tt.info)
			tt.run(t, s, clk, info.ID)
			if tt.sweep {
				s.Sweep()
			}
			_, err := s.Get("alice", info.ID)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("Get: %v, want the session alive", err)
				}
				if n := box.closeCount(); n != 0 {
					t.Fatalf("live session's box closed %d times", n)
				}
				return
			}
			wantLost(t, err, info.ID, tt.wantReason)
			_, _, err = s.Acquire("alice", info.ID)
			wantLost(t, err, info.ID, tt.wantReason)
			if n := box.closeCount(); n != 1 {
				t.Errorf("box closed %d times, want 1", n)
			}
			if l := s.List("alice"); len(l) != 0 {
				t.Errorf("List = %+v, want none", l)
			}
			s.Sweep()
			if n := box.closeCount(); n != 1 {
				t.Errorf("box closed %d times after another sweep, want 1", n)
			}
		})
	}
}

// use runs one call on alice's session id.
func use(t *testing.T, s *Store[*fakeBox], id string) {
	t.Helper()
	_, release, err := s.Acquire("alice", id)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	release(true)
}

func TestExpiresAt(t *testing.T) {
	s, clk := newTestStore(t, Options{})
	info, _ := create(t, s, "alice", Info{})
	start := info.CreatedAt
	for range 5 {
		clk.Advance(9 * time.Minute)
		use(t, s, info.ID)
	}
	got, err := s.Get("alice", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	// 45m: idle ends at 55m, before the lifetime at 60m.
	if want := start.Add(55 * time.Minute); !got.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt at 45m = %v, want %v", got.ExpiresAt, want)
	}
	clk.Advance(9 * time.Minute)
	use(t, s, info.ID)
	got, _ = s.Get("alice", info.ID)
	// 54m: idle would end at 64m; the lifetime ends first.
	if want := start.Add(time.Hour); !got.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt at 54m = %v, want %v", got.ExpiresAt, want)
	}
}

func TestBusySessionEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(s *Store[*fakeBox], clk *fakeClock, id string)
		lost bool
	}{
		{"Delete", func(s *Store[*fakeBox], clk *fakeClock, id string) { _ = s.Delete("alice", id) }, false},
		{"max lifetime", func(s *Store[*fakeBox], clk *fakeClock, id string) { clk.Advance(DefaultMaxLifetime); s.Sweep() }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestStore(t, Options{})
			info, box := create(t, s, "alice", Info{})
			b, release, err := s.Acquire("alice", info.ID)
			if err != nil {
				t.Fatal(err)
			}
			tt.end(s, clk, info.ID)
			select {
			case <-b.Done():
			default:
				t.Fatal("the running call's box was not closed")
			}
			release(true) // must not bring the session back
			if n := box.closeCount(); n != 1 {
				t.Errorf("box closed %d times, want 1", n)
			}
			_, err = s.Get("alice", info.ID)
			if tt.lost != errors.Is(err, ErrLost) || !tt.lost && !errors.Is(err, ErrNotFound) {
				t.Errorf("Get after release: %v (lost %v)", err, tt.lost)
			}
			if s.Len() != 0 {
				t.Errorf("Len = %d, want 0", s.Len())
			}
		})
	}
}

func TestBoxDies(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	info, box := create(t, s, "alice", Info{})
	other, otherBox := create(t, s, "alice", Info{})
	box.die(errors.New("killed after a stuck interrupt"))

	// The watcher ends the session without anyone asking.
	waitFor(t, "the watcher to close the dead box", func() bool { return box.closeCount() == 1 })
	waitFor(t, "the session to leave the store", func() bool { return s.Len() == 1 })
	_, err := s.Get("alice", info.ID)
	wantLost(t, err, info.ID, "the box died: killed after a stuck interrupt")
	if n := box.closeCount(); n != 1 {
		t.Errorf("dead box closed %d times, want 1", n)
	}
	if _, err := s.Get("alice", other.ID); err != nil || otherBox.closeCount() != 0 {
		t.Errorf("the other session: %v, %d closes; want it untouched", err, otherBox.closeCount())
	}
}

func TestBoxDiesNoticedByAcquire(t *testing.T) {
	// Acquire must not hand out a dead box even if the watcher has not run yet: the
	// check on Done under the lock makes this deterministic.
	s, _ := newTestStore(t, Options{})
	info, box := create(t, s, "alice", Info{})
	box.die(nil)
	_, _, err := s.Acquire("alice", info.ID)
	wantLost(t, err, info.ID, "the box died")
	waitFor(t, "the dead box to be closed", func() bool { return box.closeCount() >= 1 })
	s.Sweep()
	if n := box.closeCount(); n != 1 {
		t.Errorf("dead box closed %d times, want 1", n)
	}
}

func TestTombstones(t *testing.T) {
	t.Run("Delete forgets a lost session", func(t *testing.T) {
		s, clk := newTestStore(t, Options{})
		info, _ := create(t, s, "alice", Info{})
		clk.Advance(DefaultIdleTTL)
		s.Sweep()
		if err := s.Delete("alice", info.ID); err != nil {
			t.Fatalf("Delete of a lost session: %v", err)
		}
		if _, err := s.Get("alice", info.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Delete: %v, want ErrNotFound", err)
		}
	})
	t.Run("kept 24h", func(t *testing.T) {
		s, clk := newTestStore(t, Options{})
		info, _ := create(t, s, "alice", Info{})
		clk.Advance(DefaultIdleTTL)
		s.Sweep()
		clk.Advance(tombstoneTTL - time.Second)
		s.Sweep()
		if _, err := s.Get("alice", info.ID); !errors.Is(err, ErrLost) {
			t.Errorf("Get just under 24h: %v, want ErrLost", err)
		}
		clk.Advance(time.Second)
		s.Sweep()
		if _, err := s.Get("alice", info.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after 24h: %v, want ErrNotFound", err)
		}
		if s.tombOrder.Len() != 0 || len(s.tombs) != 0 {
			t.Errorf("%d/%d tombstones left after 24h", s.tombOrder.Len(), len(s.tombs))
		}
	})
	t.Run("oldest dropped beyond the cap", func(t *testing.T) {
		s, clk := newTestStore(t, Options{})
		s.mu.Lock()
		for i := range maxTombstones + 1 {
			s.addTombLocked(fmt.Sprint("s_", i), "alice", "gone", clk.Now())
		}
		n := len(s.tombs)
		s.mu.Unlock()
		if n != maxTombstones {
			t.Errorf("%d tombstones, want %d", n, maxTombstones)
		}
		if _, err := s.Get("alice", "s_0"); !errors.Is(err, ErrNotFound) {
			t.Errorf("oldest tombstone: %v, want ErrNotFound", err)
		}
		if _, err := s.Get("alice", "s_1"); !errors.Is(err, ErrLost) {
			t.Errorf("second oldest tombstone: %v, want ErrLost", err)
		}
	})
}

func TestClose(t *testing.T) {
	s, clk := newTestStore(t, Options{})
	var boxes []*fakeBox
	for _, owner := range []string{"alice", "alice", "bob"} {
		_, b := create(t, s, owner, Info{})
		boxes = append(boxes, b)
	}
	busy, busyBox := create(t, s, "carol", Info{})
	boxes = append(boxes, busyBox)
	_, release, err := s.Acquire("carol", busy.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, deadBox := create(t, s, "dave", Info{})
	boxes = append(boxes, deadBox)
	deadBox.die(errors.New("dead")) // may or may not be seen by the watcher first
	_, expiredBox := create(t, s, "erin", Info{IdleTTL: time.Second})
	boxes = append(boxes, expiredBox)
	clk.Advance(time.Second) // expired, not swept
	pending, err := s.Reserve("frank", 1)
	if err != nil {
		t.Fatal(err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, b := range boxes {
		if n := b.closeCount(); n != 1 {
			t.Errorf("box %d closed %d times, want 1", i, n)
		}
	}
	release(true)

	late := newFakeBox()
	if _, err := pending.Commit(Info{}, late); !errors.Is(err, ErrClosed) {
		t.Errorf("Commit after Close: %v, want ErrClosed", err)
	}
	if n := late.closeCount(); n != 1 {
		t.Errorf("box of a Commit after Close closed %d times, want 1", n)
	}
	if _, err := s.Reserve("alice", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Reserve: %v, want ErrClosed", err)
	}
	if _, _, err := s.Acquire("carol", busy.ID); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire: %v, want ErrClosed", err)
	}
	if _, err := s.Get("carol", busy.ID); !errors.Is(err, ErrClosed) {
		t.Errorf("Get: %v, want ErrClosed", err)
	}
	if err := s.Delete("carol", busy.ID); !errors.Is(err, ErrClosed) {
		t.Errorf("Delete: %v, want ErrClosed", err)
	}
	if l := s.List("alice"); l != nil {
		t.Errorf("List: %+v, want nil", l)
	}
	if s.Len() != 0 {
		t.Errorf("Len = %d, want 0", s.Len())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	s.Sweep()
	for i, b := range boxes {
		if n := b.closeCount(); n != 1 {
			t.Errorf("box %d closed %d times after a second Close, want 1", i, n)
		}
	}
}

func TestCommitTwice(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	slot, err := s.Reserve("alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slot.Commit(Info{}, newFakeBox()); err != nil {
		t.Fatal(err)
	}
	second := newFakeBox()
	if _, err := slot.Commit(Info{}, second); err == nil {
		t.Error("second Commit of one slot succeeded")
	}
	if n := second.closeCount(); n != 1 {
		t.Errorf("box of the refused Commit closed %d times, want 1", n)
	}
	slot.Cancel() // after Commit: must not free the committed session's slot
	if _, err := s.Reserve("alice", 1); !errors.Is(err, ErrLimit) {
		t.Errorf("Reserve: %v, want ErrLimit (Cancel after Commit freed a slot)", err)
	}
}

func TestCloseInParallel(t *testing.T) {
	// Each Close waits until every box's Close has started: Close would time out if
	// it closed them one by one.
	const n = 5
	s, _ := newTestStore(t, Options{})
	var started sync.WaitGroup
	started.Add(n)
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	var timedOut atomic.Bool
	for range n {
		_, b := create(t, s, "alice", Info{})
		b.onClose = func() {
			started.Done()
			select {
			case <-allStarted:
			case <-time.After(5 * time.Second):
				timedOut.Store(true)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if timedOut.Load() {
		t.Error("Close closed the boxes one by one")
	}
}

func TestSlowCloseDoesNotBlockStore(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	info, b := create(t, s, "alice", Info{})
	other, _ := create(t, s, "alice", Info{})
	unblock := make(chan struct{})
	inClose := make(chan struct{})
	b.onClose = func() { close(inClose); <-unblock }
	deleted := make(chan error)
	go func() { deleted <- s.Delete("alice", info.ID) }()
	<-inClose

	// While the box's Close hangs, the store serves everything else.
	if _, err := s.Get("alice", other.ID); err != nil {
		t.Errorf("Get during a slow Close: %v", err)
	}
	use(t, s, other.ID)
	slot, err := s.Reserve("bob", 1)
	if err != nil {
		t.Errorf("Reserve during a slow Close: %v", err)
	} else {
		slot.Cancel()
	}
	if l := s.List("alice"); len(l) != 1 {
		t.Errorf("List during a slow Close: %d sessions, want 1", len(l))
	}
	s.Sweep()
	close(unblock)
	if err := <-deleted; err != nil {
		t.Errorf("Delete: %v", err)
	}
}

func TestRun(t *testing.T) {
	// synctest: Run's ticker and the store's clock (time.Now) are the bubble's fake
	// time, and synctest.Test fails if any goroutine is left behind (a leaked
	// watcher or sweeper).
	synctest.Test(t, func(t *testing.T) {
		s, err := New[*fakeBox](Options{IdleTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		ran := make(chan struct{})
		go func() { s.Run(ctx); close(ran) }()

		slot, _ := s.Reserve("alice", 5)
		info, err := slot.Commit(Info{}, newFakeBox())
		if err != nil {
			t.Fatal(err)
		}
		slot, _ = s.Reserve("alice", 5)
		dies := newFakeBox()
		if _, err := slot.Commit(Info{}, dies); err != nil {
			t.Fatal(err)
		}
		_, live := create(t, s, "bob", Info{})
		dies.die(errors.New("oom"))
		synctest.Wait()
		if dies.closeCount() != 1 || s.Len() != 2 {
			t.Errorf("dead box: %d closes, %d live sessions; want 1 and 2", dies.closeCount(), s.Len())
		}

		time.Sleep(time.Minute + DefaultSweepEvery)
		if s.Len() != 0 {
			t.Errorf("Len = %d after the idle TTL and a sweep, want 0", s.Len())
		}
		// Not via Get, which would expire it on its own: the sweeper did.
		s.mu.Lock()
		_, swept := s.tombs[info.ID]
		s.mu.Unlock()
		if !swept || live.closeCount() != 1 {
			t.Errorf("sweeper did not end the idle sessions")
		}

		cancel()
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Error("Run did not return after ctx was cancelled")
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRunStopsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New[*fakeBox](Options{})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{})
		go func() { s.Run(context.Background()); close(ran) }()
		create(t, s, "alice", Info{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Error("Run did not return after Close")
		}
	})
}

func TestNewOptions(t *testing.T) {
	for _, opts := range []Options{
		{IdleTTL: -1}, {MaxLifetime: -1}, {MaxTotal: -1}, {SweepEvery: -1},
	} {
		if _, err := New[*fakeBox](opts); err == nil {
			t.Errorf("New(%+v) accepted a negative value", opts)
		}
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !validID(id) || len(id) != 28 || seen[id] {
			t.Fatalf("newID() = %q: not valid or repeated", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "s_", "s_ABCDEFGHIJKLMNOPQRSTUVWXYZ", "x_abcdefghijklmnopqrstuvwxyz", "s_abcdefghijklmnopqrstuvwx/z", "s_../../../../etc/passwd000"} {
		if validID(bad) {
			t.Errorf("validID(%q) = true", bad)
		}
	}
}

package session

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// endLog collects OnEnd calls.
type endLog struct {
	mu   sync.Mutex
	ends []End
}

func (l *endLog) add(e End) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends = append(l.ends, e)
}

func (l *endLog) get() []End {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ends)
}

func TestOnEndOncePerEnd(t *testing.T) {
	var log endLog
	dir := t.TempDir()
	s, clk := newTestStore(t, Options{IdleTTL: time.Minute, MaxLifetime: time.Hour, Dir: dir, OnEnd: log.add})
	deleted, _ := create(t, s, "alice", Info{Language: "python", Profile: "default"})
	idle, _ := create(t, s, "alice", Info{Language: "bash"})
	died, dieBox := create(t, s, "bob", Info{Language: "python"})
	kept, _ := create(t, s, "bob", Info{Language: "python"})

	if err := s.Delete("alice", deleted.ID); err != nil {
		t.Fatal(err)
	}
	dieBox.die(errors.New("killed"))
	waitFor(t, "the dead box's end", func() bool { return len(log.get()) == 2 })
	// Keep one session in use while the other idles out.
	clk.Advance(30 * time.Second)
	_, release, err := s.Acquire("bob", kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	release(true)
	clk.Advance(45 * time.Second)
	s.Sweep()
	s.Sweep() // nothing more ends
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := log.get()
	want := []struct {
		id     string
		cause  EndCause
		reason string
	}{
		{deleted.ID, EndDeleted, ""},
		{died.ID, EndLost, "the box died: killed"},
		{idle.ID, EndExpired, "expired after 1m0s idle"},
		{kept.ID, EndShutdown, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("%d ends, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Info.ID != w.id || g.Cause != w.cause || g.Reason != w.reason {
			t.Errorf("end %d = {%s %s %q}, want {%s %s %q}", i, g.Info.ID, g.Cause, g.Reason, w.id, w.cause, w.reason)
		}
	}
	if got[0].Info.Owner != "alice" || got[0].Info.Language != "python" || got[0].Info.Profile != "default" {
		t.Errorf("deleted session's info: %+v", got[0].Info)
	}
	if got[3].Info.Calls != 1 {
		t.Errorf("calls of the kept session: %d", got[3].Info.Calls)
	}

	// The next store reports the session Close kept as lost in a restart.
	var log2 endLog
	s2, _ := newTestStore(t, Options{Dir: dir, OnEnd: log2.add})
	_ = s2
	ends := log2.get()
	if len(ends) != 1 || ends[0].Info.ID != kept.ID || ends[0].Info.Owner != "bob" || ends[0].Cause != EndRestart || !strings.Contains(ends[0].Reason, "restarted") {
		t.Fatalf("restart ends: %+v", ends)
	}
}

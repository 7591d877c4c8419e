package session

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newDirStore(t *testing.T, dir string) *Store[*fakeBox] {
	t.Helper()
	s, err := New[*fakeBox](Options{Dir: dir, Now: newFakeClock().Now})
	if err != nil {
		t.Fatalf("New(Dir: %s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestRecordsSurviveCrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	s1 := newDirStore(t, dir)
	kept, _ := create(t, s1, "alice", Info{})
	deleted, _ := create(t, s1, "alice", Info{})
	if err := s1.Delete("alice", deleted.ID); err != nil {
		t.Fatal(err)
	}
	died, diedBox := create(t, s1, "alice", Info{})
	diedBox.die(errors.New("oom"))
	waitFor(t, "the dead box to be closed", func() bool { return diedBox.closeCount() == 1 })

	if names := dirNames(t, dir); len(names) != 1 || names[0] != kept.ID+".json" {
		t.Fatalf("records %v, want only %s.json (ended sessions leave none)", names, kept.ID)
	}
	data, err := os.ReadFile(filepath.Join(dir, kept.ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec["id"] != kept.ID || rec["owner"] != "alice" || rec["created_at"] != kept.CreatedAt.Format(time.RFC3339Nano) || len(rec) != 3 {
		t.Errorf("record = %s", data)
	}

	// A crash: s1 is never closed before the next New on its dir.
	s2 := newDirStore(t, dir)
	_, err = s2.Get("alice", kept.ID)
	wantLost(t, err, kept.ID, reasonRestart)
	_, _, err = s2.Acquire("alice", kept.ID)
	wantLost(t, err, kept.ID, reasonRestart)
	if _, err := s2.Get("mallory", kept.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner: %v, want ErrNotFound", err)
	}
	for _, id := range []string{deleted.ID, died.ID} {
		if _, err := s2.Get("alice", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("session ended before the crash: %v, want ErrNotFound", err)
		}
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("records left after New: %v", names)
	}
	if s2.Len() != 0 {
		t.Errorf("Len = %d after a restart, want 0", s2.Len())
	}
}

func TestCloseKeepsRecordsForTheNextStart(t *testing.T) {
	dir := t.TempDir()
	s := newDirStore(t, dir)
	info, _ := create(t, s, "alice", Info{})
	create(t, s, "bob", Info{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); len(names) != 2 {
		t.Errorf("records after Close: %v, want both kept", names)
	}
	s2 := newDirStore(t, dir)
	var lost *LostError
	if _, err := s2.Get("alice", info.ID); !errors.As(err, &lost) || lost.Reason != reasonRestart {
		t.Errorf("Get after a clean restart: %v, want lost with the restart reason", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("records left after the restart: %v", names)
	}
}

func TestMalformedRecords(t *testing.T) {
	good := record{ID: newID(), Owner: "alice", CreatedAt: newFakeClock().Now()}
	goodJSON, _ := json.Marshal(good)
	other := newID()
	tests := []struct {
		name     string
		file     string
		content  string
		wantKept bool // left alone (not a record) rather than removed
	}{
		{"bad json", newID() + ".json", "{", false},
		{"empty", newID() + ".json", "", false},
		{"id does not match the file name", other + ".json", strings.Replace(string(goodJSON), good.ID, newID(), 1), false},
		{"bad id", "notanid.json", `{"id":"notanid","owner":"alice"}`, false},
		{"no owner", other + ".json", `{"id":"` + other + `"}`, false},
		{"too large", other + ".json", `{"id":"` + other + `","owner":"` + strings.Repeat("a", maxRecordSize) + `"}`, false},
		{"not a record", "README", "hello", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, good.ID+".json"), goodJSON, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s := newDirStore(t, dir)
			_, err := s.Get("alice", good.ID)
			wantLost(t, err, good.ID, reasonRestart)
			if n := len(s.tombs); n != 1 {
				t.Errorf("%d tombstones, want 1 (the good record only)", n)
			}
			_, err = os.Lstat(filepath.Join(dir, tt.file))
			if kept := err == nil; kept != tt.wantKept {
				t.Errorf("%s kept = %v, want %v", tt.file, kept, tt.wantKept)
			}
		})
	}
}

func TestCommitRecordFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	s := newDirStore(t, dir)
	// Replace the dir by a file: every record write fails.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	slot, err := s.Reserve("alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	b := newFakeBox()
	if _, err := slot.Commit(Info{}, b); err == nil {
		t.Fatal("Commit succeeded without its record")
	}
	if n := b.closeCount(); n != 1 {
		t.Errorf("box closed %d times, want 1", n)
	}
	if s.Len() != 0 {
		t.Errorf("Len = %d, want 0", s.Len())
	}
	if slot, err := s.Reserve("alice", 1); err != nil {
		t.Errorf("Reserve after a failed Commit: %v (slot not freed)", err)
	} else {
		slot.Cancel()
	}
}

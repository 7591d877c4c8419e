//go:build unix

package session

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRecordsNoFollow(t *testing.T) {
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	valid := record{ID: newID(), Owner: "alice"}
	data, _ := json.Marshal(valid)
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"symlink to a valid record", func(t *testing.T, path string) {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, path string) {
			if err := os.Symlink(filepath.Join(outside, "nothing"), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo (would block a read)", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(target, data, 0o600); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, valid.ID+".json")
			tt.setup(t, path)
			s := newDirStore(t, dir)
			if n := len(s.tombs); n != 0 {
				t.Errorf("%d tombstones from a non-regular record, want 0", n)
			}
			if _, err := os.Lstat(path); err == nil {
				t.Errorf("non-regular record %s not removed", path)
			}
			if got, err := os.ReadFile(target); err != nil || string(got) != string(data) {
				t.Errorf("link target changed: %q, %v", got, err)
			}
		})
	}

	t.Run("write through a planted symlink", func(t *testing.T) {
		if err := os.WriteFile(target, data, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		id := newID()
		if err := os.Symlink(target, filepath.Join(dir, id+".json")); err != nil {
			t.Fatal(err)
		}
		if err := writeRecord(dir, record{ID: id, Owner: "mallory"}); err == nil {
			t.Error("writeRecord wrote over a symlink")
		}
		if got, _ := os.ReadFile(target); string(got) != string(data) {
			t.Errorf("link target changed: %q", got)
		}
	})
}

func TestDirChecks(t *testing.T) {
	t.Run("symlink refused", func(t *testing.T) {
		real := t.TempDir()
		link := filepath.Join(t.TempDir(), "sessions")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		if _, err := New[*fakeBox](Options{Dir: link}); err == nil {
			t.Error("New accepted a Dir that is a symlink")
		}
	})
	t.Run("file refused", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "sessions")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := New[*fakeBox](Options{Dir: file}); err == nil {
			t.Error("New accepted a Dir that is a file")
		}
	})
	t.Run("modes", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s := newDirStore(t, dir)
		info, _ := create(t, s, "alice", Info{})
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("dir mode %v, %v; want 0700", fi.Mode().Perm(), err)
		}
		if fi, err := os.Stat(filepath.Join(dir, info.ID+".json")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("record mode %v, %v; want 0600", fi.Mode().Perm(), err)
		}
	})
	t.Run("created 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "sessions")
		newDirStore(t, dir)
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("dir mode %v, %v; want 0700", fi.Mode().Perm(), err)
		}
	})
}

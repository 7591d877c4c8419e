package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// record is the file Options.Dir/<id>.json kept while a session lives. It holds no
// state of the session, only enough to tell its owner it is gone after a crash.
type record struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"created_at"`
}

const (
	recordExt = ".json"
	// maxRecordSize bounds what New reads from a record; real ones are ~150 bytes.
	maxRecordSize = 64 << 10
)

// prepareDir creates dir (0700) if needed and checks that it is a directory of its
// own, not a symbolic link to one: records are only ever opened by name inside it, so
// a link planted in place of dir would redirect every write and removal.
func prepareDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return errors.New("is a symbolic link")
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return restrictDir(dir, fi, log)
}

// writeRecord creates dir/<id>.json, 0600. O_EXCL and O_NOFOLLOW: it never writes
// through a file or link that is already there.
func writeRecord(dir string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	name := filepath.Join(dir, r.ID+recordExt)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return err
	}
	return nil
}

// removeRecord removes dir/<id>.json; a missing one is fine. os.Remove does not
// follow a link: it would remove the link itself.
func removeRecord(dir, id string) error {
	err := os.Remove(filepath.Join(dir, id+recordExt))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// loadRecords reads and removes every record in dir. A malformed record (not a
// regular file, unreadable, bad JSON, a bad id or no owner) is logged and removed,
// never fatal; files not named *.json are logged and left alone. Only an unreadable
// dir is an error.
func loadRecords(dir string, log *slog.Logger) ([]record, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var recs []record
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasSuffix(name, recordExt) {
			log.Warn("session dir: ignoring a file that is not a session record", "dir", dir, "name", name)
			continue
		}
		path := filepath.Join(dir, name)
		r, err := readRecord(path, ent)
		if err != nil {
			log.Warn("session dir: removing a malformed session record", "dir", dir, "name", name, "err", err)
		}
		if rerr := os.Remove(path); rerr != nil {
			log.Error("session dir: remove session record", "dir", dir, "name", name, "err", rerr)
		}
		if err == nil {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

func readRecord(path string, ent fs.DirEntry) (record, error) {
	var r record
	if !ent.Type().IsRegular() {
		return r, fmt.Errorf("not a regular file (%s)", ent.Type())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|oNoFollow|oNonBlock, 0)
	if err != nil {
		return r, err
	}
	defer f.Close()
	// Checked again on the open file: the entry may have been replaced since ReadDir.
	if fi, err := f.Stat(); err != nil {
		return r, err
	} else if !fi.Mode().IsRegular() {
		return r, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return r, err
	}
	if len(data) > maxRecordSize {
		return r, fmt.Errorf("over %d bytes", maxRecordSize)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	switch {
	case !validID(r.ID):
		return r, errors.New("bad session id")
	case r.ID+recordExt != ent.Name():
		return r, errors.New("session id does not match the file name")
	case r.Owner == "":
		return r, errors.New("no owner")
	}
	return r, nil
}

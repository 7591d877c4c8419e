package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, "sqlite"
)

// FileName is the store's file in its directory.
const FileName = "audit.db"

// schema creates the store. records holds each record's canonical body and hash
// (what the chain is made of) and, beside them, copies of the fields queries
// filter on; Verify checks that the copies agree with the body. The triggers stop
// accidental edits (moat never updates a record and deletes only in Prune); they
// are no defence against someone who can write the file, which is what the hash
// chain is for.
const schema = `
CREATE TABLE IF NOT EXISTS records (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	time_ns    INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	principal  TEXT NOT NULL,
	session    TEXT NOT NULL,
	status     TEXT NOT NULL,
	violations INTEGER NOT NULL,
	body       TEXT NOT NULL,
	hash       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_time ON records(time_ns);
DROP INDEX IF EXISTS records_principal;
CREATE INDEX IF NOT EXISTS records_principal_seq ON records(principal, seq, time_ns);
CREATE INDEX IF NOT EXISTS records_session ON records(session) WHERE session != '';
CREATE TABLE IF NOT EXISTS checkpoint (
	id        INTEGER PRIMARY KEY CHECK (id = 1),
	first_seq INTEGER NOT NULL,
	prev_hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', '1'), ('pruning', '0');
CREATE TRIGGER IF NOT EXISTS records_append_only BEFORE UPDATE ON records
BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;
CREATE TRIGGER IF NOT EXISTS records_prune_only BEFORE DELETE ON records
WHEN (SELECT value FROM meta WHERE key = 'pruning') != '1'
BEGIN SELECT RAISE(ABORT, 'audit records are append-only (only retention removes them)'); END;
PRAGMA user_version = 1;
`

// schemaVersion is the user_version the schema sets; a store at it is not
// written to when opened (a moat run opens the store once per execution).
const schemaVersion = 1

// Store is the SQLite file of the audit chain. Its methods are safe for concurrent
// use, and several processes (moat serve and moat run on the same data directory)
// may append to one file: each append is one immediate transaction that reads the
// chain's head and adds to it.
type Store struct {
	db   *sql.DB
	path string
}

// OpenStore opens (creating if needed) the store at path, in WAL mode. The file
// and its directory are created private (0600 and 0700).
func OpenStore(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit store: %w", err)
	}
	// Create the file private before SQLite does (it would follow the umask).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit store: %w", err)
	}
	f.Close()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("audit store %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	db.SetConnMaxIdleTime(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("audit store %s: %w", path, err)
	}
	if version != schemaVersion {
		if _, err := db.ExecContext(ctx, schema); err != nil {
			db.Close()
			return nil, fmt.Errorf("audit store %s: %w", path, err)
		}
	}
	return &Store{db: db, path: path}, nil
}

// Path returns the store's file.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Append adds recs to the chain in one transaction, setting each one's Seq,
// PrevHash and Hash. Either every record is added or none is.
func (s *Store) Append(ctx context.Context, recs []*Record) error {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE (_txlock): one appender at a time
	if err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	defer tx.Rollback()
	if err := appendTx(ctx, tx, recs); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	return nil
}

// appendTx adds recs to the chain within tx.
func appendTx(ctx context.Context, tx *sql.Tx, recs []*Record) error {
	seq, prev, err := head(ctx, tx)
	if err != nil {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO records(seq, time_ns, kind, principal, session, status, violations, body, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	defer stmt.Close()
	for _, r := range recs {
		seq++
		r.Seq, r.PrevHash = seq, prev
		r.Time = r.Time.UTC()
		body, err := r.Body()
		if err != nil {
			return err
		}
		r.Hash = HashBody(body)
		if _, err := stmt.ExecContext(ctx, r.Seq, r.Time.UnixNano(), r.Kind, r.Principal, r.Session, r.Status, len(r.Violations), string(body), r.Hash); err != nil {
			return fmt.Errorf("audit append: %w", err)
		}
		prev = r.Hash
	}
	return nil
}

// head returns the last record's seq and hash: of the newest record, else of the
// checkpoint left by pruning, else 0 and GenesisHash.
func head(ctx context.Context, tx *sql.Tx) (int64, string, error) {
	var seq int64
	var hash string
	err := tx.QueryRowContext(ctx, `SELECT seq, hash FROM records ORDER BY seq DESC LIMIT 1`).Scan(&seq, &hash)
	if err == nil {
		return seq, hash, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, "", fmt.Errorf("audit head: %w", err)
	}
	cp, err := checkpoint(ctx, tx)
	if err != nil {
		return 0, "", err
	}
	return cp.firstSeq - 1, cp.prevHash, nil
}

type checkpointRow struct {
	firstSeq int64
	prevHash string
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkpoint returns where the kept chain starts: record 1 after GenesisHash when
// nothing was ever pruned.
func checkpoint(ctx context.Context, q querier) (checkpointRow, error) {
	cp := checkpointRow{firstSeq: 1, prevHash: GenesisHash}
	err := q.QueryRowContext(ctx, `SELECT first_seq, prev_hash FROM checkpoint WHERE id = 1`).Scan(&cp.firstSeq, &cp.prevHash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return cp, fmt.Errorf("audit checkpoint: %w", err)
	}
	return cp, nil
}

// Retention bounds what the store keeps: records older than MaxAge, and the
// oldest beyond MaxRecords, are removed by Prune. Zero fields do not bound.
type Retention struct {
	MaxAge     time.Duration
	MaxRecords int64
}

// Prune removes the records that ret says are too old or too many and returns how
// many it removed. The chain stays verifiable: in the same transaction it moves
// the checkpoint to the first record kept (its seq and the hash of the record
// before it) and appends a KindPrune record whose KeptFrom names it, so Verify can
// tell retention from deletion.
func (s *Store) Prune(ctx context.Context, ret Retention, now time.Time) (int64, error) {
	if ret.MaxAge <= 0 && ret.MaxRecords <= 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	defer tx.Rollback()
	var lo, hi sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MIN(seq), MAX(seq) FROM records`).Scan(&lo, &hi); err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	if !hi.Valid {
		return 0, nil
	}
	// keep is the first seq to keep; the newest record is always kept.
	keep := lo.Int64
	var why []string
	if ret.MaxRecords > 0 && hi.Int64-lo.Int64+1 > ret.MaxRecords {
		keep = max(keep, hi.Int64-ret.MaxRecords+1)
		why = append(why, fmt.Sprintf("more than %d records", ret.MaxRecords))
	}
	if ret.MaxAge > 0 {
		var old sql.NullInt64
		cut := now.Add(-ret.MaxAge).UnixNano()
		if err := tx.QueryRowContext(ctx, `SELECT MAX(seq) FROM records WHERE time_ns < ?`, cut).Scan(&old); err != nil {
			return 0, fmt.Errorf("audit prune: %w", err)
		}
		if old.Valid && old.Int64+1 > keep {
			keep = min(old.Int64+1, hi.Int64)
			why = append(why, "older than "+ret.MaxAge.String())
		}
	}
	if keep <= lo.Int64 {
		return 0, nil
	}
	var prev string
	if err := tx.QueryRowContext(ctx, `SELECT hash FROM records WHERE seq = ?`, keep-1).Scan(&prev); err != nil {
		return 0, fmt.Errorf("audit prune: the record before %d: %w", keep, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = '1' WHERE key = 'pruning'`); err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM records WHERE seq < ?`, keep)
	if err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	n, _ := res.RowsAffected()
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET value = '0' WHERE key = 'pruning'`); err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO checkpoint(id, first_seq, prev_hash) VALUES (1, ?, ?)`, keep, prev); err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	rec := &Record{Time: now, Kind: KindPrune, FrontEnd: FrontEndServer, KeptFrom: keep,
		Reason: fmt.Sprintf("retention removed records %d to %d (%s)", lo.Int64, keep-1, strings.Join(why, ", "))}
	if err := appendTx(ctx, tx, []*Record{rec}); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("audit prune: %w", err)
	}
	return n, nil
}

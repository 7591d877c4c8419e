package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// Report is what Verify found.
type Report struct {
	// Records is how many records were checked; First and Last their seq range.
	Records     int64
	First, Last int64
	// Head is the hash of the last record: keep it elsewhere to detect later
	// truncation or a rewritten chain (see the package doc).
	Head string
	// Break is the first broken link; nil when the chain is intact.
	Break *Break
}

// Break is a broken link of the chain.
type Break struct {
	// Seq is the first record affected.
	Seq int64
	// Problem says what is wrong, in words: "record 42 was edited: ...".
	Problem string
}

func (b *Break) Error() string { return b.Problem }

// Verify checks the whole chain, oldest first, and reports the first broken link:
// a record whose hash does not match its body (edited), a gap in the sequence
// (deleted), a record whose prev_hash is not its predecessor's hash (replaced,
// reordered), a body that names another seq (moved), an indexed column that
// disagrees with the body (edited to mislead queries), records missing before the
// checkpoint without a prune record that says so, or records missing at the end
// (the table's sequence counter is ahead of the last record). It reads one
// consistent snapshot; appends may go on meanwhile.
func (s *Store) Verify(ctx context.Context) (Report, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Report{}, fmt.Errorf("audit verify: %w", err)
	}
	defer tx.Rollback()
	cp, err := checkpoint(ctx, tx)
	if err != nil {
		return Report{}, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, time_ns, kind, principal, session, status, violations, body, hash FROM records ORDER BY seq`)
	if err != nil {
		return Report{}, fmt.Errorf("audit verify: %w", err)
	}
	defer rows.Close()
	rep := Report{}
	want, prev := cp.firstSeq, cp.prevHash
	var lastPrune int64
	for rows.Next() {
		var c struct {
			seq, timeNS          int64
			kind, princ, session string
			status               string
			violations           int
			body, hash           string
		}
		if err := rows.Scan(&c.seq, &c.timeNS, &c.kind, &c.princ, &c.session, &c.status, &c.violations, &c.body, &c.hash); err != nil {
			return rep, fmt.Errorf("audit verify: %w", err)
		}
		brk := func(format string, args ...any) (Report, error) {
			rep.Break = &Break{Seq: c.seq, Problem: fmt.Sprintf(format, args...)}
			return rep, nil
		}
		if c.seq != want {
			if want == cp.firstSeq && cp.firstSeq == 1 {
				return brk("records 1 to %d are missing: deleted, and no prune record says retention removed them", c.seq-1)
			}
			return brk("records %d to %d are missing (deleted): record %d follows record %d", want, c.seq-1, c.seq, want-1)
		}
		if HashBody([]byte(c.body)) != c.hash {
			return brk("record %d was edited: its hash does not match its contents", c.seq)
		}
		var r Record
		if err := json.Unmarshal([]byte(c.body), (*plain)(&r)); err != nil {
			return brk("record %d is not a valid record: %v", c.seq, err)
		}
		if r.Seq != c.seq {
			return brk("record %d holds the contents of record %d (moved or reordered)", c.seq, r.Seq)
		}
		if r.PrevHash != prev {
			if c.seq == cp.firstSeq && cp.firstSeq > 1 {
				return brk("record %d does not follow the retention checkpoint: its prev_hash is not the hash the checkpoint kept (records replaced or the checkpoint edited)", c.seq)
			}
			return brk("record %d does not follow record %d: its prev_hash is not that record's hash (a record was replaced, reordered or re-hashed)", c.seq, c.seq-1)
		}
		for _, col := range []struct {
			name      string
			got, want any
		}{
			{"time_ns", c.timeNS, r.Time.UnixNano()}, {"kind", c.kind, r.Kind}, {"principal", c.princ, r.Principal},
			{"session", c.session, r.Session}, {"status", c.status, r.Status}, {"violations", c.violations, len(r.Violations)},
		} {
			if col.got != col.want {
				return brk("record %d was edited: its %s column says %v, its hashed contents %v", c.seq, col.name, col.got, col.want)
			}
		}
		if r.Kind == KindPrune {
			lastPrune = r.KeptFrom
		}
		if rep.Records == 0 {
			rep.First = c.seq
		}
		rep.Records++
		rep.Last, rep.Head = c.seq, c.hash
		want, prev = c.seq+1, c.hash
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("audit verify: %w", err)
	}
	if cp.firstSeq > 1 && lastPrune != cp.firstSeq {
		rep.Break = &Break{Seq: cp.firstSeq, Problem: fmt.Sprintf("records before %d are gone, and the last prune record does not say retention removed them (the checkpoint was edited or records deleted)", cp.firstSeq)}
		return rep, nil
	}
	var top sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'records'`).Scan(&top)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return rep, fmt.Errorf("audit verify: %w", err)
	}
	if top.Valid && top.Int64 > rep.Last {
		rep.Break = &Break{Seq: rep.Last + 1, Problem: fmt.Sprintf("records %d to %d at the end are missing (deleted): the store had numbered up to %d", rep.Last+1, top.Int64, top.Int64)}
	}
	return rep, nil
}

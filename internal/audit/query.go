package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Query bounds.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Filter selects records. Zero fields do not filter.
type Filter struct {
	// Since (inclusive) and Until (exclusive) bound the record's Time.
	Since, Until time.Time
	Principal    string
	Session      string
	Status       string
	Kind         string
	// Violations keeps only records with policy violations.
	Violations bool
	// Before keeps only records with Seq < Before: the Next of the previous page.
	Before int64
	// Limit is the page size: DefaultLimit when 0, at most MaxLimit.
	Limit int
}

// Page is one page of records, newest first.
type Page struct {
	Records []Record `json:"records"`
	// Next is the Before of the next (older) page; 0 when there is none.
	Next int64 `json:"next,omitempty"`
}

// Query returns the newest records that f selects, up to f.Limit, and where the
// next page starts.
func (s *Store) Query(ctx context.Context, f Filter) (Page, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	var where []string
	var args []any
	add := func(cond string, arg any) {
		where = append(where, cond)
		args = append(args, arg)
	}
	if !f.Since.IsZero() {
		add("time_ns >= ?", f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		add("time_ns < ?", f.Until.UnixNano())
	}
	if f.Principal != "" {
		add("principal = ?", f.Principal)
	}
	if f.Session != "" {
		add("session = ?", f.Session)
	}
	if f.Status != "" {
		add("status = ?", f.Status)
	}
	if f.Kind != "" {
		add("kind = ?", f.Kind)
	}
	if f.Violations {
		where = append(where, "violations > 0")
	}
	if f.Before > 0 {
		add("seq < ?", f.Before)
	}
	// First the seqs, from the indexes, then the bodies of one page: a sort of
	// thousands of matches then moves integers, not records.
	q := "SELECT seq FROM records"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY seq DESC LIMIT ?"
	args = append(args, limit+1)
	seqs, err := s.seqs(ctx, q, args...)
	if err != nil {
		return Page{}, err
	}
	p := Page{Records: []Record{}}
	if len(seqs) > limit {
		seqs = seqs[:limit]
		p.Next = seqs[limit-1]
	}
	if len(seqs) == 0 {
		return p, nil
	}
	in := make([]any, len(seqs))
	for i, q := range seqs {
		in[i] = q
	}
	marks := strings.TrimSuffix(strings.Repeat("?,", len(seqs)), ",")
	rows, err := s.db.QueryContext(ctx, "SELECT seq, body, hash FROM records WHERE seq IN ("+marks+") ORDER BY seq DESC", in...)
	if err != nil {
		return Page{}, fmt.Errorf("audit query: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var body, hash string
		if err := rows.Scan(&seq, &body, &hash); err != nil {
			return Page{}, fmt.Errorf("audit query: %w", err)
		}
		var r Record
		if err := json.Unmarshal([]byte(body), (*plain)(&r)); err != nil {
			return Page{}, fmt.Errorf("audit query: record %d: %w (moat audit verify checks the chain)", seq, err)
		}
		r.Hash = hash
		p.Records = append(p.Records, r)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("audit query: %w", err)
	}
	return p, nil
}

// seqs runs a query of seqs.
func (s *Store) seqs(ctx context.Context, q string, args ...any) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("audit query: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("audit query: %w", err)
		}
		out = append(out, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit query: %w", err)
	}
	return out, nil
}

// HasSessionEnd reports whether the store holds a record of session id's end
// (destroyed, expired or lost).
func (s *Store) HasSessionEnd(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM records WHERE session = ? AND kind IN (?, ?, ?) AND status != ?`,
		id, KindSessionDestroy, KindSessionExpire, KindSessionLost, StatusRejected).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("audit query: %w", err)
	}
	return n > 0, nil
}

package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func openTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := OpenStore(filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fill appends n records, one a minute from t0, alternating two principals.
func fill(t *testing.T, s *Store, n int) {
	t.Helper()
	var recs []*Record
	for i := range n {
		exit := i % 3
		r := &Record{
			Time: t0.Add(time.Duration(i) * time.Minute), Kind: KindExecute,
			Principal: []string{"alice", "bob"}[i%2], FrontEnd: FrontEndAPI, Language: "python",
			Status: "ok", ExitCode: &exit, RequestID: fmt.Sprintf("req%d", i),
		}
		if i%10 == 9 {
			r.Status = "blocked"
			r.Violations = []Violation{{Rule: "python.import", Detail: "import of 'socket' is blocked"}}
		}
		recs = append(recs, r)
	}
	if err := s.Append(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

func verify(t *testing.T, s *Store) Report {
	t.Helper()
	rep, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func exec(t *testing.T, s *Store, q string, args ...any) {
	t.Helper()
	if _, err := s.db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestChainIntact(t *testing.T) {
	s := openTestStore(t)
	fill(t, s, 20)
	rep := verify(t, s)
	if rep.Break != nil || rep.Records != 20 || rep.First != 1 || rep.Last != 20 || len(rep.Head) != 64 {
		t.Fatalf("report = %+v", rep)
	}
	// The stored body is the canonical encoding, and its hash is the column.
	var body, hash string
	if err := s.db.QueryRow(`SELECT body, hash FROM records WHERE seq = 1`).Scan(&body, &hash); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, `{"seq":1,"time":"2026-11-23T10:00:00Z","kind":"execute",`) ||
		!strings.HasSuffix(body, `"prev_hash":"`+GenesisHash+`"}`) || HashBody([]byte(body)) != hash {
		t.Fatalf("record 1 body %s hash %s", body, hash)
	}
}

func TestTriggersRefuseEdits(t *testing.T) {
	s := openTestStore(t)
	fill(t, s, 3)
	for _, q := range []string{`UPDATE records SET principal = 'mallory' WHERE seq = 2`, `DELETE FROM records WHERE seq = 2`} {
		if _, err := s.db.Exec(q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want refused", q, err)
		}
	}
}

// tamper drops the triggers, as someone editing the file by hand would.
func tamper(t *testing.T, s *Store) {
	exec(t, s, `DROP TRIGGER records_append_only`)
	exec(t, s, `DROP TRIGGER records_prune_only`)
}

func TestVerifyFindsTheFirstBrokenLink(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, s *Store)
		seq  int64
		want string
	}{
		{"body edited", func(t *testing.T, s *Store) {
			exec(t, s, `UPDATE records SET body = replace(body, '"principal":"alice"', '"principal":"carol"') WHERE seq = 7`)
		}, 7, "record 7 was edited: its hash does not match"},
		{"body edited and re-hashed", func(t *testing.T, s *Store) {
			var body string
			_ = s.db.QueryRow(`SELECT body FROM records WHERE seq = 7`).Scan(&body)
			body = strings.Replace(body, `"status":"ok"`, `"status":"error"`, 1)
			exec(t, s, `UPDATE records SET body = ?, hash = ?, status = 'error' WHERE seq = 7`, body, HashBody([]byte(body)))
		}, 8, "record 8 does not follow record 7"},
		{"indexed column edited", func(t *testing.T, s *Store) {
			exec(t, s, `UPDATE records SET principal = 'bob' WHERE seq = 5`)
		}, 5, "its principal column says bob"},
		{"row deleted", func(t *testing.T, s *Store) { exec(t, s, `DELETE FROM records WHERE seq = 12`) }, 13, "records 12 to 12 are missing"},
		{"first rows deleted", func(t *testing.T, s *Store) { exec(t, s, `DELETE FROM records WHERE seq <= 2`) }, 3, "records 1 to 2 are missing"},
		{"newest rows deleted", func(t *testing.T, s *Store) { exec(t, s, `DELETE FROM records WHERE seq >= 19`) }, 19, "records 19 to 20 at the end are missing"},
		{"rows swapped", func(t *testing.T, s *Store) {
			exec(t, s, `UPDATE records SET seq = -1 WHERE seq = 3`)
			exec(t, s, `UPDATE records SET seq = 3 WHERE seq = 4`)
			exec(t, s, `UPDATE records SET seq = 4 WHERE seq = -1`)
		}, 3, "record 3 holds the contents of record 4"},
		{"checkpoint forged to hide deleted rows", func(t *testing.T, s *Store) {
			var h string
			_ = s.db.QueryRow(`SELECT hash FROM records WHERE seq = 4`).Scan(&h)
			exec(t, s, `DELETE FROM records WHERE seq <= 4`)
			exec(t, s, `INSERT INTO checkpoint(id, first_seq, prev_hash) VALUES (1, 5, ?)`, h)
		}, 5, "does not say retention removed them"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t)
			fill(t, s, 20)
			tamper(t, s)
			c.edit(t, s)
			rep := verify(t, s)
			if rep.Break == nil || rep.Break.Seq != c.seq || !strings.Contains(rep.Break.Problem, c.want) {
				t.Fatalf("break = %+v, want at %d: %q", rep.Break, c.seq, c.want)
			}
		})
	}
}

func TestPruneKeepsTheChainVerifiable(t *testing.T) {
	s := openTestStore(t)
	fill(t, s, 30)
	ctx := context.Background()
	n, err := s.Prune(ctx, Retention{MaxRecords: 10}, t0.Add(time.Hour))
	if err != nil || n != 20 {
		t.Fatalf("prune by count = %d, %v; want 20 removed", n, err)
	}
	rep := verify(t, s)
	if rep.Break != nil || rep.First != 21 || rep.Last != 31 {
		t.Fatalf("after prune: %+v", rep)
	}
	p, err := s.Query(ctx, Filter{Kind: KindPrune})
	if err != nil || len(p.Records) != 1 || p.Records[0].KeptFrom != 21 || !strings.Contains(p.Records[0].Reason, "records 1 to 20") {
		t.Fatalf("prune record: %+v %v", p, err)
	}
	// By age: records 21..29 are more than 30 minutes older than now.
	n, err = s.Prune(ctx, Retention{MaxAge: 30 * time.Minute}, t0.Add(59*time.Minute))
	if err != nil || n != 9 {
		t.Fatalf("prune by age = %d, %v; want 9", n, err)
	}
	if rep := verify(t, s); rep.Break != nil || rep.First != 30 {
		t.Fatalf("after age prune: %+v", rep)
	}
	// Appending goes on from the head.
	fill(t, s, 2)
	if rep := verify(t, s); rep.Break != nil || rep.Last != 34 {
		t.Fatalf("after appending: %+v", rep)
	}
	// Deleting the first kept record is still caught.
	tamper(t, s)
	exec(t, s, `DELETE FROM records WHERE seq = 30`)
	if rep := verify(t, s); rep.Break == nil || rep.Break.Seq != 31 {
		t.Fatalf("deleted first kept record: %+v", rep.Break)
	}
}

func TestQueryFiltersAndPages(t *testing.T) {
	s := openTestStore(t)
	fill(t, s, 50)
	ctx := context.Background()
	cases := []struct {
		name  string
		f     Filter
		count int
		check func(r Record) bool
	}{
		{"all", Filter{Limit: 1000}, 50, func(Record) bool { return true }},
		{"principal", Filter{Principal: "alice", Limit: 1000}, 25, func(r Record) bool { return r.Principal == "alice" }},
		{"since", Filter{Since: t0.Add(40 * time.Minute), Limit: 1000}, 10, func(r Record) bool { return !r.Time.Before(t0.Add(40 * time.Minute)) }},
		{"until", Filter{Until: t0.Add(5 * time.Minute), Limit: 1000}, 5, func(r Record) bool { return r.Time.Before(t0.Add(5 * time.Minute)) }},
		{"status", Filter{Status: "blocked", Limit: 1000}, 5, func(r Record) bool { return r.Status == "blocked" }},
		{"violations", Filter{Violations: true, Limit: 1000}, 5, func(r Record) bool { return len(r.Violations) == 1 }},
		{"principal and time", Filter{Principal: "bob", Since: t0.Add(10 * time.Minute), Until: t0.Add(20 * time.Minute)}, 5, func(r Record) bool { return r.Principal == "bob" }},
		{"nothing", Filter{Session: "s_none"}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := s.Query(ctx, c.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Records) != c.count || p.Next != 0 {
				t.Fatalf("%d records, next %d; want %d, 0", len(p.Records), p.Next, c.count)
			}
			for i, r := range p.Records {
				if !c.check(r) || len(r.Hash) != 64 || (i > 0 && r.Seq >= p.Records[i-1].Seq) {
					t.Fatalf("record %+v", r)
				}
			}
		})
	}
	// Paging: 50 records in pages of 20, newest first, each record once.
	seen := map[int64]bool{}
	var before int64
	for page := 0; ; page++ {
		p, err := s.Query(ctx, Filter{Limit: 20, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Records {
			if seen[r.Seq] {
				t.Fatalf("record %d twice", r.Seq)
			}
			seen[r.Seq] = true
		}
		if p.Next == 0 {
			if page != 2 || len(p.Records) != 10 {
				t.Fatalf("last page %d has %d records", page, len(p.Records))
			}
			break
		}
		before = p.Next
	}
	if len(seen) != 50 {
		t.Fatalf("paging saw %d records", len(seen))
	}
}

func TestConcurrentStoresShareOneChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	var wg sync.WaitGroup
	for w := range 4 {
		s, err := OpenStore(path) // as separate processes would
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Go(func() {
			for i := range 25 {
				r := &Record{Time: time.Now(), Kind: KindExecute, Principal: fmt.Sprint("w", w), Status: "ok", Reason: fmt.Sprint(i)}
				if err := s.Append(context.Background(), []*Record{r}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s, _ := OpenStore(path)
	defer s.Close()
	if rep := verify(t, s); rep.Break != nil || rep.Records != 100 {
		t.Fatalf("report %+v", rep)
	}
}

func TestLineIsCheckable(t *testing.T) {
	r := &Record{Seq: 3, Time: t0, Kind: KindAuthFailure, Reason: "unauthenticated: <wrong> & token", PrevHash: GenesisHash}
	body, err := r.Body()
	if err != nil {
		t.Fatal(err)
	}
	h := HashBody(body)
	line := Line(body, h)
	// A SIEM's check: strip the hash field, hash the rest.
	i := bytes.LastIndex(line, []byte(`,"hash":"`))
	if got := HashBody(append(append([]byte(nil), line[:i]...), '}')); got != h {
		t.Fatalf("line %s does not re-hash", line)
	}
	var back Record
	if err := json.Unmarshal(line, &back); err != nil || back.Hash != h || back.Reason != r.Reason || !back.Time.Equal(t0) {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	r.Hash = h
	var enc bytes.Buffer
	e := json.NewEncoder(&enc)
	e.SetEscapeHTML(false) // as the API writes
	_ = e.Encode(r)
	if !bytes.Equal(enc.Bytes(), line) {
		t.Fatalf("MarshalJSON %s != Line %s", enc.Bytes(), line)
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"2026-11-23T10:00:00Z", time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)},
		{"2026-11-20", time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)},
		{"90m", now.Add(-90 * time.Minute)},
		{"7d", now.Add(-7 * 24 * time.Hour)},
	} {
		got, err := ParseTime(c.in, now)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "3x", "-2d"} {
		if _, err := ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q) succeeded", bad)
		}
	}
}

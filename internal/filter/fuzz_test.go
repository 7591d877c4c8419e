package filter

import (
	"bytes"
	"strings"
	"testing"
)

// fuzzSecrets are exact secrets of the fuzzed redactors. None shares 8 bytes with a
// marker, so that output containing one is a leak.
var fuzzSecrets = []string{"Zq8!vR2#mLz5", "hunter2hunter2", "aaaaaaaa"}

// fuzzRedactors are the configurations FuzzStreamEqualsRedact picks from: the
// production geometry, and tiny frames with every rule, custom rules with
// assertions and the secrets, so that short inputs cross many frame boundaries.
var fuzzRedactors = func() []*Redactor {
	var custom []Rule
	for _, c := range [][2]string{
		{"word_blob", `\bblob[0-9a-f]+\b`},
		{"line_key", `(?m)^key=(?P<secret>\S+)$`},
		{"not_word", `\Bzz+`},
	} {
		r, err := NewRule(c[0], c[1], 32)
		if err != nil {
			panic(err)
		}
		custom = append(custom, r)
	}
	all := append(append(DefaultRules(), OptInRules()...), custom...)
	return []*Redactor{
		New(DefaultRules(), fuzzSecrets),
		newRedactor(all, fuzzSecrets, 16, 16),
		newRedactor(all, fuzzSecrets, 64, 40),
		newRedactor(all, fuzzSecrets, 1, 1),
		newRedactor(all, fuzzSecrets, 300, 100),
		New(all, fuzzSecrets),
	}
}()

// FuzzStreamEqualsRedact checks that a Stream fed data in the chunks described by
// chunks (each byte a size; 0 is an empty write; 0xF0 and up are large) writes what
// Redact returns for data, with the same count, under configuration mode.
func FuzzStreamEqualsRedact(f *testing.F) {
	for i, line := range corpusLines() {
		f.Add([]byte(line), []byte{byte(i), 1, 7}, uint8(i))
	}
	f.Add([]byte(corpus()), []byte{1}, uint8(0))
	f.Add([]byte(corpus()), []byte{3, 0, 200, 0xF3}, uint8(2))
	f.Fuzz(func(t *testing.T, data, chunks []byte, mode uint8) {
		r := fuzzRedactors[int(mode)%len(fuzzRedactors)]
		// Keep executions fast: a frame costs tens of microseconds however small.
		if limit := min(max(256*r.frameSize(), 2<<10), 64<<10); len(data) > limit {
			data = data[:limit]
		}
		want, wantN := r.Redact(string(data))

		var buf bytes.Buffer
		s := r.Stream(&buf)
		rest := data
		for k := 0; len(rest) > 0; k++ {
			n := 1
			if len(chunks) > 0 {
				switch c := chunks[k%len(chunks)]; {
				case c == 0:
					s.Write(nil)
				case c >= 0xF0:
					n = int(c-0xEF) * 997
				default:
					n = int(c)
				}
			}
			n = min(n, len(rest))
			if w, err := s.Write(rest[:n]); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			if len(s.buf) >= r.frameSize() {
				t.Fatalf("stream holds %d bytes, frame is %d", len(s.buf), r.frameSize())
			}
			rest = rest[n:]
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := buf.String(); got != want || s.Count() != wantN {
			t.Fatalf("mode %d: stream wrote %d markers\n%q\nRedact %d\n%q", mode, s.Count(), got, wantN, want)
		}
		if wantN == 0 && want != string(data) {
			t.Fatalf("no marker but output changed")
		}
		if int(mode)%len(fuzzRedactors) == 0 {
			for _, sec := range fuzzSecrets {
				if strings.Contains(want, sec) {
					t.Fatalf("output leaks secret %q: %q", sec, want)
				}
			}
		}
	})
}

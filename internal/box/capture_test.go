package box

import (
	"bytes"
	"strings"
	"testing"
)

func TestCapture(t *testing.T) {
	tests := []struct {
		name      string
		limit     int64
		writes    []string
		want      string // exact output when not truncated
		truncated bool
		head      string
		tail      string
	}{
		{name: "under the cap", limit: 16, writes: []string{"hello ", "world"}, want: "hello world"},
		{name: "exactly the cap", limit: 4, writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "over the cap keeps head and tail", limit: 8, writes: []string{"0123", "4567", "89ab", "cdef"}, truncated: true, head: "0123", tail: "cdef"},
		{name: "one huge write", limit: 6, writes: []string{strings.Repeat("x", 100) + "END"}, truncated: true, head: "xxx", tail: "END"},
		{name: "many small writes wrap the ring", limit: 6, writes: strings.Split("abcdefghijklmnopqrstuvwxyz", ""), truncated: true, head: "abc", tail: "xyz"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCapture(tc.limit, nil)
			total := 0
			for _, w := range tc.writes {
				c.Write([]byte(w))
				total += len(w)
			}
			if c.Total() != int64(total) {
				t.Fatalf("Total = %d, want %d", c.Total(), total)
			}
			if c.Truncated() != tc.truncated {
				t.Fatalf("Truncated = %v, want %v", c.Truncated(), tc.truncated)
			}
			got := c.String()
			if !tc.truncated {
				if got != tc.want {
					t.Fatalf("String = %q, want %q", got, tc.want)
				}
				return
			}
			if !strings.HasPrefix(got, tc.head+"\n[moat: ") || !strings.HasSuffix(got, "]\n"+tc.tail) {
				t.Fatalf("String = %q, want head %q and tail %q around an elision marker", got, tc.head, tc.tail)
			}
			if !strings.Contains(got, "bytes elided") {
				t.Fatalf("String = %q lacks the elision count", got)
			}
		})
	}
}

func TestCaptureLiveStopsAtCap(t *testing.T) {
	var live bytes.Buffer
	c := NewCapture(5, &live)
	c.Write([]byte("abc"))
	c.Write([]byte("defgh"))
	c.Write([]byte("ijk"))
	if live.String() != "abcde" {
		t.Fatalf("live = %q, want the first 5 bytes", live.String())
	}
}

func TestCaptureUTF8Boundaries(t *testing.T) {
	c := NewCapture(6, nil)
	c.Write([]byte(strings.Repeat("é", 20))) // 2 bytes each
	got := c.String()
	for _, part := range []string{strings.SplitN(got, "\n", 2)[0], got[strings.LastIndex(got, "\n")+1:]} {
		if strings.ContainsRune(part, '\uFFFD') || !strings.HasPrefix(part, "é") {
			t.Fatalf("cut inside a character: %q", got)
		}
	}
}

func TestFlooded(t *testing.T) {
	if Flooded(10*FloodFactor, 10) {
		t.Fatal("flooded at exactly FloodFactor times the cap")
	}
	if !Flooded(10*FloodFactor+1, 10) {
		t.Fatal("not flooded past FloodFactor times the cap")
	}
}

func BenchmarkCaptureWrite(b *testing.B) {
	c := NewCapture(1<<20, nil)
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		c.Write(chunk)
	}
}

package box

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestParseSessionLineDone(t *testing.T) {
	for _, tc := range []struct {
		line string
		id   int64
		exit int
		ok   bool
	}{
		{`{"kind":"done","id":42,"exit":0}`, 42, 0, true},
		{`{"kind":"done","id":0,"exit":255}`, 0, 255, true},
		{" {\"kind\":\"done\",\"id\":7,\"exit\":130}\r", 7, 130, true},
		{`{"kind":"done","id":9223372036854775807,"exit":1}`, math.MaxInt64, 1, true},
		{`{"kind":"done","id":9223372036854775808,"exit":1}`, 0, 0, false},
		{`{"kind":"done","id":1,"exit":256}`, 0, 0, false},
		{`{"kind":"done","id":-1,"exit":0}`, 0, 0, false},
		{`{"kind":"done","id":1,"exit":-1}`, 0, 0, false},
		{`{"kind":"done","id":1.5,"exit":0}`, 0, 0, false},
		{`{"kind":"done", "id":1,"exit":0}`, 0, 0, false},
		{`{"kind":"done","exit":0,"id":1}`, 0, 0, false},
		{`{"kind":"done","id":1,"exit":0,"more":1}`, 0, 0, false},
		{`{"kind":"done","id":1,"exit":0}}`, 0, 0, false},
		{`x{"kind":"done","id":1,"exit":0}`, 0, 0, false},
		{`{"kind":"done","id":1}`, 0, 0, false},
		{`{"kind":"done","id":01,"exit":0}`, 0, 0, false},
		{`{"kind":"done","id":1,"exit":00}`, 0, 0, false},
		{`{"kind":"ready"}`, 0, 0, false},
		{``, 0, 0, false},
		{`{"kind":"done","id":1,"exit":0}` + strings.Repeat(" ", 100), 1, 0, true},
		{strings.Repeat(" ", 100) + `{"kind":"done","id":1,"exit":0}`, 1, 0, true},
	} {
		l, ok := ParseSessionLine([]byte(tc.line))
		if tc.ok && (l.Kind != "done" || l.ID != tc.id || l.Exit != tc.exit || !ok) || !tc.ok && ok && l.Kind == "done" {
			t.Errorf("ParseSessionLine(%q) = %+v, %v; want done %d, %d, %v", tc.line, l, ok, tc.id, tc.exit, tc.ok)
		}
	}
}

func TestParseSessionLineReady(t *testing.T) {
	for line, want := range map[string]bool{
		`{"kind":"ready"}`:          true,
		"{\"kind\":\"ready\"}\r":    true,
		`{"kind": "ready"}`:         false,
		`{"kind":"ready","id":1}`:   false,
		`{"kind":"done"}`:           false,
		`{"kind":"ready"}{"x":1}`:   false,
		``:                          false,
		`{"kind":"ready"}` + "\x00": false,
	} {
		l, ok := ParseSessionLine([]byte(line))
		if got := ok && l.Kind == "ready"; got != want {
			t.Errorf("ParseSessionLine(%q) ready = %v, want %v", line, got, want)
		}
	}
}

func FuzzParseSessionLine(f *testing.F) {
	f.Add([]byte(`{"kind":"done","id":42,"exit":0}`))
	f.Add([]byte(`{"kind":"done","id":99999999999999999999,"exit":999}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		l, ok := ParseSessionLine(line)
		if !ok {
			return
		}
		want := `{"kind":"ready"}`
		if l.Kind == "done" {
			if l.ID < 0 || l.Exit < 0 || l.Exit > 255 {
				t.Fatalf("id %d exit %d", l.ID, l.Exit)
			}
			want = fmt.Sprintf(`{"kind":"done","id":%d,"exit":%d}`, l.ID, l.Exit)
		}
		if string(bytes.TrimSpace(line)) != want {
			t.Fatalf("accepted %q, which is not %q", line, want)
		}
	})
}

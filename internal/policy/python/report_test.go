package python

import (
	"fmt"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/box"
)

func TestParseReport(t *testing.T) {
	data := strings.Join([]string{
		`{"kind":"violation","rule":"python.import","detail":"import of 'subprocess' is blocked","line":3}`,
		`not json`,
		``,
		`{"kind":"violation","rule":"shell.command","detail":"not ours"}`,
		`{"kind":"violation","rule":"python.call","detail":"call of os.system","line":-5}`,
		`{"kind":"result","repr":"1"}`,
		`{"kind":"result","repr":"150.0","truncated":true}`,
		`{"kind":"unknown"}`,
		`{"kind":"violation","rule":"python.exec","detail":"` + strings.Repeat("é", 900) + `"}`,
	}, "\n")
	r := ParseReport([]byte(data))
	want := []box.Violation{
		{Rule: "python.import", Detail: "import of 'subprocess' is blocked", Line: 3},
		{Rule: "python.call", Detail: "call of os.system"},
	}
	if len(r.Violations) != 3 || fmt.Sprint(r.Violations[:2]) != fmt.Sprint(want) {
		t.Errorf("violations %v", r.Violations)
	}
	if d := r.Violations[2].Detail; len(d) > maxDetailBytes+3 || !strings.HasSuffix(d, "...") {
		t.Errorf("long detail not cut: %d bytes", len(d))
	}
	if r.Result == nil || *r.Result != "150.0" || !r.ResultTruncated {
		t.Errorf("result %v truncated %v", r.Result, r.ResultTruncated)
	}
	if r := ParseReport(nil); r.Result != nil || r.Violations != nil {
		t.Errorf("empty report %+v", r)
	}
	many := strings.Repeat(`{"kind":"violation","rule":"python.hook","detail":"x"}`+"\n", 1000)
	if n := len(ParseReport([]byte(many)).Violations); n != maxViolations {
		t.Errorf("kept %d violations, want %d", n, maxViolations)
	}
}

func FuzzParseReport(f *testing.F) {
	f.Add([]byte(`{"kind":"violation","rule":"python.import","detail":"x","line":1}` + "\n" + `{"kind":"result","repr":"2"}`))
	f.Add([]byte("{\n}\n\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := ParseReport(data)
		if len(r.Violations) > maxViolations {
			t.Fatalf("%d violations", len(r.Violations))
		}
		for _, v := range r.Violations {
			if !knownRule(v.Rule) || v.Line < 0 || len(v.Detail) > maxDetailBytes+3 {
				t.Fatalf("bad violation %+v", v)
			}
		}
	})
}

package python

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"
	"unicode/utf8"

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
	// A result only the code can have written, past the runner's cap: cut to it
	// without splitting a character, and marked.
	long := ParseReport([]byte(`{"kind":"result","repr":"` + strings.Repeat("x", MaxResultBytes-1) + strings.Repeat("é", 1000) + `"}`))
	if long.Result == nil || len(*long.Result) != MaxResultBytes-1 || !long.ResultTruncated {
		t.Errorf("long result: truncated %v, %d bytes", long.ResultTruncated, len(*long.Result))
	}
	if exact := ParseReport([]byte(`{"kind":"result","repr":"` + strings.Repeat("é", MaxResultBytes/2) + `"}`)); exact.Result == nil || len(*exact.Result) != MaxResultBytes || exact.ResultTruncated {
		t.Errorf("a result of exactly the cap is cut: %v", exact.ResultTruncated)
	}
	many := strings.Repeat(`{"kind":"violation","rule":"python.hook","detail":"x"}`+"\n", 1000)
	if n := len(ParseReport([]byte(many)).Violations); n != maxViolations {
		t.Errorf("kept %d violations, want %d", n, maxViolations)
	}
}

func FuzzParseReport(f *testing.F) {
	f.Add([]byte(`{"kind":"violation","rule":"python.import","detail":"x","line":1}` + "\n" + `{"kind":"result","repr":"2"}`))
	f.Add([]byte("{\n}\n\x00\xff"))
	f.Add([]byte(`{"kind":"display","mime_type":"image/png","data":"iVBORw0KGgo="}`))
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
		if len(r.Display) > MaxDisplays {
			t.Fatalf("%d displays", len(r.Display))
		}
		if r.Result != nil && (len(*r.Result) > MaxResultBytes || !utf8.ValidString(*r.Result)) {
			t.Fatalf("result of %d bytes (valid UTF-8: %v)", len(*r.Result), utf8.ValidString(*r.Result))
		}
		total := 0
		for _, d := range r.Display {
			data, err := base64.StdEncoding.DecodeString(d.Data)
			if d.MIMEType != "image/png" || err != nil || !bytes.HasPrefix(data, pngMagic) {
				t.Fatalf("bad display %+v", d)
			}
			total += len(data)
		}
		if total > MaxDisplayBytes {
			t.Fatalf("%d bytes of displays", total)
		}
	})
}

// testPNG returns a small PNG in base64.
func testPNG(t testing.TB) string {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 3, 2))); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestParseReportDisplay(t *testing.T) {
	good := testPNG(t)
	line := func(mime, data string) string {
		return fmt.Sprintf(`{"kind":"display","mime_type":%q,"data":%q}`, mime, data) + "\n"
	}
	big := func(n int) string { // a PNG signature and n bytes in all
		return base64.StdEncoding.EncodeToString(append(append([]byte{}, pngMagic...), make([]byte, n-len(pngMagic))...))
	}
	for _, tc := range []struct {
		name   string
		report string
		want   int // displays kept
	}{
		{"png", line("image/png", good), 1},
		{"other type", line("image/jpeg", good) + line("text/html", good), 0},
		{"not base64", line("image/png", "!!"+good), 0},
		{"unpadded", line("image/png", strings.TrimRight(good, "=")+"A"), 0},
		{"not a png", line("image/png", base64.StdEncoding.EncodeToString([]byte("GIF89a..."))), 0},
		{"count capped", strings.Repeat(line("image/png", good), MaxDisplays+3), MaxDisplays},
		{"bytes capped", line("image/png", big(MaxDisplayBytes-100)) + line("image/png", big(200)) + line("image/png", good), 2},
		{"one too large", line("image/png", big(MaxDisplayBytes+1)) + line("image/png", good), 1},
		{"beside other lines", `{"kind":"result","repr":"1"}` + "\n" + line("image/png", good) + "\n" + `{"kind":"done","id":1,"exit":0}`, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ParseReport([]byte(tc.report))
			if len(r.Display) != tc.want {
				t.Fatalf("%d displays, want %d", len(r.Display), tc.want)
			}
			for _, d := range r.Display {
				if d.MIMEType != "image/png" {
					t.Errorf("display type %q", d.MIMEType)
				}
			}
		})
	}
	if r := ParseReport([]byte(line("image/png", good))); r.Display[0].Data != good {
		t.Errorf("display data changed")
	}
}

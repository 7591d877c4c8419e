package python

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/internal/box"
)

// Report is what the runner wrote to its report channel (box.Result.Report).
type Report struct {
	// Violations are the rules that refused the code, in order.
	Violations []box.Violation
	// Result is the repr of the trailing expression, nil when there was none or it
	// was None.
	Result *string
	// ResultTruncated says Result was cut at MaxResultBytes.
	ResultTruncated bool
	// Display are the matplotlib figures the code left open, as PNG, in order.
	Display []box.Display
}

// Rules are the rule names the runner reports.
var Rules = []string{
	"python.import", "python.builtin", "python.attribute", "python.call", "python.file",
	"python.exec", "python.process", "python.network", "python.ctypes", "python.pickle",
	"python.hook",
}

// Limits on what ParseReport keeps from the (untrusted) channel.
const (
	maxViolations  = 64
	maxDetailBytes = 1000
	// MaxDisplays and MaxDisplayBytes bound the figures of one program or call (PNG
	// bytes, before base64), as the runner does.
	MaxDisplays     = 8
	MaxDisplayBytes = 4 << 20
	// MaxReportLine is the longest line the runner writes (a display of
	// MaxDisplayBytes in base64); a host splitting the channel into lines may drop
	// longer ones.
	MaxReportLine = (MaxDisplayBytes+2)/3*4 + 64
	// MaxResultBytes bounds the result (the repr of the trailing expression), as the
	// runner does (runner.py's _RESULT_CAP); a longer one, which only the code can
	// have written, is cut to it.
	MaxResultBytes = 64 << 10
)

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// ParseReport decodes the report channel: all of it for a single run, or the lines of
// one call of a session (those before its done line, see ParseDone). The channel is
// written inside the box, where the code can write to it too, so it is untrusted
// input: malformed lines, unknown kinds and unknown rules are skipped, details are
// cut, displays must be image/png in valid base64 that decodes to a PNG signature
// (at most MaxDisplays of them and MaxDisplayBytes in all; later ones are dropped),
// and the result is the last one written (the runner writes it after the code has
// finished), cut to MaxResultBytes. ParseReport never fails; a violation only means
// something together with exit status ExitViolation.
func ParseReport(data []byte) Report {
	var r Report
	displayBytes := 0
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		var m struct {
			Kind      string `json:"kind"`
			Rule      string `json:"rule"`
			Detail    string `json:"detail"`
			Line      int    `json:"line"`
			Repr      string `json:"repr"`
			Truncated bool   `json:"truncated"`
			MIMEType  string `json:"mime_type"`
			Data      string `json:"data"`
		}
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &m) != nil {
			continue
		}
		switch m.Kind {
		case "violation":
			if len(r.Violations) >= maxViolations || !knownRule(m.Rule) {
				continue
			}
			if m.Line < 0 {
				m.Line = 0
			}
			r.Violations = append(r.Violations, box.Violation{Rule: m.Rule, Detail: cut(m.Detail, maxDetailBytes), Line: m.Line})
		case "result":
			s, cut := truncate(m.Repr, MaxResultBytes)
			r.Result, r.ResultTruncated = &s, m.Truncated || cut
		case "display":
			if m.MIMEType != "image/png" || len(r.Display) >= MaxDisplays ||
				base64.StdEncoding.DecodedLen(len(m.Data)) > MaxDisplayBytes-displayBytes+2 {
				continue
			}
			png, err := base64.StdEncoding.Strict().DecodeString(m.Data)
			if err != nil || !bytes.HasPrefix(png, pngMagic) || displayBytes+len(png) > MaxDisplayBytes {
				continue
			}
			displayBytes += len(png)
			r.Display = append(r.Display, box.Display{MIMEType: m.MIMEType, Data: m.Data})
		}
	}
	return r
}

func knownRule(rule string) bool {
	for _, r := range Rules {
		if r == rule {
			return true
		}
	}
	return false
}

// cut shortens s to at most n bytes without splitting a character, marking the cut
// with "...".
func cut(s string, n int) string {
	if t, cut := truncate(s, n); cut {
		return strings.TrimSpace(t) + "..."
	}
	return s
}

// truncate shortens s to at most n bytes without splitting a character (dropping the
// bytes of one cut in two), and says whether it did.
func truncate(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	s = s[:n]
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s, true
}

package python

import (
	"bytes"
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
	// ResultTruncated says Result was cut at 64 KiB.
	ResultTruncated bool
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
)

// ParseReport decodes the report channel. The channel is written inside the box, where
// the code can write to it too, so it is untrusted input: malformed lines, unknown
// kinds and unknown rules are skipped, details are cut, and the result is the last
// one written (the runner writes it after the code has finished). ParseReport never
// fails; a violation only means something together with exit status ExitViolation.
func ParseReport(data []byte) Report {
	var r Report
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
			s := m.Repr
			r.Result, r.ResultTruncated = &s, m.Truncated
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

// cut shortens s to at most n bytes without splitting a character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.TrimSpace(s) + "..."
}

package engine

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/moat-sandbox/moat/internal/box"
)

// Bounds on the report channel, which the code itself can write to: it is untrusted.
const (
	maxViolations   = 50
	maxDetailBytes  = 1 << 10
	maxResultBytes  = 64 << 10
	reportRulPrefix = "python."
)

type reportLine struct {
	Kind   string `json:"kind"`
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
	Line   int    `json:"line"`
	Repr   string `json:"repr"`
}

// applyReport reads the runner's report lines into the result: violations make the
// status "blocked"; a "result" line is the trailing expression's value (redacted like
// any output). Malformed lines are ignored.
func (e *Engine) applyReport(res *box.Result) {
	var vs []box.Violation
	for _, raw := range bytes.Split(res.Report, []byte("\n")) {
		var l reportLine
		if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &l) != nil {
			continue
		}
		switch l.Kind {
		case "violation":
			if len(vs) == maxViolations || !strings.HasPrefix(l.Rule, reportRulPrefix) || l.Line < 0 {
				continue
			}
			d, _ := e.redactor.Redact(truncate(l.Detail, maxDetailBytes))
			vs = append(vs, box.Violation{Rule: l.Rule, Detail: d, Line: l.Line})
		case "result":
			v, n := e.redactor.Redact(truncate(l.Repr, maxResultBytes))
			res.Redactions += n
			res.Result = &v
		}
	}
	res.Report = nil
	if len(vs) > 0 {
		res.Status, res.ExitCode, res.Violations = box.StatusBlocked, -1, vs
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

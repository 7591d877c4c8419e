package engine

import (
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/policy/python"
)

// applyReport reads the runner's report channel (untrusted: python.ParseReport bounds
// it) into the result: violations make the status "blocked"; a "result" is the
// trailing expression's value, redacted like any output (a cut one sets Truncated,
// as cut output does); displays are the figures
// the code drew (PNG, not redacted: images are not text). The Python syntax errors are
// not violations: they are the code's own error.
func (e *Engine) applyReport(res *box.Result) {
	rep := python.ParseReport(res.Report)
	res.Report = nil
	if len(rep.Display) > 0 {
		res.Display = rep.Display
	}
	if rep.Result != nil {
		v, byRule := e.redactor.RedactByRule(*rep.Result)
		n := 0
		for _, c := range byRule {
			n += c
		}
		res.RedactionsByRule = addCounts(res.RedactionsByRule, byRule)
		res.Redactions += n
		res.Result = &v
		res.Truncated = res.Truncated || rep.ResultTruncated
	}
	// The code can write to the channel too; a violation counts only when the runner
	// ended the process with its violation status.
	if len(rep.Violations) == 0 || res.ExitCode != python.ExitViolation {
		return
	}
	for i := range rep.Violations {
		rep.Violations[i].Detail, _ = e.redactor.Redact(rep.Violations[i].Detail)
	}
	res.Status, res.ExitCode, res.Violations = box.StatusBlocked, -1, rep.Violations
}

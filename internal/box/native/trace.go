package native

import (
	"log/slog"
	"os"
	"time"
)

// traceEnabled is a debug knob, not config: MOAT_DEBUG_PHASES=1 logs how long each phase
// of a box took. It is read once at start-up.
var traceEnabled = os.Getenv("MOAT_DEBUG_PHASES") == "1"

type phaseTrace struct {
	last  time.Time
	attrs []any
}

func newPhaseTrace(start time.Time) *phaseTrace { return &phaseTrace{last: start} }

func (p *phaseTrace) mark(name string) {
	if !traceEnabled {
		return
	}
	now := time.Now()
	p.attrs = append(p.attrs, slog.Duration(name, now.Sub(p.last)))
	p.last = now
}

func (p *phaseTrace) report(log *slog.Logger) {
	if traceEnabled {
		// Warn: the knob was set on purpose, and moat run logs only warnings.
		log.Warn("box phases (MOAT_DEBUG_PHASES)", p.attrs...)
	}
}

func (p *phaseTrace) note(name string, d time.Duration) {
	if traceEnabled {
		p.attrs = append(p.attrs, slog.Duration(name, d))
	}
}

func (p *phaseTrace) text(name, v string) {
	if traceEnabled {
		p.attrs = append(p.attrs, slog.String(name, v))
	}
}

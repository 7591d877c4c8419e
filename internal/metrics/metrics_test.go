package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Fatalf("scrape: %d", w.Code)
	}
	return w.Body.String()
}

func TestScrape(t *testing.T) {
	m := New()
	x := Execution{Kind: "execute", FrontEnd: "api", Status: "ok", Language: "python", Backend: "native", Profile: "default"}
	m.Executed(x)
	m.Executed(x)
	m.Stage(StagePolicy, 300*time.Microsecond)
	m.Violation("shell.command")
	m.Redactions(map[string]int{"openai_key": 1, "secret": 1})
	m.Redactions(map[string]int{"openai_key": 1, "aws_key": 0})
	m.Redactions(nil)
	m.SessionCreated()
	m.SessionEnded(EndExpired)
	m.GateRefused("unauthenticated")
	m.GaugeFunc("moat_boxes_alive", "Boxes alive.", func() float64 { return 3 })
	out := scrape(t, m)
	for _, want := range []string{
		`moat_executions_total{backend="native",front_end="api",kind="execute",language="python",profile="default",status="ok"} 2`,
		`moat_stage_duration_seconds_bucket{stage="policy",le="0.0005"} 1`,
		`moat_policy_violations_total{rule="shell.command"} 1`,
		`moat_redactions_total{rule="openai_key"} 2`,
		`moat_redactions_total{rule="secret"} 1`,
		`moat_sessions_created_total 1`,
		`moat_sessions_ended_total{reason="expired"} 1`,
		`moat_gate_refusals_total{code="unauthenticated"} 1`,
		`moat_boxes_alive 3`,
		`go_goroutines `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

func TestNilIsANoOp(t *testing.T) {
	var m *Metrics
	m.Executed(Execution{})
	m.Stage(StageBox, time.Second)
	m.Violation("x")
	m.Redactions(map[string]int{"secret": 1})
	m.SessionCreated()
	m.SessionEnded(EndLost)
	m.GateRefused("forbidden")
	m.GaugeFunc("x", "x", func() float64 { return 0 })
	if m.Registry() != nil {
		t.Fatal("nil metrics have a registry")
	}
}

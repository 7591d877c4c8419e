// Package metrics holds moat's Prometheus metrics, in a registry of its own (never
// the global one), served at /metrics by the API.
//
// It is a package of its own rather than part of internal/audit because the two
// differ in kind: the audit trail is durable records that can fail and must be
// accounted for, metrics are in-memory counters that never fail; the CLI writes
// audit records but keeps no metrics; and any package (the warm pool, a backend)
// can export a gauge here without depending on the audit store's SQLite.
//
// Every method is safe on a nil *Metrics and then does nothing, so code that
// observes need not check whether metrics are on.
//
// # Metrics
//
//	moat_executions_total{kind,front_end,status,language,backend,profile}   counter
//	moat_stage_duration_seconds{stage}           histogram: gate, policy, box, box_start, run, filter
//	moat_policy_violations_total{rule}           counter
//	moat_redactions_total{rule}                  counter: secrets redacted from output, by rule
//	moat_sessions_created_total                  counter
//	moat_sessions_ended_total{reason}            counter: destroyed, expired, lost
//	moat_sessions_active                         gauge
//	moat_boxes_alive                             gauge: one-shot boxes running, session boxes, pooled boxes
//	moat_gate_refusals_total{code}               counter: unauthenticated, forbidden, rate_limited...
//	moat_audit_records_written_total, moat_audit_records_lost_total, moat_audit_sink_errors_total,
//	moat_audit_code_redactions_total, moat_audit_queue_length, moat_audit_store_failing
//	moat_pool_ready, moat_pool_making, moat_pool_hits_total, moat_pool_misses_total
//	go_*, process_*                              the Go runtime and the process
//
// Labels never hold principal names, session ids or anything a caller chose
// freely, so their number stays bounded and the metrics reveal no one's activity
// in particular: language, backend, profile, rule and code are names from moat's
// own config and code.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Stages of the pipeline, the values of the stage label.
const (
	StageGate     = "gate"         // authentication and quotas (API)
	StagePolicy   = "policy"       // the shell checker; Python's policy runs in the box
	StageBox      = "box"          // a one-shot box, all of it: start (or take from the pool), run, destroy
	StageBoxStart = "box_start"    // a box started (one-shot or a session's), up to the code's start
	StageRun      = "run"          // the code's run: a one-shot program or a call in a session
	StageTeardown = "box_teardown" // a one-shot box destroyed after its code
	StageFilter   = "filter"       // the runner's report and the result's final filtering
)

// Metrics are moat's metrics. Build them with New.
type Metrics struct {
	reg             *prometheus.Registry
	executions      *prometheus.CounterVec
	stage           *prometheus.HistogramVec
	violations      *prometheus.CounterVec
	redactions      *prometheus.CounterVec
	sessionsCreated prometheus.Counter
	sessionsEnded   *prometheus.CounterVec
	gateRefusals    *prometheus.CounterVec
	egress          *prometheus.CounterVec
	egressBytes     *prometheus.CounterVec
}

// stageBuckets span a shell check (tens of microseconds) to a long execution.
var stageBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New returns metrics in a fresh registry, with the Go runtime and process
// collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_executions_total",
			Help: "Executions (one-shot and session calls) by outcome.",
		}, []string{"kind", "front_end", "status", "language", "backend", "profile"}),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "moat_stage_duration_seconds", Help: "Time spent in each stage of the pipeline.", Buckets: stageBuckets,
		}, []string{"stage"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_policy_violations_total", Help: "Policy violations by rule.",
		}, []string{"rule"}),
		redactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_redactions_total", Help: "Secrets redacted from the output of executions, by rule (secret: exact secret values).",
		}, []string{"rule"}),
		sessionsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "moat_sessions_created_total", Help: "Sessions started.",
		}),
		sessionsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_sessions_ended_total", Help: "Sessions ended: destroyed (by the owner or a shutdown), expired, lost.",
		}, []string{"reason"}),
		gateRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_gate_refusals_total", Help: "Requests refused by the gate, by error code.",
		}, []string{"code"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_egress_decisions_total", Help: "Decisions of the egress proxy: connections, HTTP requests and DNS lookups of boxes, allowed or refused.",
		}, []string{"via", "decision"}),
		egressBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_egress_bytes_total", Help: "Bytes through the egress proxy, out of boxes and into them.",
		}, []string{"direction"}),
	}
	m.reg.MustRegister(m.executions, m.stage, m.violations, m.redactions, m.sessionsCreated, m.sessionsEnded, m.gateRefusals, m.egress, m.egressBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, for collectors of other packages.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// GaugeFunc registers a gauge whose value f returns at each scrape. f must be
// safe for concurrent use and quick.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// CounterFunc registers a counter whose value f returns at each scrape; it must
// never decrease.
func (m *Metrics) CounterFunc(name, help string, f func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
}

// Execution labels one finished execution.
type Execution struct {
	Kind, FrontEnd, Status, Language, Backend, Profile string
}

// Executed counts one execution.
func (m *Metrics) Executed(x Execution) {
	if m == nil {
		return
	}
	m.executions.WithLabelValues(x.Kind, x.FrontEnd, x.Status, x.Language, x.Backend, x.Profile).Inc()
}

// Stage observes the time one stage took.
func (m *Metrics) Stage(stage string, d time.Duration) {
	if m == nil {
		return
	}
	m.stage.WithLabelValues(stage).Observe(d.Seconds())
}

// Violation counts one policy violation.
func (m *Metrics) Violation(rule string) {
	if m == nil {
		return
	}
	m.violations.WithLabelValues(rule).Inc()
}

// Redactions counts the secrets redacted from an execution's output, by rule.
func (m *Metrics) Redactions(byRule map[string]int) {
	if m == nil {
		return
	}
	for rule, n := range byRule {
		if n > 0 {
			m.redactions.WithLabelValues(rule).Add(float64(n))
		}
	}
}

// Egress counts one decision of the egress proxy (via: http, connect or dns).
func (m *Metrics) Egress(via string, allowed bool) {
	if m == nil {
		return
	}
	decision := "refused"
	if allowed {
		decision = "allowed"
	}
	m.egress.WithLabelValues(via, decision).Inc()
}

// EgressBytes counts the bytes a box sent and received through the egress proxy.
func (m *Metrics) EgressBytes(out, in int64) {
	if m == nil {
		return
	}
	m.egressBytes.WithLabelValues("out").Add(float64(out))
	m.egressBytes.WithLabelValues("in").Add(float64(in))
}

// SessionCreated counts a session started.
func (m *Metrics) SessionCreated() {
	if m == nil {
		return
	}
	m.sessionsCreated.Inc()
}

// Session end reasons, the values of moat_sessions_ended_total's reason label.
const (
	EndDestroyed = "destroyed"
	EndExpired   = "expired"
	EndLost      = "lost"
)

// SessionEnded counts a session ended for reason (EndDestroyed, EndExpired,
// EndLost).
func (m *Metrics) SessionEnded(reason string) {
	if m == nil {
		return
	}
	m.sessionsEnded.WithLabelValues(reason).Inc()
}

// GateRefused counts a request the gate refused, by its API error code.
func (m *Metrics) GateRefused(code string) {
	if m == nil {
		return
	}
	m.gateRefusals.WithLabelValues(code).Inc()
}

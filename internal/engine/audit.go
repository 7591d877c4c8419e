package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/filter"
	"github.com/moat-sandbox/moat/internal/metrics"
	"github.com/moat-sandbox/moat/internal/session"
)

// The audit stage: every Execute, SessionExecute, CreateSession and DeleteSession,
// and every session's end, makes exactly one audit record (when EnableAudit gave
// the engine an audit log) and is counted and timed in the metrics (when it gave
// metrics). The engine is the one place that records executions, so the CLI, the
// API and MCP are audited alike; the front end says who asks in Caller.

// Caller says who asks, through which front end. The audit trail records it.
type Caller struct {
	// Principal is who asks: an API key's principal, "local:<user>" for the CLI.
	// Empty means the session's owner (for session operations).
	Principal string
	// FrontEnd is audit.FrontEndCLI, FrontEndAPI or FrontEndMCP.
	FrontEnd string
	// RequestID ties the record to the response (X-Request-Id) and the log line.
	RequestID string
	// Remote is the client's network address, if any.
	Remote string
}

// AuditOptions enable the audit stage (EnableAudit).
type AuditOptions struct {
	// Log receives the records; nil records nothing.
	Log *audit.Log
	// Metrics, when set, count executions, violations, redactions and sessions
	// and time the stages; the engine also registers its gauges there (sessions
	// active, boxes alive, the audit queue, the warm pool).
	Metrics *metrics.Metrics
}

// auditor is the engine's audit stage.
type auditor struct {
	log     *audit.Log // nil: no records
	m       *metrics.Metrics
	backend string
	// oneShot counts one-shot executions in their box stage, for moat_boxes_alive.
	oneShot atomic.Int64
	// sessions remembers who created each live session (id -> sessionMeta), so the
	// record of its end names the principal and front end, not only its owner.
	sessions sync.Map
	// deleting holds the Caller of a DeleteSessionAs in progress (id -> Caller),
	// for the record of that end.
	deleting sync.Map
}

type sessionMeta struct {
	caller            Caller
	language, profile string
}

// EnableAudit gives the engine its audit log and metrics. Call it once, before
// EnableSessions (so that sessions a previous run left are recorded as lost) and
// before serving.
func (e *Engine) EnableAudit(o AuditOptions) {
	a := &auditor{log: o.Log, m: o.Metrics, backend: e.backend.Name()}
	e.audit = a
	m := o.Metrics
	m.GaugeFunc("moat_sessions_active", "Sessions alive.", func() float64 {
		if e.sessions == nil {
			return 0
		}
		return float64(e.sessions.Len())
	})
	m.GaugeFunc("moat_boxes_alive", "Boxes alive: one-shot executions in their box, sessions, and the warm pool's ready boxes and boxes being made.", func() float64 {
		n := a.oneShot.Load()
		if e.sessions != nil {
			n += int64(e.sessions.Len())
		}
		st := e.PoolStats()
		return float64(n + int64(st.Ready+st.Making))
	})
	// The warm pool's metrics.
	m.GaugeFunc("moat_pool_ready", "Warm pool: boxes ready.", func() float64 { return float64(e.PoolStats().Ready) })
	m.GaugeFunc("moat_pool_making", "Warm pool: boxes being made.", func() float64 { return float64(e.PoolStats().Making) })
	m.GaugeFunc("moat_pool_keys", "Warm pool: (language, profile, limits) combinations kept warm.", func() float64 { return float64(e.PoolStats().Keys) })
	m.CounterFunc("moat_pool_hits_total", "Warm pool: one-shot executions and sessions served a ready box.", func() float64 { return float64(e.PoolStats().Hits) })
	m.CounterFunc("moat_pool_misses_total", "Warm pool: executions and sessions that found no ready box.", func() float64 { return float64(e.PoolStats().Misses) })
	if l := o.Log; l != nil {
		m.CounterFunc("moat_audit_records_written_total", "Audit records written to the store.", func() float64 { return float64(l.Stats().Written) })
		m.CounterFunc("moat_audit_records_lost_total", "Audit records that could not be written (each one also logged).", func() float64 { return float64(l.Stats().Lost) })
		m.CounterFunc("moat_audit_code_redactions_total", "Secrets redacted from the code kept in audit records.", func() float64 { return float64(l.Stats().CodeRedactions) })
		m.CounterFunc("moat_audit_sink_errors_total", "Failed writes to the audit JSON-lines sink.", func() float64 { return float64(l.Stats().SinkErrors) })
		m.GaugeFunc("moat_audit_queue_length", "Audit records waiting for the store.", func() float64 { return float64(l.Stats().Queued) })
		m.GaugeFunc("moat_audit_store_failing", "1 while the audit store fails.", func() float64 {
			if l.Stats().Failing {
				return 1
			}
			return 0
		})
	}
}

// Redact redacts secrets from s with the engine's output filter; the audit log
// uses it on the code it keeps.
func (e *Engine) Redact(s string) (string, int) { return e.redactor.Redact(s) }

// auditRun is one audited operation: its place in the audit buffer, its record
// and its stage timings. A nil *auditRun (no audit stage) does nothing.
type auditRun struct {
	a       *auditor
	pending *audit.Pending
	rec     *audit.Record
	metric  metrics.Execution
	start   time.Time
	lap     time.Time
	inBox   bool
	staged  bool // a stage was observed
}

// begin starts the audit of an operation of kind. Fail closed, it refuses the
// operation (an error wrapping audit.ErrUnavailable) when the audit trail cannot
// take its record.
func (e *Engine) begin(kind string, c Caller, owner, sessionID, language, profile string, code []byte) (*auditRun, error) {
	a := e.audit
	if a == nil {
		return nil, nil
	}
	r := &auditRun{a: a, start: time.Now()}
	r.lap = r.start
	// Destroying a session is never refused (it only ends a box); its record is
	// appended without a reservation.
	if a.log != nil && kind != audit.KindSessionDestroy {
		p, err := a.log.Reserve()
		if err != nil {
			e.log.Error("execution refused: the audit trail cannot record it", "kind", kind, "principal", c.Principal, "request_id", c.RequestID, "err", err)
			return nil, err
		}
		r.pending = p
	}
	if c.Principal == "" {
		c.Principal = owner
	}
	r.rec = &audit.Record{
		Kind: kind, RequestID: c.RequestID, Principal: c.Principal, FrontEnd: c.FrontEnd, Remote: c.Remote,
		Session: sessionID, Backend: a.backend,
	}
	r.metric = metrics.Execution{Kind: kind, FrontEnd: c.FrontEnd, Backend: a.backend}
	r.setLanguage(language)
	if kind == audit.KindExecute || kind == audit.KindSessionCreate {
		r.setProfile(e.profileName(profile))
	}
	if code != nil && a.log != nil {
		r.rec.SetCode(code)
	}
	return r, nil
}

// setLanguage records the language; the metric's label only for a known one.
func (r *auditRun) setLanguage(language string) {
	if r == nil || language == "" {
		return
	}
	r.rec.Language = cut(language, 64)
	r.metric.Language = "unknown"
	if l, err := box.LookupLanguage(language); err == nil {
		r.rec.Language, r.metric.Language = l.Name, l.Name
	}
}

// setProfile records the profile name that an operation runs under.
func (r *auditRun) setProfile(name string) {
	if r == nil {
		return
	}
	r.rec.Profile = cut(name, 64)
	r.metric.Profile = r.rec.Profile
}

// profileName is the name e.profile resolves, without resolving it: the
// request's, else the config's default.
func (e *Engine) profileName(name string) string {
	if name == "" {
		name = e.cfg.Profile
	}
	if name == "" {
		name = "default"
	}
	return name
}

// session records a session call's language and profile once the session is
// known.
func (r *auditRun) session(language, profile string) {
	if r == nil {
		return
	}
	r.setLanguage(language)
	r.setProfile(profile)
}

// stage observes the time since the previous stage ended (or the start) as the
// duration of stage. metrics.StagePolicy also marks the start of a one-shot box
// and metrics.StageBox its end, for moat_boxes_alive.
func (r *auditRun) stage(stage string) {
	if r == nil {
		return
	}
	now := time.Now()
	r.a.m.Stage(stage, now.Sub(r.lap))
	r.lap, r.staged = now, true
	switch {
	case stage == metrics.StagePolicy && r.rec.Kind == audit.KindExecute:
		r.inBox = true
		r.a.oneShot.Add(1)
	case stage == metrics.StageBox && r.inBox:
		r.inBox = false
		r.a.oneShot.Add(-1)
	}
}

// boxStages observes a one-shot box's start, run and teardown (the box stage, which
// covers them all, is observed by stage as well).
func (r *auditRun) boxStages(t box.Timing) {
	if r == nil {
		return
	}
	r.a.m.Stage(metrics.StageBoxStart, t.Start)
	r.a.m.Stage(metrics.StageRun, t.Run)
	r.a.m.Stage(metrics.StageTeardown, t.Teardown)
}

// Statuses of records of operations that failed (besides audit.StatusRejected
// and audit.StatusInternalError).
const (
	statusCancelled   = "cancelled"    // the caller went away (context cancelled)
	statusSessionLost = "session_lost" // the session's box is gone
)

// end completes the record with res or err, queues it and counts it.
func (r *auditRun) end(res *box.Result, err error) {
	if r == nil {
		return
	}
	if r.inBox {
		r.a.oneShot.Add(-1)
	}
	rec := r.rec
	rec.Time = time.Now()
	rec.DurationMS = time.Since(r.start).Milliseconds()
	switch {
	case err != nil:
		rec.Status, rec.Reason = failure(err)
	case res != nil:
		if res.Status == box.StatusBlocked && !r.staged {
			r.a.m.Stage(metrics.StagePolicy, time.Since(r.lap)) // blocked before the box
		}
		rec.Status = string(res.Status)
		exit := res.ExitCode
		rec.ExitCode = &exit
		for _, v := range res.Violations {
			rec.Violations = append(rec.Violations, audit.Violation{Rule: v.Rule, Detail: v.Detail, Line: v.Line})
			r.a.m.Violation(v.Rule)
		}
		rec.Redactions = res.Redactions
		r.a.m.Redactions(res.RedactionsByRule)
		if res.DurationMS > 0 {
			rec.DurationMS = res.DurationMS
		}
		rec.CPUMS, rec.PeakMemoryBytes = res.Usage.CPUMS, res.Usage.PeakMemoryBytes
		rec.OutputBytes = int64(len(res.Stdout) + len(res.Stderr))
		if len(res.Isolation) > 0 {
			rec.Isolation = res.Isolation
		}
		if res.Status == box.StatusInternalError {
			rec.Reason = res.Error
		}
	default:
		rec.Status = audit.StatusOK
	}
	r.metric.Status = rec.Status
	switch rec.Kind {
	case audit.KindExecute, audit.KindSessionExecute:
		r.a.m.Executed(r.metric)
	case audit.KindSessionCreate:
		if err == nil {
			r.a.m.Stage(metrics.StageBoxStart, time.Since(r.start))
		}
	}
	switch {
	case r.pending != nil:
		r.pending.Commit(rec)
	case r.a.log != nil:
		r.a.log.Append(rec)
	}
}

// failure maps an operation's error to a record's status and reason.
func failure(err error) (status, reason string) {
	msg := filter.SanitizeError(err.Error())
	switch {
	case errors.Is(err, ErrBadRequest):
		return audit.StatusRejected, strings.TrimPrefix(msg, ErrBadRequest.Error()+": ")
	case errors.Is(err, session.ErrLost), errors.Is(err, box.ErrSessionLost):
		return statusSessionLost, msg
	case errors.Is(err, session.ErrNotFound), errors.Is(err, session.ErrBusy),
		errors.Is(err, session.ErrLimit), errors.Is(err, session.ErrClosed), errors.Is(err, ErrNoSessions),
		errors.Is(err, box.ErrSessionClosed):
		return audit.StatusRejected, msg
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return statusCancelled, msg
	}
	return audit.StatusInternalError, msg
}

// created remembers who created a session, for the record of its end.
func (r *auditRun) created(info SessionInfo, c Caller) {
	if r == nil {
		return
	}
	r.rec.Session = info.ID
	r.rec.Isolation = info.Isolation
	r.a.m.SessionCreated()
	if c.Principal == "" {
		c.Principal = r.rec.Principal
	}
	r.a.sessions.Store(info.ID, sessionMeta{caller: c, language: info.Language, profile: info.Profile})
}

// sessionEnded is the session store's OnEnd: the record of a session's end.
func (e *Engine) sessionEnded(end session.End) {
	a := e.audit
	if a == nil {
		return
	}
	kind, metric := audit.KindSessionLost, metrics.EndLost
	switch end.Cause {
	case session.EndDeleted, session.EndShutdown:
		kind, metric = audit.KindSessionDestroy, metrics.EndDestroyed
	case session.EndExpired:
		kind, metric = audit.KindSessionExpire, metrics.EndExpired
	}
	rec := &audit.Record{Kind: kind, Session: end.Info.ID, Principal: end.Info.Owner, FrontEnd: audit.FrontEndServer,
		Backend: a.backend, Language: end.Info.Language, Profile: end.Info.Profile, Reason: end.Reason}
	if m, ok := a.sessions.LoadAndDelete(end.Info.ID); ok {
		meta := m.(sessionMeta)
		rec.Principal, rec.Language, rec.Profile = meta.caller.Principal, meta.language, meta.profile
	}
	switch end.Cause {
	case session.EndDeleted:
		rec.Status, rec.Reason = audit.StatusOK, "deleted by its owner"
		if c, ok := a.deleting.Load(end.Info.ID); ok {
			c := c.(Caller)
			rec.RequestID, rec.FrontEnd, rec.Remote = c.RequestID, c.FrontEnd, c.Remote
			if c.Principal != "" {
				rec.Principal = c.Principal
			}
		}
	case session.EndShutdown:
		rec.Status, rec.Reason = audit.StatusOK, "the server shut down"
	case session.EndRestart:
		// A clean shutdown recorded this session's end already; a crash did not.
		if a.log != nil && a.recordedEnd(end.Info.ID) {
			return
		}
	}
	if !end.Info.CreatedAt.IsZero() {
		rec.DurationMS = time.Since(end.Info.CreatedAt).Milliseconds()
	}
	a.m.SessionEnded(metric)
	if a.log != nil {
		a.log.Append(rec)
	}
}

// recordedEnd reports whether the audit store holds the end of session id.
func (a *auditor) recordedEnd(id string) bool {
	st := a.log.Store()
	if st == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done, err := st.HasSessionEnd(ctx, id)
	return err == nil && done
}

// DeleteSessionAs destroys one of owner's sessions and its box, for c; the audit
// record of the end names c. DeleteSession is DeleteSessionAs with the owner as
// the principal and no front end.
func (e *Engine) DeleteSessionAs(c Caller, owner, id string) (err error) {
	if e.audit == nil {
		return e.DeleteSession(owner, id)
	}
	e.audit.deleting.Store(id, c)
	defer e.audit.deleting.Delete(id)
	err = e.DeleteSession(owner, id)
	if err != nil {
		// A refused destroy is recorded here; a done one by sessionEnded.
		r, _ := e.begin(audit.KindSessionDestroy, c, owner, id, "", "", nil) // never refused
		r.end(nil, err)
	}
	return err
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

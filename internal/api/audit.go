package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/metrics"
)

// Audit is what the API needs of the audit trail; *audit.Log implements it.
type Audit interface {
	// Append queues a record that cannot be refused (an auth failure).
	Append(r *audit.Record)
	// Store is the store to query; nil while it cannot be opened.
	Store() *audit.Store
}

// metricsPath is the route of the Prometheus metrics; server.metrics_public
// serves it without authentication.
const metricsPath = "/metrics"

// caller is who asks in r, for the engine's audit records.
func caller(r *http.Request, p *gate.Principal) engine.Caller {
	c := engine.Caller{FrontEnd: audit.FrontEndAPI, RequestID: requestID(r), Remote: r.RemoteAddr}
	if p != nil {
		c.Principal = p.Name
	}
	return c
}

// gateRefusal records a request the gate refused: an auth_failure record for 401
// and 403 (who, from where, what it asked), and a count of every refusal by code.
func (s *Server) gateRefusal(r *http.Request, e *Error) {
	s.recordRefusal(r, e.Status, e.Code, e.Message, audit.FrontEndAPI)
}

// RecordRefusal records a request another front end on the same server (the MCP
// endpoint) refused at the gate, as the API records its own: counted by code, and
// an auth_failure record for 401 and 403.
func (s *Server) RecordRefusal(r *http.Request, status int, code, message, frontEnd string) {
	s.recordRefusal(r, status, code, message, frontEnd)
}

func (s *Server) recordRefusal(r *http.Request, status int, code, message, frontEnd string) {
	switch code {
	case CodeUnauthenticated, CodeForbidden, CodeLimitExceeded, CodeRateLimited, CodeQuotaExceeded:
	default:
		return
	}
	s.metrics.GateRefused(code)
	if s.audit == nil || (status != http.StatusUnauthorized && status != http.StatusForbidden) {
		return
	}
	rec := &audit.Record{
		Time: time.Now(), Kind: audit.KindAuthFailure, RequestID: requestID(r), FrontEnd: frontEnd,
		Remote: r.RemoteAddr, Status: code,
		Reason: fmt.Sprintf("%s %s: %s", r.Method, routeOf(r), message),
	}
	if info, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
		if p := info.principal.Load(); p != nil {
			rec.Principal = *p
		}
	}
	s.audit.Append(rec)
}

// routeOf is r's route pattern, without its method; its path when unrouted.
func routeOf(r *http.Request) string {
	if r.Pattern == "" {
		return r.URL.Path
	}
	if _, path, ok := strings.Cut(r.Pattern, " "); ok {
		return path
	}
	return r.Pattern
}

// listAudit serves GET /v1/audit: the newest records that the query selects,
// newest first, in pages. A principal reads its own records; an admin principal
// (api_keys[].admin, or the generated token's) reads everyone's, and records of
// no principal (failed authentication).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	if s.audit == nil {
		return errorf(CodeNotFound, "the audit trail is disabled on this server (audit.disable)")
	}
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"since", "until", "principal", "session", "status", "kind", "violations", "limit", "before"}, k) {
			return badRequest("unknown query parameter %q (want since, until, principal, session, status, kind, violations, limit or before)", k)
		}
	}
	now := time.Now()
	var f audit.Filter
	var err error
	for _, tb := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(tb.name); v != "" {
			if *tb.dst, err = audit.ParseTime(v, now); err != nil {
				return badRequest("%s: %v", tb.name, err)
			}
		}
	}
	f.Principal, f.Session, f.Status, f.Kind = q.Get("principal"), q.Get("session"), q.Get("status"), q.Get("kind")
	if f.Kind != "" && !slices.Contains(audit.Kinds, f.Kind) {
		return badRequest("kind: unknown kind %q", f.Kind)
	}
	if v := q.Get("violations"); v != "" {
		if f.Violations, err = strconv.ParseBool(v); err != nil {
			return badRequest("violations: want true or false")
		}
	}
	for _, n := range []struct {
		name string
		dst  *int64
		max  int64
	}{{"limit", new(int64), audit.MaxLimit}, {"before", &f.Before, 1 << 62}} {
		v := q.Get(n.name)
		if v == "" {
			continue
		}
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil || i < 1 || i > n.max {
			return badRequest("%s: want a whole number from 1 to %d", n.name, n.max)
		}
		*n.dst = i
		if n.name == "limit" {
			f.Limit = int(i)
		}
	}
	if !p.Admin {
		if f.Principal != "" && f.Principal != p.Name {
			return errorf(CodeForbidden, "principal %q may read only its own audit records", p.Name)
		}
		f.Principal = p.Name
	}
	st := s.audit.Store()
	if st == nil {
		return errorf(CodeUnavailable, "the audit store is not available; the server's log says why")
	}
	page, err := st.Query(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// serveMetrics serves GET /metrics in the Prometheus text format.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, _ *gate.Principal) error {
	if s.metrics == nil {
		return errorf(CodeNotFound, "metrics are not enabled on this server")
	}
	s.metrics.Handler().ServeHTTP(w, r)
	return nil
}

// observeGate times authentication.
func (s *Server) observeGate(start time.Time) {
	s.metrics.Stage(metrics.StageGate, time.Since(start))
}

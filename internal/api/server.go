package api

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/metrics"
)

// Engine is what the API needs of the engine; *engine.Engine implements it.
type Engine interface {
	Execute(ctx context.Context, req *engine.Request) (*box.Result, error)
	CreateSession(ctx context.Context, req *engine.SessionRequest) (engine.SessionInfo, error)
	Sessions(owner string) []engine.SessionInfo
	Session(owner, id string) (engine.SessionInfo, error)
	DeleteSession(owner, id string) error
	SessionExecute(ctx context.Context, owner, id string, req *engine.CallRequest) (*box.Result, error)
	PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) error
	GetFile(ctx context.Context, owner, id, path string, w io.Writer) (int64, error)
	ListFiles(ctx context.Context, owner, id, dir string) ([]box.FileInfo, error)
	RemoveFile(ctx context.Context, owner, id, path string) error
}

// Options configure a Server. Engine and Gate are required; zero sizes and durations
// take the defaults below.
type Options struct {
	Engine Engine
	Gate   Gate
	// Log receives one record per request and the details of internal errors. It
	// never receives code, file contents, environment values or tokens.
	Log *slog.Logger
	// MaxBody bounds a JSON request body (DefaultMaxBody).
	MaxBody int64
	// MaxUpload bounds a file uploaded with PUT (DefaultMaxUpload).
	MaxUpload int64
	// Heartbeat is the interval of comment lines on an event stream
	// (DefaultHeartbeat).
	Heartbeat time.Duration
	// Audit, when set, receives the auth failures and serves GET /v1/audit.
	Audit Audit
	// Metrics, when set, are served at /metrics and count gate refusals and time
	// authentication.
	Metrics *metrics.Metrics
	// MetricsPublic serves /metrics without authentication.
	MetricsPublic bool
}

// Defaults of Options.
const (
	DefaultMaxBody   = 32 << 20
	DefaultMaxUpload = 100 << 20
	DefaultHeartbeat = 15 * time.Second
	// bodyReadTimeout bounds reading a request body; the server itself has no
	// ReadTimeout, which would also cancel long executions.
	bodyReadTimeout = 5 * time.Minute
)

// Server is the HTTP API. Build it with New; it is an http.Handler.
type Server struct {
	eng       Engine
	gate      Gate
	log       *slog.Logger
	maxBody   int64
	maxUpload int64
	heartbeat time.Duration
	mux       *http.ServeMux
	audit     Audit
	metrics   *metrics.Metrics
	// metricsPublic: /metrics needs no token.
	metricsPublic bool
}

// route is one endpoint. Routes is the table New registers and the OpenAPI test
// checks against openapi.json.
type route struct {
	method, path string
	auth         bool
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, p *gate.Principal) error
}

var routes = []route{
	{"GET", "/healthz", false, (*Server).health},
	{"GET", "/v1/openapi.json", true, (*Server).openapi},
	{"POST", "/v1/execute", true, (*Server).execute},
	{"POST", "/v1/sessions", true, (*Server).createSession},
	{"GET", "/v1/sessions", true, (*Server).listSessions},
	{"GET", "/v1/sessions/{id}", true, (*Server).getSession},
	{"DELETE", "/v1/sessions/{id}", true, (*Server).deleteSession},
	{"POST", "/v1/sessions/{id}/execute", true, (*Server).sessionExecute},
	{"GET", "/v1/sessions/{id}/files", true, (*Server).listFiles},
	{"PUT", "/v1/sessions/{id}/files/{path...}", true, (*Server).putFile},
	{"GET", "/v1/sessions/{id}/files/{path...}", true, (*Server).getFile},
	{"DELETE", "/v1/sessions/{id}/files/{path...}", true, (*Server).removeFile},
	{"GET", "/v1/audit", true, (*Server).listAudit},
	{"GET", metricsPath, true, (*Server).serveMetrics},
}

// New builds the API server.
func New(o Options) *Server {
	s := &Server{
		eng: o.Engine, gate: o.Gate, log: o.Log,
		maxBody: o.MaxBody, maxUpload: o.MaxUpload, heartbeat: o.Heartbeat,
		mux: http.NewServeMux(), audit: o.Audit, metrics: o.Metrics, metricsPublic: o.MetricsPublic,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBody
	}
	if s.maxUpload <= 0 {
		s.maxUpload = DefaultMaxUpload
	}
	if s.heartbeat <= 0 {
		s.heartbeat = DefaultHeartbeat
	}
	for _, rt := range routes {
		s.mux.HandleFunc(rt.method+" "+rt.path, s.wrap(rt))
	}
	return s
}

// reqInfo is what the request log line needs from inside a handler.
type reqInfo struct {
	id        string
	principal atomic.Pointer[string]
}

type ctxKey struct{}

// ServeHTTP logs the request, refuses paths that are not clean and sends JSON errors
// for unknown routes and methods.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	info := &reqInfo{id: newRequestID()}
	sw := &statusWriter{ResponseWriter: w}
	sw.Header().Set("X-Request-Id", info.id)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, info))
	pattern := "-"
	defer func() {
		who := ""
		if p := info.principal.Load(); p != nil {
			who = *p
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.log.Info("request", "method", r.Method, "route", pattern, "status", sw.status,
			"duration_ms", time.Since(start).Milliseconds(), "principal", who, "request_id", info.id)
	}()

	if err := checkRequestPath(r.URL.Path); err != nil {
		s.writeError(sw, r, err)
		return
	}
	h, pat := s.mux.Handler(r)
	if pat == "" {
		// No route: the mux's own handler would answer in plain text; find out
		// whether it is a 405 and answer in JSON.
		probe := &headerProbe{h: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			sw.Header().Set("Allow", probe.h.Get("Allow"))
			s.writeError(sw, r, errorf(CodeMethodNotAllowed, "method %s is not allowed here (allowed: %s)", r.Method, probe.h.Get("Allow")))
			return
		}
		s.writeError(sw, r, errorf(CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
		return
	}
	pattern = pat
	s.mux.ServeHTTP(sw, r)
}

// checkRequestPath refuses request paths that the mux would clean and redirect
// ("/a/../b", "//", "/./"), decoded %2F included: a client that sends one is
// confused or probing, and a redirect would only move the question elsewhere.
func checkRequestPath(p string) error {
	if strings.ContainsRune(p, 0) {
		return errorf(CodeBadPath, "request path contains a NUL byte")
	}
	for _, seg := range strings.Split(p, "/")[1:] {
		if seg == "." || seg == ".." {
			return errorf(CodeBadPath, "request path has a %q segment", seg)
		}
	}
	if strings.Contains(p, "//") {
		return errorf(CodeBadPath, "request path has an empty segment (//)")
	}
	return nil
}

// wrap turns a route's handler into an http.HandlerFunc: it authenticates when the
// route needs it and writes the handler's error.
func (s *Server) wrap(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var p *gate.Principal
		if rt.auth && !(rt.path == metricsPath && s.metricsPublic) {
			var err error
			start := time.Now()
			p, err = s.gate.Authenticate(r)
			s.observeGate(start)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if info, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
				name := p.Name
				info.principal.Store(&name)
			}
		}
		if err := rt.handle(s, w, r, p); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// writeError sends err as a JSON error body.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e, body := s.errorResponse(r, err)
	s.gateRefusal(r, e)
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="moat"`)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, e.Status, body)
}

// errorResponse maps err (apiError) to its body. Internal errors are logged with the
// request id, and the caller gets the id and a generic message.
func (s *Server) errorResponse(r *http.Request, err error) (*Error, errorBody) {
	e, internal := apiError(err)
	body := errorBody{Error: errorDetail{Code: e.Code, Message: e.Message}}
	if internal {
		id := requestID(r)
		s.log.Error("internal error", "request_id", id, "method", r.Method, "route", r.Pattern, "err", err)
		body.Error.Message = "internal error (request id " + id + "); the server's log has the details"
		body.Error.RequestID = id
	}
	return e, body
}

// writeJSON sends v with status. Encoding failures are bugs of moat's own types.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal_error","message":"internal error: cannot encode the response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// marshal encodes v as one line of JSON, without HTML escaping (as moat run --json).
func marshal(v any) ([]byte, error) {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(sb.String(), "\n")), nil
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func requestID(r *http.Request) string {
	if info, ok := r.Context().Value(ctxKey{}).(*reqInfo); ok {
		return info.id
	}
	return "-"
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request, _ *gate.Principal) error {
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
	return nil
}

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return append([]byte(nil), openapiDoc...) }

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request, _ *gate.Principal) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openapiDoc)))
	_, _ = w.Write(openapiDoc)
	return nil
}

// statusWriter records the status for the request log. It unwraps for
// http.ResponseController (Flush, read deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headerProbe catches what the mux's not-found and method-not-allowed handlers send.
type headerProbe struct {
	h      http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.h }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int)        { p.status = code }

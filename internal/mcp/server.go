package mcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/session"
)

// Engine is what the MCP server needs of the engine; *engine.Engine implements it.
type Engine interface {
	Execute(ctx context.Context, req *engine.Request) (*box.Result, error)
	CreateSession(ctx context.Context, req *engine.SessionRequest) (engine.SessionInfo, error)
	Sessions(owner string) []engine.SessionInfo
	Session(owner, id string) (engine.SessionInfo, error)
	DeleteSessionAs(c engine.Caller, owner, id string) error
	SessionExecute(ctx context.Context, owner, id string, req *engine.CallRequest) (*box.Result, error)
	PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) error
	GetFile(ctx context.Context, owner, id, path string, w io.Writer) (int64, error)
	ListFiles(ctx context.Context, owner, id, dir string) ([]box.FileInfo, error)
	// NetworkSummary says in words what code under a profile may reach.
	NetworkSummary(profile string) string
}

// Gate authenticates HTTP requests and meters principals; *gate.Gate implements it.
type Gate interface {
	// Authenticate returns the principal of r, or gate.ErrUnauthenticated.
	Authenticate(r *http.Request) (*gate.Principal, error)
	// Begin takes one execution slot of p's quotas, or fails with a
	// *gate.QuotaError; the caller calls release when the execution ends.
	Begin(p *gate.Principal) (release func(), err error)
}

// Options configure a Server. Engine is required.
type Options struct {
	Engine Engine
	// Gate meters executions against their principal's quotas and authenticates
	// HTTP requests. Nil means no quotas (a local stdio server); Handler needs it.
	Gate Gate
	// Log receives one record per tool call and the details of internal errors;
	// never code, file contents, environment values or tokens.
	Log *slog.Logger
	// Version is moat's version, sent to clients as the server's.
	Version string
	// Grace is how long a client's sandbox sessions outlive its MCP session, so
	// that a client that reconnects (a new MCP session of the same principal) can
	// go on using them by id. Zero destroys them as soon as the MCP session ends.
	Grace time.Duration
	// IdleTTL and MaxLifetime are the server's session defaults, for the tools'
	// descriptions; zero: the session store's defaults.
	IdleTTL, MaxLifetime time.Duration
	// MaxUpload bounds a file_upload (DefaultMaxUpload).
	MaxUpload int64
	// OnRefused, when set, is told of each HTTP request the gate refused (status,
	// error code, message), for the audit trail and the metrics.
	OnRefused func(r *http.Request, status int, code, message, frontEnd string)
}

// Defaults of Options and of Handler.
const (
	DefaultMaxUpload = 8 << 20
	// DefaultGrace is the grace of an HTTP client's sessions (moat serve).
	DefaultGrace = 2 * time.Minute
	// DefaultSessionTimeout closes an HTTP MCP session that sent nothing for this
	// long (its sandbox sessions then get the grace).
	DefaultSessionTimeout = 30 * time.Minute
	// defaultIdleTTL and defaultMaxLifetime mirror the session store's defaults.
	defaultIdleTTL     = 10 * time.Minute
	defaultMaxLifetime = time.Hour
)

// Server is moat's MCP server: one SDK server per principal (the tools' schemas
// carry that principal's limits and profiles), and the clients — MCP sessions — with
// the sandbox sessions each owns. Build it with New; serve it with ServeStdio or
// Handler; Close destroys every client's sandbox sessions.
type Server struct {
	eng         Engine
	gate        Gate
	log         *slog.Logger
	version     string
	grace       time.Duration
	idleTTL     time.Duration
	maxLifetime time.Duration
	maxUpload   int64
	onRefused   func(r *http.Request, status int, code, message, frontEnd string)

	mu sync.Mutex
	// +checklocks:mu
	servers map[string]*sdk.Server // by principal name
	// +checklocks:mu
	clients map[*sdk.ServerSession]*client
	// +checklocks:mu
	creating map[string]*sync.Mutex // by principal name: serializes session creation
	// +checklocks:mu
	closed bool
}

// client is one MCP session and the sandbox sessions it owns. Its sandbox sessions
// are created under owner, a name of its own, so the engine keeps them from every
// other client; a session adopted after a reconnect keeps the owner it was created
// under.
type client struct {
	p     *gate.Principal
	ss    *sdk.ServerSession
	owner string
	out   outputs

	// Guarded by Server.mu.
	sessions map[string]string // sandbox session id -> its owner in the engine
	ended    bool              // the MCP session is over; sessions wait out the grace
	gone     bool              // the sessions were destroyed; nothing more is kept
	timer    *time.Timer
}

// New builds a Server.
func New(o Options) *Server {
	s := &Server{
		eng: o.Engine, gate: o.Gate, log: o.Log, version: o.Version, grace: o.Grace,
		idleTTL: o.IdleTTL, maxLifetime: o.MaxLifetime, maxUpload: o.MaxUpload, onRefused: o.OnRefused,
		servers: map[string]*sdk.Server{}, clients: map[*sdk.ServerSession]*client{},
		creating: map[string]*sync.Mutex{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.version == "" {
		s.version = "dev"
	}
	if s.idleTTL <= 0 {
		s.idleTTL = defaultIdleTTL
	}
	if s.maxLifetime <= 0 {
		s.maxLifetime = defaultMaxLifetime
	}
	if s.maxUpload <= 0 {
		s.maxUpload = DefaultMaxUpload
	}
	return s
}

// serverFor returns the SDK server of principal p, built on first use.
func (s *Server) serverFor(p *gate.Principal) *sdk.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ms, ok := s.servers[p.Name]; ok {
		return ms
	}
	ms := sdk.NewServer(&sdk.Implementation{Name: "moat", Title: "moat sandbox", Version: s.version},
		&sdk.ServerOptions{
			Instructions: instructions,
			Logger:       s.log,
			// No logging capability: moat sends no log messages to clients.
			Capabilities: &sdk.ServerCapabilities{},
		})
	ms.AddReceivingMiddleware(s.recoverPanics, clipErrors)
	s.addTools(ms, p)
	s.addResources(ms)
	s.servers[p.Name] = ms
	return ms
}

// client returns the client of MCP session ss, registering it on its first tool
// call; p is the principal the session was authenticated as.
func (s *Server) client(ss *sdk.ServerSession, p *gate.Principal) (*client, error) {
	if ss == nil {
		return nil, errors.New("mcp: a request without a session")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, session.ErrClosed
	}
	if c, ok := s.clients[ss]; ok {
		return c, nil
	}
	c := &client{p: p, ss: ss, owner: p.Name + "/mcp/" + rand.Text()[:16], sessions: map[string]string{}}
	s.clients[ss] = c
	go func() {
		_ = ss.Wait()
		s.ended(c)
	}()
	return c, nil
}

// lookup returns the client of ss if it has one.
func (s *Server) lookup(ss *sdk.ServerSession) (*client, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[ss]
	return c, ok
}

// ended starts the grace of a client whose MCP session is over: its sandbox
// sessions are destroyed when it ends, unless a reconnected client adopted them.
func (s *Server) ended(c *client) {
	s.mu.Lock()
	if c.ended || c.gone {
		s.mu.Unlock()
		return
	}
	c.ended = true
	if s.grace > 0 && len(c.sessions) > 0 && !s.closed {
		s.log.Info("mcp: client gone; its sessions wait out the grace", "principal", c.p.Name, "sessions", len(c.sessions), "grace", s.grace)
		c.timer = time.AfterFunc(s.grace, func() { s.destroy(c) })
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.destroy(c)
}

// destroy ends a client for good: its sandbox sessions are destroyed and its kept
// outputs dropped.
func (s *Server) destroy(c *client) {
	s.mu.Lock()
	if c.gone {
		s.mu.Unlock()
		return
	}
	c.gone = true
	if c.timer != nil {
		c.timer.Stop()
	}
	if s.clients[c.ss] == c {
		delete(s.clients, c.ss)
	}
	sessions := c.sessions
	c.sessions = map[string]string{}
	s.mu.Unlock()

	c.out.clear()
	for id, owner := range sessions {
		s.deleteSession(c.p, owner, id)
	}
	if len(sessions) > 0 {
		s.log.Info("mcp: destroyed the sessions of a client that is gone", "principal", c.p.Name, "sessions", len(sessions))
	}
}

// deleteSession destroys one sandbox session of a client that is gone; one that
// already ended is fine.
func (s *Server) deleteSession(p *gate.Principal, owner, id string) {
	err := s.eng.DeleteSessionAs(engine.Caller{Principal: p.Name, FrontEnd: audit.FrontEndMCP}, owner, id)
	if err != nil && !errors.Is(err, session.ErrNotFound) && !errors.Is(err, session.ErrLost) && !errors.Is(err, session.ErrClosed) {
		s.log.Warn("mcp: destroy a session", "session_id", id, "err", err)
	}
}

// owned returns the engine owner of sandbox session id for client c. A session of
// another client of the same principal whose MCP session ended and is in its grace
// is adopted: that is how a client that reconnected goes on with its sessions. Any
// other id is errNoSession.
func (s *Server) owned(c *client, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if owner, ok := c.sessions[id]; ok {
		return owner, nil
	}
	if c.gone {
		return "", errNoSession
	}
	for _, old := range s.clients {
		if old == c || !old.ended || old.gone || old.p.Name != c.p.Name {
			continue
		}
		if owner, ok := old.sessions[id]; ok {
			delete(old.sessions, id)
			c.sessions[id] = owner
			s.log.Info("mcp: a reconnected client took over a session", "principal", c.p.Name, "session_id", id)
			return owner, nil
		}
	}
	return "", errNoSession
}

// track records a sandbox session the client created. If the client is already
// gone (its MCP session ended during the creation), the session is destroyed.
func (s *Server) track(c *client, id, owner string) bool {
	s.mu.Lock()
	if !c.gone {
		c.sessions[id] = owner
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	s.deleteSession(c.p, owner, id)
	return false
}

// forget drops a destroyed session from the client.
func (s *Server) forget(c *client, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(c.sessions, id)
}

// sessionsOf returns the client's sandbox sessions, id -> owner.
func (s *Server) sessionsOf(c *client) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(c.sessions))
	for id, owner := range c.sessions {
		out[id] = owner
	}
	return out
}

// sessionSlots locks the principal's session creation and returns how many sessions
// c's own owner may hold so that the principal stays within its session quota
// across all its clients and the HTTP API. The caller calls unlock when the session
// is created (or not).
func (s *Server) sessionSlots(c *client) (max int, unlock func(), err error) {
	s.mu.Lock()
	mu := s.creating[c.p.Name]
	if mu == nil {
		mu = &sync.Mutex{}
		s.creating[c.p.Name] = mu
	}
	owners := map[string]bool{c.p.Name: true, c.owner: true}
	for _, o := range s.clients {
		if o.p.Name != c.p.Name {
			continue
		}
		owners[o.owner] = true
		for _, owner := range o.sessions {
			owners[owner] = true
		}
	}
	s.mu.Unlock()

	mu.Lock()
	total, own := 0, 0
	for owner := range owners {
		n := len(s.eng.Sessions(owner))
		total += n
		if owner == c.owner {
			own = n
		}
	}
	quota := c.p.Quotas.Sessions
	if quota <= 0 {
		quota = engine.DefaultMaxSessions
	}
	if total >= quota {
		mu.Unlock()
		return 0, nil, &gate.QuotaError{Principal: c.p.Name, Kind: gate.QuotaSessions, Limit: quota}
	}
	return quota - (total - own), mu.Unlock, nil
}

// Close ends every client: their MCP sessions are closed and their sandbox sessions
// destroyed at once, without grace. The server serves no tool call afterwards.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	clients := make([]*client, 0, len(s.clients))
	for _, c := range s.clients {
		clients = append(clients, c)
	}
	servers := make([]*sdk.Server, 0, len(s.servers))
	for _, ms := range s.servers {
		servers = append(servers, ms)
	}
	s.mu.Unlock()
	s.CloseSessions(servers...)
	for _, c := range clients {
		s.destroy(c)
	}
}

// CloseSessions closes every MCP session of the given SDK servers (all of them when
// none is given), so that a server shutting down is not held up by their open event
// streams. Their sandbox sessions get the grace, or Close's end.
func (s *Server) CloseSessions(servers ...*sdk.Server) {
	if len(servers) == 0 {
		s.mu.Lock()
		for _, ms := range s.servers {
			servers = append(servers, ms)
		}
		s.mu.Unlock()
	}
	for _, ms := range servers {
		for ss := range ms.Sessions() {
			_ = ss.Close()
		}
	}
}

// ServeStdio serves one client, authenticated as p, over in and out (an MCP host's
// pipes) until in ends or ctx is done; then its sandbox sessions are destroyed.
// Malformed input lines get a JSON-RPC error and do not end the session.
func (s *Server) ServeStdio(ctx context.Context, p *gate.Principal, in io.Reader, out io.Writer) error {
	ms := s.serverFor(p)
	ss, err := ms.Connect(ctx, newLineTransport(in, out, s.log), nil)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = ss.Close()
		<-done
		err = ctx.Err()
	}
	if c, ok := s.lookup(ss); ok {
		s.destroy(c)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// recoverPanics turns a panic while handling a request, in moat's handlers or in
// the SDK, into an internal error for that request: one malformed request must not
// end the process, and with it every client's sessions.
func (s *Server) recoverPanics(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (res sdk.Result, err error) {
		defer func() {
			if r := recover(); r != nil {
				id := newErrorID()
				s.log.Error("mcp: panic while handling a request", "method", method, "error_id", id, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				res, err = nil, &jsonrpc.Error{Code: codeInternalError, Message: "internal error in moat (error id " + id + "); the server's log has the details"}
			}
		}()
		return next(ctx, method, req)
	}
}

// MaxErrorText bounds the text of a failed tool call: the SDK's refusal of
// arguments that do not fit the schema quotes the offending value, which may be a
// megabyte of code or file content.
const MaxErrorText = 2 << 10

// clipErrors cuts the text blocks of a failed tool call to MaxErrorText.
func clipErrors(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if tr, ok := res.(*sdk.CallToolResult); ok && tr != nil && tr.IsError {
			for _, c := range tr.Content {
				if tc, ok := c.(*sdk.TextContent); ok {
					tc.Text, _ = clip(tc.Text, MaxErrorText, "the rest of this error is left out")
				}
			}
		}
		return res, err
	}
}

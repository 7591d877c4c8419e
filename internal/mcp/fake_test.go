package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/session"
)

// fakeEngine keeps sessions per owner in memory, as the engine's store does:
// another owner's session is session.ErrNotFound. Code is not run: "set K V" and
// "get K" use a session's variables, anything else is answered by run.
type fakeEngine struct {
	mu       sync.Mutex
	next     int
	sessions map[string]*fakeSession // by id
	lost     map[string]string       // id -> reason
	run      func(code string) box.Result
	requests []*engine.Request
	creates  []*engine.SessionRequest
	deleted  []string
	callers  []engine.Caller // of DeleteSessionAs
}

type fakeSession struct {
	owner, lang string
	vars        map[string]string
	files       map[string][]byte
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{sessions: map[string]*fakeSession{}, lost: map[string]string{},
		run: func(code string) box.Result { return box.Result{Status: box.StatusOK, Stdout: "ran: " + code + "\n"} }}
}

func (f *fakeEngine) Execute(_ context.Context, req *engine.Request) (*box.Result, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.callers = append(f.callers, req.Caller)
	run := f.run
	f.mu.Unlock()
	r := run(string(req.Code))
	r.Normalize()
	return &r, nil
}

func (f *fakeEngine) CreateSession(_ context.Context, req *engine.SessionRequest) (engine.SessionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	n := 0
	for _, s := range f.sessions {
		if s.owner == req.Owner {
			n++
		}
	}
	if n >= req.MaxSessions {
		return engine.SessionInfo{}, &session.LimitError{Scope: session.ScopeOwner, Limit: req.MaxSessions}
	}
	f.next++
	id := fmt.Sprintf("s_%d", f.next)
	f.sessions[id] = &fakeSession{owner: req.Owner, lang: req.Language, vars: map[string]string{}, files: map[string][]byte{}}
	return engine.SessionInfo{ID: id, Language: req.Language, Profile: req.Profile, State: "idle",
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(10 * time.Minute)}, nil
}

func (f *fakeEngine) get(owner, id string) (*fakeSession, error) {
	if reason, ok := f.lost[id]; ok {
		return nil, &session.LostError{ID: id, Reason: reason}
	}
	s, ok := f.sessions[id]
	if !ok || s.owner != owner {
		return nil, session.ErrNotFound
	}
	return s, nil
}

func (f *fakeEngine) Sessions(owner string) []engine.SessionInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []engine.SessionInfo{}
	for id, s := range f.sessions {
		if s.owner == owner {
			out = append(out, engine.SessionInfo{ID: id, Language: s.lang})
		}
	}
	return out
}

func (f *fakeEngine) Session(owner, id string) (engine.SessionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(owner, id)
	if err != nil {
		return engine.SessionInfo{}, err
	}
	return engine.SessionInfo{ID: id, Language: s.lang, State: "idle", ExpiresAt: time.Now().Add(time.Minute)}, nil
}

func (f *fakeEngine) DeleteSessionAs(c engine.Caller, owner, id string) error {
	f.mu.Lock()
	f.callers = append(f.callers, c)
	defer f.mu.Unlock()
	if _, err := f.get(owner, id); err != nil {
		return err
	}
	delete(f.sessions, id)
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeEngine) SessionExecute(_ context.Context, owner, id string, req *engine.CallRequest) (*box.Result, error) {
	f.mu.Lock()
	s, err := f.get(owner, id)
	run := f.run
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	code := string(req.Code)
	var r box.Result
	switch fields := strings.Fields(code); {
	case len(fields) == 3 && fields[0] == "set":
		s.vars[fields[1]] = fields[2]
		r = box.Result{Status: box.StatusOK}
	case len(fields) == 2 && fields[0] == "get":
		v, ok := s.vars[fields[1]]
		if !ok {
			r = box.Result{Status: box.StatusError, ExitCode: 1, Stderr: "NameError: name '" + fields[1] + "' is not defined\n"}
		} else {
			r = box.Result{Status: box.StatusOK, Result: &v}
		}
	default:
		f.mu.Unlock()
		r = run(code)
		f.mu.Lock()
	}
	f.mu.Unlock()
	r.Normalize()
	return &r, nil
}

func (f *fakeEngine) PutFile(_ context.Context, owner, id, path string, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return errors.New("size mismatch")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(owner, id)
	if err != nil {
		return err
	}
	s.files[path] = b
	return nil
}

func (f *fakeEngine) GetFile(_ context.Context, owner, id, path string, w io.Writer) (int64, error) {
	f.mu.Lock()
	s, err := f.get(owner, id)
	var b []byte
	if err == nil {
		var ok bool
		if b, ok = s.files[path]; !ok {
			err = fmt.Errorf("%w: %s", box.ErrFileNotFound, path)
		}
	}
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	// As the native backend: a failing writer gets no more, the whole file is
	// still read, and its error is returned.
	_, werr := w.Write(b)
	return int64(len(b)), werr
}

func (f *fakeEngine) ListFiles(_ context.Context, owner, id, dir string) ([]box.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(owner, id)
	if err != nil {
		return nil, err
	}
	var out []box.FileInfo
	for p, b := range s.files {
		if dir == "" || strings.HasPrefix(p, dir+"/") {
			out = append(out, box.FileInfo{Path: p, Size: int64(len(b))})
		}
	}
	slices.SortFunc(out, func(a, b box.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func (f *fakeEngine) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// fakeGate knows tokens ("Bearer <principal name>"); Begin refuses principals in busy.
type fakeGate struct {
	principals map[string]*gate.Principal
	busy       map[string]bool
}

func (g *fakeGate) Authenticate(r *http.Request) (*gate.Principal, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if p, known := g.principals[tok]; ok && known {
		return p, nil
	}
	return nil, gate.ErrUnauthenticated
}

func (g *fakeGate) Begin(p *gate.Principal) (func(), error) {
	if g.busy[p.Name] {
		return nil, &gate.QuotaError{Principal: p.Name, Kind: gate.QuotaConcurrent, Limit: 1, RetryAfter: time.Second}
	}
	return func() {}, nil
}

func principal(name string, others ...string) *gate.Principal {
	return &gate.Principal{Name: name, Profile: "default", Profiles: others,
		Quotas: gate.Quotas{Concurrent: 4, Sessions: 3, Rate: 1, Burst: 10}, MaxLimits: box.DefaultLimits}
}

// connect connects a new SDK client to s as principal p, in memory.
func connect(t *testing.T, s *Server, p *gate.Principal) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := s.serverFor(p).Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and fails the test on a protocol error.
func call(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// texts joins a result's text blocks.
func texts(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text + "\n")
		}
	}
	return b.String()
}

// sessionIDOf returns the session id in a session_create result.
func sessionIDOf(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	if res.IsError {
		t.Fatalf("session_create failed: %s", texts(res))
	}
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("session_create: structured content %T", res.StructuredContent)
	}
	id, _ := m["id"].(string)
	if id == "" {
		t.Fatalf("session_create: no id in %v", m)
	}
	return id
}

func (f *fakeEngine) NetworkSummary(string) string { return "no network" }

package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
)

// fakeGate knows tokens; Begin fails for principals in busy.
type fakeGate struct {
	tokens map[string]*gate.Principal
	busy   map[string]bool
	begun  int
}

func (g *fakeGate) Authenticate(r *http.Request) (*gate.Principal, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, gate.ErrUnauthenticated
	}
	p, ok := g.tokens[tok]
	if !ok {
		return nil, gate.ErrUnauthenticated
	}
	return p, nil
}

func (g *fakeGate) Begin(p *gate.Principal) (func(), error) {
	if g.busy[p.Name] {
		return nil, &gate.QuotaError{Principal: p.Name, Kind: gate.QuotaRate, Limit: 1, Rate: 1.0 / 60, RetryAfter: 1500 * time.Millisecond}
	}
	g.begun++
	return func() {}, nil
}

// fakeEngine records what it was asked and answers with err, or res after writing
// out to the live streams.
type fakeEngine struct {
	mu      sync.Mutex
	err     error
	res     box.Result
	out     []string // written to Stdout (even index) or Stderr (odd) in order
	lastReq *engine.Request
	lastSR  *engine.SessionRequest
	lastCR  *engine.CallRequest
	calls   []string // "method owner id path"
	files   map[string][]byte
	// errAfterOutput makes Execute write out, then fail.
	errAfterOutput bool
}

func (f *fakeEngine) record(s string) {
	f.mu.Lock()
	f.calls = append(f.calls, s)
	f.mu.Unlock()
}

func (f *fakeEngine) stream(stdout, stderr io.Writer) {
	for i, o := range f.out {
		w := stdout
		if i%2 == 1 {
			w = stderr
		}
		if w != nil {
			_, _ = io.WriteString(w, o)
		}
	}
}

func (f *fakeEngine) DeleteSessionAs(_ engine.Caller, owner, id string) error {
	return f.DeleteSession(owner, id)
}

func (f *fakeEngine) Execute(_ context.Context, req *engine.Request) (*box.Result, error) {
	f.lastReq = req
	f.record("execute")
	if f.err != nil && !f.errAfterOutput {
		return nil, f.err
	}
	f.stream(req.Stdout, req.Stderr)
	if f.err != nil {
		return nil, f.err
	}
	r := f.res
	r.Normalize()
	return &r, nil
}

func (f *fakeEngine) CreateSession(_ context.Context, req *engine.SessionRequest) (engine.SessionInfo, error) {
	f.lastSR = req
	f.record("create " + req.Owner)
	if f.err != nil {
		return engine.SessionInfo{}, f.err
	}
	return engine.SessionInfo{ID: "s1", Language: req.Language, Profile: req.Profile, State: "idle"}, nil
}

func (f *fakeEngine) Sessions(owner string) []engine.SessionInfo {
	f.record("list " + owner)
	return nil
}

func (f *fakeEngine) Session(owner, id string) (engine.SessionInfo, error) {
	f.record("get " + owner + " " + id)
	if f.err != nil {
		return engine.SessionInfo{}, f.err
	}
	return engine.SessionInfo{ID: id}, nil
}

func (f *fakeEngine) DeleteSession(owner, id string) error {
	f.record("delete " + owner + " " + id)
	return f.err
}

func (f *fakeEngine) SessionExecute(_ context.Context, owner, id string, req *engine.CallRequest) (*box.Result, error) {
	f.lastCR = req
	f.record("exec " + owner + " " + id)
	if f.err != nil && !f.errAfterOutput {
		return nil, f.err
	}
	f.stream(req.Stdout, req.Stderr)
	if f.err != nil {
		return nil, f.err
	}
	r := f.res
	r.Normalize()
	return &r, nil
}

func (f *fakeEngine) PutFile(_ context.Context, owner, id, path string, r io.Reader, size int64) error {
	f.record("put " + owner + " " + id + " " + path)
	if f.err != nil {
		return f.err
	}
	b, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return errors.New("size mismatch")
	}
	f.mu.Lock()
	if f.files == nil {
		f.files = map[string][]byte{}
	}
	f.files[path] = b
	f.mu.Unlock()
	return nil
}

func (f *fakeEngine) GetFile(_ context.Context, owner, id, path string, w io.Writer) (int64, error) {
	f.record("getfile " + owner + " " + id + " " + path)
	if f.err != nil {
		return 0, f.err
	}
	f.mu.Lock()
	b, ok := f.files[path]
	f.mu.Unlock()
	if !ok {
		return 0, box.ErrFileNotFound
	}
	n, err := io.Copy(w, bytes.NewReader(b))
	return n, err
}

func (f *fakeEngine) ListFiles(_ context.Context, owner, id, dir string) ([]box.FileInfo, error) {
	f.record("ls " + owner + " " + id + " " + dir)
	if f.err != nil {
		return nil, f.err
	}
	return nil, nil
}

func (f *fakeEngine) RemoveFile(_ context.Context, owner, id, path string) error {
	f.record("rm " + owner + " " + id + " " + path)
	return f.err
}

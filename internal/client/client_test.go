package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
)

const token = "client-test-token-0123456789"

type testGate struct{ limited bool }

func (g *testGate) Authenticate(r *http.Request) (*gate.Principal, error) {
	if r.Header.Get("Authorization") != "Bearer "+token {
		return nil, gate.ErrUnauthenticated
	}
	return &gate.Principal{Name: "p", Profile: "default", MaxLimits: box.DefaultLimits}, nil
}

func (g *testGate) Begin(p *gate.Principal) (func(), error) {
	if g.limited {
		return nil, &gate.QuotaError{Principal: p.Name, Kind: gate.QuotaRate, Limit: 1, Rate: 1, RetryAfter: 3 * time.Second}
	}
	return func() {}, nil
}

// memEngine keeps sessions and files in memory.
type memEngine struct {
	mu    sync.Mutex
	files map[string][]byte
	err   error // returned by SessionExecute after its output
}

func (m *memEngine) Execute(_ context.Context, req *engine.Request) (*box.Result, error) {
	if req.Stdout != nil {
		_, _ = io.WriteString(req.Stdout, "out:"+string(req.Code))
		_, _ = io.WriteString(req.Stderr, "err")
	}
	r := &box.Result{Status: box.StatusOK, Stdout: "out:" + string(req.Code), Stderr: "err"}
	r.Normalize()
	return r, nil
}

func (m *memEngine) CreateSession(_ context.Context, req *engine.SessionRequest) (engine.SessionInfo, error) {
	return engine.SessionInfo{ID: "s1", Language: req.Language, Profile: req.Profile, State: "idle"}, nil
}

func (m *memEngine) Sessions(string) []engine.SessionInfo {
	return []engine.SessionInfo{{ID: "s1"}}
}

func (m *memEngine) Session(_, id string) (engine.SessionInfo, error) {
	if id != "s1" {
		return engine.SessionInfo{}, box.ErrSessionClosed
	}
	return engine.SessionInfo{ID: id}, nil
}

func (m *memEngine) DeleteSession(string, string) error { return nil }

func (m *memEngine) SessionExecute(_ context.Context, _, _ string, req *engine.CallRequest) (*box.Result, error) {
	if req.Stdout != nil {
		_, _ = io.WriteString(req.Stdout, "partial")
	}
	if m.err != nil {
		return nil, m.err
	}
	r := &box.Result{Status: box.StatusOK, Stdout: "partial"}
	r.Normalize()
	return r, nil
}

func (m *memEngine) PutFile(_ context.Context, _, _, path string, r io.Reader, size int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return errors.New("size mismatch")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[path] = b
	return nil
}

func (m *memEngine) GetFile(_ context.Context, _, _, path string, w io.Writer) (int64, error) {
	m.mu.Lock()
	b, ok := m.files[path]
	m.mu.Unlock()
	if !ok {
		return 0, box.ErrFileNotFound
	}
	n, err := w.Write(b)
	return int64(n), err
}

func (m *memEngine) ListFiles(context.Context, string, string, string) ([]box.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []box.FileInfo
	for p, b := range m.files {
		out = append(out, box.FileInfo{Path: p, Size: int64(len(b))})
	}
	return out, nil
}

func (m *memEngine) RemoveFile(_ context.Context, _, _, path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.files[path]; !ok {
		return box.ErrFileNotFound
	}
	delete(m.files, path)
	return nil
}

func newServer(t *testing.T) (*Client, *memEngine, *testGate) {
	t.Helper()
	eng := &memEngine{files: map[string][]byte{}}
	g := &testGate{}
	ts := httptest.NewServer(api.New(api.Options{Engine: eng, Gate: g}))
	t.Cleanup(ts.Close)
	return New(ts.URL+"/", token), eng, g
}

func TestRoundTrips(t *testing.T) {
	c, _, _ := newServer(t)
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "1"}, nil)
	if err != nil || res.Stdout != "out:1" {
		t.Fatalf("execute: %+v %v", res, err)
	}
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "bash"})
	if err != nil || info.ID != "s1" || info.Language != "bash" {
		t.Fatalf("create: %+v %v", info, err)
	}
	list, err := c.ListSessions(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := c.GetSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}

	data := []byte{0, 1, 2, 0xfe, 0xff}
	for _, size := range []int64{int64(len(data)), -1} {
		put, err := c.PutFile(ctx, "s1", "dir/a b?.bin", bytes.NewReader(data), size)
		if err != nil || put.Path != "dir/a b?.bin" || put.Size != 5 {
			t.Fatalf("put (size %d): %+v %v", size, put, err)
		}
	}
	if _, err := c.PutFile(ctx, "s1", "empty", strings.NewReader(""), 0); err != nil {
		t.Fatalf("put empty: %v", err)
	}
	var got bytes.Buffer
	n, err := c.GetFile(ctx, "s1", "dir/a b?.bin", &got)
	if err != nil || n != 5 || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("get: %d %v %v", n, got.Bytes(), err)
	}
	files, err := c.ListFiles(ctx, "s1", "dir")
	if err != nil || len(files) != 2 {
		t.Fatalf("ls: %+v %v", files, err)
	}
	if err := c.RemoveFile(ctx, "s1", "dir/a b?.bin"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetFile(ctx, "s1", "dir/a b?.bin", io.Discard)
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != api.CodeFileNotFound {
		t.Fatalf("get removed: %v", err)
	}
}

func TestStreaming(t *testing.T) {
	c, eng, _ := newServer(t)
	ctx := context.Background()
	var stdout, stderr bytes.Buffer
	res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "x"}, &Streams{Stdout: &stdout, Stderr: &stderr})
	if err != nil || res.Status != box.StatusOK || stdout.String() != "out:x" || stderr.String() != "err" {
		t.Fatalf("stream: %+v %v stdout %q stderr %q", res, err, stdout.String(), stderr.String())
	}
	// An error after the stream began arrives as an error event.
	eng.err = box.ErrSessionLost
	stdout.Reset()
	_, err = c.SessionExecute(ctx, "s1", &api.CallRequest{Code: "x"}, &Streams{Stdout: &stdout})
	var e *Error
	if !errors.As(err, &e) || e.Code != api.CodeSessionLost || e.Status != 410 || stdout.String() != "partial" {
		t.Fatalf("error event: %v, stdout %q", err, stdout.String())
	}
}

func TestErrors(t *testing.T) {
	c, _, g := newServer(t)
	ctx := context.Background()

	_, err := New(c.BaseURL(), "wrong").ListSessions(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Status != 401 || e.Code != api.CodeUnauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	_, err = c.GetSession(ctx, "other")
	if !errors.As(err, &e) || e.Status != 404 || e.Code != api.CodeNotFound {
		t.Fatalf("unknown session: %v", err)
	}
	_, err = c.Execute(ctx, &api.ExecuteRequest{Language: "cobol", Code: "x"}, nil)
	if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, "cobol") || e.RequestID == "" {
		t.Fatalf("bad language: %+v", err)
	}
	g.limited = true
	_, err = c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "x"}, &Streams{Stdout: io.Discard})
	if !errors.As(err, &e) || e.Status != 429 || e.RetryAfter != 3*time.Second {
		t.Fatalf("rate limited: %+v", err)
	}
}

func TestServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = New("http://"+addr, token).Health(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot reach moat server at http://"+addr) {
		t.Fatalf("err = %v", err)
	}
	var e *Error
	var ue *UnreachableError
	if errors.As(err, &e) || !errors.As(err, &ue) {
		t.Fatalf("a transport failure is an *UnreachableError, not a server's answer: %T", err)
	}
}

func TestNotMoat(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
	}))
	defer ts.Close()
	_, err := New(ts.URL, token).ListSessions(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != 502 || e.Message != "bad gateway from a proxy" {
		t.Fatalf("err = %+v", err)
	}
}

package mcp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/gate"
)

// bearer adds a token to every request, as an MCP host configured with a header.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// headerSetter sets a header on every request.
type headerSetter struct {
	name, value string
	next        http.RoundTripper
}

func (h headerSetter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return h.next.RoundTrip(r)
}

func connectHTTP(t *testing.T, url, token string) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, MaxRetries: -1}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestHTTP(t *testing.T) {
	eng := newFakeEngine()
	g := &fakeGate{principals: map[string]*gate.Principal{"alice": principal("alice"), "bob": principal("bob")}, busy: map[string]bool{}}
	s := New(Options{Engine: eng, Gate: g, Grace: 200 * time.Millisecond})
	defer s.Close()
	ts := httptest.NewServer(s.Handler(0))
	defer ts.Close()

	t.Run("no token is 401 with the API's error body", func(t *testing.T) {
		for _, auth := range []string{"", "Bearer nobody", "Basic alice"} {
			req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			req.Header.Set("Content-Type", "application/json")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct{ Error struct{ Code string } }
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != 401 || e.Error.Code != "unauthenticated" || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%q: %d %s", auth, resp.StatusCode, body)
			}
		}
	})

	alice := connectHTTP(t, ts.URL, "alice")
	id := sessionIDOf(t, call(t, alice, "session_create", nil))

	t.Run("another principal cannot use the MCP session", func(t *testing.T) {
		req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"session_list"}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", alice.ID())
		req.Header.Set("Mcp-Protocol-Version", alice.InitializeResult().ProtocolVersion)
		req.Header.Set("Authorization", "Bearer bob")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("bob used alice's MCP session: %d", resp.StatusCode)
		}
	})

	t.Run("another principal cannot see the sandbox session", func(t *testing.T) {
		bob := connectHTTP(t, ts.URL, "bob")
		res := call(t, bob, "session_execute", map[string]any{"session_id": id, "code": "get x"})
		if !res.IsError || !strings.Contains(texts(res), "no such session") {
			t.Errorf("%s", texts(res))
		}
	})

	t.Run("a quota refusal is a tool error", func(t *testing.T) {
		g.busy["alice"] = true
		defer delete(g.busy, "alice")
		res := call(t, alice, "execute_python", map[string]any{"code": "x"})
		if !res.IsError || !strings.Contains(texts(res), "quota exceeded") {
			t.Errorf("%s", texts(res))
		}
	})

	t.Run("executions name their caller for the audit trail", func(t *testing.T) {
		spoofer := &http.Client{Transport: bearer{"bob", headerSetter{remoteHeader, "6.6.6.6:1", http.DefaultTransport}}}
		tr := &sdk.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: spoofer, MaxRetries: -1}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		call(t, cs, "execute_python", map[string]any{"code": "x"})
		eng.mu.Lock()
		c := eng.requests[len(eng.requests)-1].Caller
		eng.mu.Unlock()
		if c.Principal != "bob" || c.FrontEnd != "mcp" || c.RequestID == "" || !strings.HasPrefix(c.Remote, "127.0.0.1:") {
			t.Errorf("caller %+v", c)
		}
	})

	t.Run("a request through a rebound DNS name is refused", func(t *testing.T) {
		req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(`{}`))
		req.Host = "evil.example"
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("status %d, want 403", resp.StatusCode)
		}
	})

	t.Run("closing the MCP session destroys its sandbox sessions after the grace", func(t *testing.T) {
		if err := alice.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		eng.mu.Lock()
		_, live := eng.sessions[id]
		eng.mu.Unlock()
		if !live {
			t.Error("the session went before the grace")
		}
		waitFor(t, func() bool {
			eng.mu.Lock()
			defer eng.mu.Unlock()
			_, live := eng.sessions[id]
			return !live
		}, "the session to go after the grace")
	})
}

//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// This file holds black-box tests of moat's MCP server through the SDK's own client,
// over stdio (moat mcp, spawned as an MCP host does) and streamable HTTP (moat serve
// at /mcp), and a test that writes raw JSON-RPC lines to moat mcp, malformed ones
// included.

// mcpConfig is the config of the stdio tests: the defaults, and a file so that no
// config of the machine is read.
const mcpConfig = "profile: default\n"

// mcpStdio starts moat mcp and connects the SDK's client to it.
func mcpStdio(t *testing.T) *sdk.ClientSession {
	t.Helper()
	testutil.RequireRoot(t)
	cfg := writeFixture(t, t.TempDir(), "moat.yaml", []byte(mcpConfig))
	cmd := exec.Command(testutil.MoatBinary(t), "mcp", "--config", cfg)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "moat-test", Version: "1"}, nil).
		Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to moat mcp: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("moat mcp's stderr:\n%.20000s", stderr)
		}
	})
	return cs
}

// mcpHTTP connects the SDK's client to s's /mcp with key as the bearer token.
func mcpHTTP(t *testing.T, s *server, key string) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{
		Endpoint:   s.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{key, http.DefaultTransport}},
		MaxRetries: -1,
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "moat-test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect to %s/mcp: %v", s.url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// bearerTransport adds the API token to every request, as an MCP host configured
// with an Authorization header does.
type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpCall calls a tool and fails the test on a protocol error.
func mcpCall(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// mcpText joins a result's text blocks.
func mcpText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text + "\n")
		}
	}
	return b.String()
}

// mcpSession starts a session and returns its id.
func mcpSession(t *testing.T, cs *sdk.ClientSession, lang string) string {
	t.Helper()
	res := mcpCall(t, cs, "session_create", map[string]any{"language": lang})
	m, _ := res.StructuredContent.(map[string]any)
	id, _ := m["id"].(string)
	if res.IsError || id == "" {
		t.Fatalf("session_create: %s", mcpText(res))
	}
	return id
}

// mcpTransports runs f once over stdio and once over HTTP. connect returns a new
// client each time it is called: a new moat mcp process on stdio, a new MCP session
// of principal alice on the same server over HTTP.
func mcpTransports(t *testing.T, f func(t *testing.T, connect func() *sdk.ClientSession)) {
	t.Run("stdio", func(t *testing.T) {
		f(t, func() *sdk.ClientSession { return mcpStdio(t) })
	})
	t.Run("http", func(t *testing.T) {
		s := startServer(t, serverOpts{})
		f(t, func() *sdk.ClientSession { return mcpHTTP(t, s, keyAlice) })
	})
}

func TestMCPTools(t *testing.T) {
	before := baselineHost(t)
	mcpTransports(t, func(t *testing.T, connect func() *sdk.ClientSession) {
		cs := connect()
		ctx := context.Background()

		t.Run("list tools", func(t *testing.T) {
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
				if tool.Description == "" || tool.InputSchema == nil {
					t.Errorf("%s: no description or schema", tool.Name)
				}
			}
			if got := strings.Join(names, ","); got != "execute_python,execute_shell,file_download,file_list,file_upload,session_create,session_destroy,session_execute,session_list" {
				t.Errorf("tools: %s", got)
			}
		})

		t.Run("print(2+2)", func(t *testing.T) {
			res := mcpCall(t, cs, "execute_python", map[string]any{"code": "print(2+2)"})
			if res.IsError || !strings.HasPrefix(mcpText(res), "[stdout]\n4\n") || !strings.Contains(mcpText(res), "[status] ok") {
				t.Errorf("%s", mcpText(res))
			}
		})

		t.Run("shell", func(t *testing.T) {
			res := mcpCall(t, cs, "execute_shell", map[string]any{"command": "echo $((6*7)); exit 3"})
			if got := mcpText(res); !res.IsError || !strings.Contains(got, "[stdout]\n42\n") || !strings.Contains(got, "exited with status 3") {
				t.Errorf("isError=%v %s", res.IsError, got)
			}
		})

		t.Run("a blocked call", func(t *testing.T) {
			res := mcpCall(t, cs, "execute_python", map[string]any{"code": "import subprocess\nsubprocess.run(['id'])"})
			if got := mcpText(res); !res.IsError || !strings.Contains(got, "[blocked]") || !strings.Contains(got, "import of 'subprocess' is blocked by profile 'default'") {
				t.Errorf("isError=%v %s", res.IsError, got)
			}
		})

		t.Run("a timeout", func(t *testing.T) {
			start := time.Now()
			res := mcpCall(t, cs, "execute_python", map[string]any{"code": "import time\nprint('start', flush=True)\ntime.sleep(60)", "timeout_seconds": 2})
			if got := mcpText(res); !res.IsError || !strings.Contains(got, "[status] timeout") || !strings.Contains(got, "start") {
				t.Errorf("isError=%v %s", res.IsError, got)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("the timeout of 2s took %v", d)
			}
		})

		t.Run("a timeout over the cap is refused", func(t *testing.T) {
			res := mcpCall(t, cs, "execute_python", map[string]any{"code": "print(1)", "timeout_seconds": 3600})
			if !res.IsError || !strings.Contains(mcpText(res), "maximum") {
				t.Errorf("%s", mcpText(res))
			}
		})

		t.Run("a session keeps a variable", func(t *testing.T) {
			id := mcpSession(t, cs, "python")
			defer mcpCall(t, cs, "session_destroy", map[string]any{"session_id": id})
			if res := mcpCall(t, cs, "session_execute", map[string]any{"session_id": id, "code": "x = 41"}); res.IsError {
				t.Fatal(mcpText(res))
			}
			res := mcpCall(t, cs, "session_execute", map[string]any{"session_id": id, "code": "x + 1"})
			if got := mcpText(res); res.IsError || !strings.Contains(got, "[result]\n42") {
				t.Errorf("%s", got)
			}
			if got := mcpText(mcpCall(t, cs, "session_list", nil)); !strings.Contains(got, id) || !strings.Contains(got, "2 calls") {
				t.Errorf("session_list: %s", got)
			}
		})

		t.Run("a figure is image content", func(t *testing.T) {
			res := mcpCall(t, cs, "execute_python", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nprint('drawn')"})
			var img *sdk.ImageContent
			for _, c := range res.Content {
				if ic, ok := c.(*sdk.ImageContent); ok {
					img = ic
				}
			}
			if res.IsError || img == nil || img.MIMEType != "image/png" || !strings.HasPrefix(string(img.Data), "\x89PNG\r\n\x1a\n") {
				t.Fatalf("no PNG image: isError=%v %s", res.IsError, mcpText(res))
			}
		})

		t.Run("a file uploaded, used and downloaded", func(t *testing.T) {
			id := mcpSession(t, cs, "python")
			defer mcpCall(t, cs, "session_destroy", map[string]any{"session_id": id})
			csv := "name,value\na,100\nb,150\nc,200\n"
			if res := mcpCall(t, cs, "file_upload", map[string]any{"session_id": id, "path": "data.csv", "content": csv}); res.IsError {
				t.Fatal(mcpText(res))
			}
			code := "import os, pandas as pd\nos.makedirs('out', exist_ok=True)\ndf = pd.read_csv('data.csv')\ndf['double'] = df['value'] * 2\ndf.to_csv('out/result.csv', index=False)\ndf['value'].mean()"
			res := mcpCall(t, cs, "session_execute", map[string]any{"session_id": id, "code": code})
			if got := mcpText(res); res.IsError || !strings.Contains(got, "[result]\n150.0") {
				t.Fatalf("%s", got)
			}
			if got := mcpText(mcpCall(t, cs, "file_list", map[string]any{"session_id": id})); !strings.Contains(got, "data.csv  29 bytes") || !strings.Contains(got, "out/result.csv") {
				t.Errorf("file_list: %s", got)
			}
			res = mcpCall(t, cs, "file_download", map[string]any{"session_id": id, "path": "out/result.csv"})
			if got := mcpText(res); res.IsError || !strings.Contains(got, "name,value,double\na,100,200\nb,150,300\nc,200,400\n") {
				t.Errorf("file_download: %s", got)
			}
			png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
			mcpCall(t, cs, "file_upload", map[string]any{"session_id": id, "path": "bin/x.png", "content": png, "encoding": "base64"})
			res = mcpCall(t, cs, "file_download", map[string]any{"session_id": id, "path": "/workspace/bin/x.png"})
			if len(res.Content) != 2 {
				t.Fatalf("binary download: %+v", res.Content)
			}
			if ic, ok := res.Content[1].(*sdk.ImageContent); !ok || ic.MIMEType != "image/png" {
				t.Errorf("binary download: %+v", res.Content[1])
			}
			for _, p := range []string{"../../etc/shadow", "/etc/passwd", "missing.txt"} {
				if res := mcpCall(t, cs, "file_download", map[string]any{"session_id": id, "path": p}); !res.IsError {
					t.Errorf("%s: %s", p, mcpText(res))
				}
			}
		})

		t.Run("isolation between two clients", func(t *testing.T) {
			other := connect()
			id := mcpSession(t, cs, "bash")
			defer mcpCall(t, cs, "session_destroy", map[string]any{"session_id": id})
			mcpCall(t, cs, "session_execute", map[string]any{"session_id": id, "code": "export SECRET=mine; echo s3cret > f.txt"})
			for tool, args := range map[string]map[string]any{
				"session_execute": {"session_id": id, "code": "echo $SECRET"},
				"file_download":   {"session_id": id, "path": "f.txt"},
				"file_list":       {"session_id": id},
				"session_destroy": {"session_id": id},
			} {
				res := mcpCall(t, other, tool, args)
				if got := mcpText(res); !res.IsError || !strings.Contains(got, "no such session") {
					t.Errorf("%s from another client: %s", tool, got)
				}
			}
			if got := mcpText(mcpCall(t, other, "session_list", nil)); strings.Contains(got, id) {
				t.Errorf("another client lists the session: %s", got)
			}
			res := mcpCall(t, cs, "session_execute", map[string]any{"session_id": id, "code": "echo $SECRET; cat f.txt"})
			if got := mcpText(res); !strings.Contains(got, "mine\ns3cret\n") {
				t.Errorf("the owner lost its state: %s", got)
			}
		})
	})
	before.check(t)
}

// TestMCPHTTP covers what only the HTTP transport has: the gate, principals, and
// the end of an MCP session with its grace.
func TestMCPHTTP(t *testing.T) {
	t.Setenv("MOAT_MCP_GRACE", "2s")
	before := baselineHost(t)
	s := startServer(t, serverOpts{})

	t.Run("no token is 401", func(t *testing.T) {
		for _, key := range []string{"", "wrong"} {
			status, h, body := s.raw(t, "POST", "/mcp", key, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`), "Content-Type", "application/json")
			if status != 401 || errorCode(body) != "unauthenticated" || h.Get("WWW-Authenticate") == "" {
				t.Errorf("key %q: %d %s", key, status, body)
			}
		}
	})

	alice := mcpHTTP(t, s, keyAlice)
	id := mcpSession(t, alice, "python")
	mcpCall(t, alice, "session_execute", map[string]any{"session_id": id, "code": "x = 7"})

	t.Run("the principal's profiles and caps are in the schemas", func(t *testing.T) {
		res, err := alice.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name == "execute_python" {
				b, _ := json.Marshal(tool.InputSchema)
				if !strings.Contains(string(b), `"enum":["default","strict","open"]`) {
					t.Errorf("alice's profiles are not offered: %s", b)
				}
			}
		}
		res2 := mcpCall(t, alice, "execute_python", map[string]any{"code": "import subprocess\nprint(subprocess.run(['echo', 'ran'], capture_output=True, text=True).stdout)", "profile": "open"})
		if got := mcpText(res2); res2.IsError || !strings.Contains(got, "ran") {
			t.Errorf("profile open: %s", got)
		}
	})

	t.Run("another principal cannot use alice's session", func(t *testing.T) {
		bob := mcpHTTP(t, s, keyBob)
		res := mcpCall(t, bob, "session_execute", map[string]any{"session_id": id, "code": "x"})
		if !res.IsError || !strings.Contains(mcpText(res), "no such session") {
			t.Errorf("%s", mcpText(res))
		}
		status, _, _ := s.raw(t, "POST", "/mcp", keyBob, strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`),
			"Content-Type", "application/json", "Accept", "application/json, text/event-stream",
			"Mcp-Session-Id", alice.ID(), "Mcp-Protocol-Version", alice.InitializeResult().ProtocolVersion)
		if status != http.StatusForbidden {
			t.Errorf("bob's request in alice's MCP session: %d", status)
		}
	})

	t.Run("the API cannot see MCP sessions", func(t *testing.T) {
		list, err := s.client(keyAlice).ListSessions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range list {
			if info.ID == id {
				t.Errorf("the API lists the MCP client's session %s", id)
			}
		}
	})

	t.Run("a client that reconnects within the grace takes its session over", func(t *testing.T) {
		if err := alice.Close(); err != nil {
			t.Fatal(err)
		}
		again := mcpHTTP(t, s, keyAlice)
		res := mcpCall(t, again, "session_execute", map[string]any{"session_id": id, "code": "x * 6"})
		if got := mcpText(res); res.IsError || !strings.Contains(got, "[result]\n42") {
			t.Fatalf("%s", got)
		}
		// The new client's end destroys the session after the grace.
		if err := again.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		third := mcpHTTP(t, s, keyAlice)
		res = mcpCall(t, third, "session_execute", map[string]any{"session_id": id, "code": "x"})
		if !res.IsError || !strings.Contains(mcpText(res), "no such session") {
			t.Errorf("the session outlived its grace: %s", mcpText(res))
		}
		if !strings.Contains(s.stderr.String(), "destroyed the sessions of a client that is gone") {
			t.Errorf("the server did not log the destruction")
		}
	})

	s.assertServing(t)
	if code := s.stop(t, 30*time.Second); code != 0 {
		t.Errorf("moat serve exited %d", code)
	}
	before.check(t)
}

// TestMCPShutdownWithClients checks that a connected MCP client (with its open
// event stream and a live session) does not hold up a graceful shutdown.
func TestMCPShutdownWithClients(t *testing.T) {
	before := baselineHost(t)
	s := startServer(t, serverOpts{grace: "20s"})
	cs := mcpHTTP(t, s, keyAlice)
	mcpSession(t, cs, "python")
	start := time.Now()
	if code := s.stop(t, 30*time.Second); code != 0 {
		t.Errorf("moat serve exited %d", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the shutdown took %v with an MCP client connected", d)
	}
	before.check(t)
}

// TestMCPStdioRaw drives moat mcp with raw JSON-RPC lines, as an MCP host writes
// them, malformed ones among them: each gets an answer, and moat neither crashes
// nor ends the session until its input ends.
func TestMCPStdioRaw(t *testing.T) {
	testutil.RequireRoot(t)
	before := baselineHost(t)
	cfg := writeFixture(t, t.TempDir(), "moat.yaml", []byte(mcpConfig))
	cmd := exec.Command(testutil.MoatBinary(t), "mcp", "--config", cfg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("moat mcp's stderr:\n%.20000s", stderr)
		}
	}()
	answers := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"not_json": sc.Text()}
			}
			answers <- m
		}
		close(answers)
	}()
	// send writes one line and returns the next answer.
	send := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("write %q: %v (moat mcp died?)", line, err)
		}
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatalf("moat mcp closed its output after %q", line)
			}
			if _, bad := m["not_json"]; bad {
				t.Fatalf("moat mcp wrote a line that is not JSON: %v", m)
			}
			return m
		case <-time.After(60 * time.Second):
			t.Fatalf("no answer to %q", line)
		}
		return nil
	}
	errorCode := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		if e == nil {
			return 0
		}
		return e["code"].(float64)
	}
	result := func(m map[string]any) map[string]any {
		r, _ := m["result"].(map[string]any)
		if r == nil {
			t.Fatalf("no result: %v", m)
		}
		return r
	}

	init := result(send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`))
	if init["protocolVersion"] != "2025-06-18" || init["serverInfo"].(map[string]any)["name"] != "moat" {
		t.Errorf("initialize: %v", init)
	}
	if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	tools := result(send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))["tools"].([]any)
	if len(tools) != 9 {
		t.Errorf("%d tools", len(tools))
	}

	malformed := []struct {
		line string
		code float64
		id   any
	}{
		{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":`, -32700, nil},
		{`this is not json`, -32700, nil},
		{`[{"jsonrpc":"2.0","id":4,"method":"tools/list"}]`, -32600, nil},
		{`{"id":5,"method":"tools/list"}`, -32600, 5.0},
		{`{"jsonrpc":"2.0","id":"six"}`, -32600, "six"},
		{`{"jsonrpc":"2.0","id":7,"method":"no/such/method"}`, -32601, 7.0},
		{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"oops"}`, -32602, 8.0},
		{`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"print(1)"},"extra":1}}`, 0, 9.0},
		{fmt.Sprintf(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":%q}}}`, strings.Repeat("x", 2<<20)), 0, 10.0},
	}
	for _, m := range malformed {
		got := send(m.line)
		if errorCode(got) != m.code || got["id"] != m.id {
			t.Errorf("%.80s: answer %.300v, want code %v id %v", m.line, got, m.code, m.id)
		}
	}
	for _, call := range []struct {
		line    string
		isError bool
		want    string
	}{
		{`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"execute_python","arguments":null}}`, true, "code"},
		{`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"session_create","arguments":null}}`, false, "Started python session"},
		{`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":42}}}`, true, "code"},
		{`{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"execute_shell","arguments":{"command":"echo hi","bogus":true}}}`, true, "bogus"},
		{`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"nope","arguments":{}}}`, true, "nope"},
		{`{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"session_execute","arguments":{"session_id":"s_doesnotexist","code":"1"}}}`, true, "no such session"},
		{`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"print(2+2)"}}}`, false, "[stdout]\n4\n"},
	} {
		got := send(call.line)
		if e := errorCode(got); e != 0 {
			// An unknown tool may be a protocol error; it must still be answered.
			if !strings.Contains(call.line, `"nope"`) {
				t.Errorf("%.80s: protocol error %v", call.line, got)
			}
			continue
		}
		r := result(got)
		b, _ := json.Marshal(r["content"])
		isError, _ := r["isError"].(bool)
		if isError != call.isError || !strings.Contains(string(b), strings.ReplaceAll(call.want, "\n", `\n`)) {
			t.Errorf("%.80s: isError=%v %.300s", call.line, isError, b)
		}
		if len(b) > 8<<10 {
			t.Errorf("%.80s: a %d-byte answer", call.line, len(b))
		}
	}

	// The end of the input ends moat mcp, cleanly, with its sessions destroyed.
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("moat mcp: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("moat mcp did not exit at the end of its input")
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("moat mcp panicked:\n%s", stderr)
	}
	before.check(t)
}

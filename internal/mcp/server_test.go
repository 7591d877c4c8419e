package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/session"
)

func TestToolsAndSchemas(t *testing.T) {
	s := New(Options{Engine: newFakeEngine()})
	defer s.Close()
	t.Run("a principal without other profiles gets no profile argument", func(t *testing.T) {
		cs := connect(t, s, principal("alice"))
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		tools := map[string]*sdk.Tool{}
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
			tools[tool.Name] = tool
		}
		want := "execute_python execute_shell session_create session_execute session_destroy session_list file_upload file_download file_list"
		if got := strings.Join(names, " "); !sameWords(got, want) {
			t.Fatalf("tools %q, want %q", got, want)
		}
		schema := func(name string) map[string]any {
			b, _ := json.Marshal(tools[name].InputSchema)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			return m
		}
		py := schema("execute_python")
		props := py["properties"].(map[string]any)
		if _, ok := props["profile"]; ok {
			t.Errorf("execute_python offers profile to a principal with one profile: %v", props)
		}
		to := props["timeout_seconds"].(map[string]any)
		if to["minimum"] != 1.0 || to["maximum"] != 30.0 {
			t.Errorf("timeout_seconds bounds %v, want 1..30 (the principal's cap)", to)
		}
		if py["additionalProperties"] != false {
			t.Errorf("unknown arguments are not refused: %v", py)
		}
		if req := py["required"].([]any); len(req) != 1 || req[0] != "code" {
			t.Errorf("required %v, want [code]", req)
		}
		lang := schema("session_create")["properties"].(map[string]any)["language"].(map[string]any)
		if len(lang["enum"].([]any)) != 2 || lang["default"] != nil {
			t.Errorf("language %v", lang)
		}
		if !strings.Contains(tools["session_create"].Description, "at most 3 sessions") {
			t.Errorf("session_create does not state the session quota: %s", tools["session_create"].Description)
		}
	})
	t.Run("a principal with other profiles may pick among them", func(t *testing.T) {
		cs := connect(t, s, principal("bob", "strict"))
		res, _ := cs.ListTools(context.Background(), nil)
		for _, tool := range res.Tools {
			if tool.Name != "execute_shell" {
				continue
			}
			b, _ := json.Marshal(tool.InputSchema)
			if !strings.Contains(string(b), `"enum":["default","strict"]`) {
				t.Errorf("execute_shell schema %s lacks the profiles", b)
			}
		}
	})
}

func sameWords(a, b string) bool {
	x, y := strings.Fields(a), strings.Fields(b)
	if len(x) != len(y) {
		return false
	}
	seen := map[string]int{}
	for _, w := range x {
		seen[w]++
	}
	for _, w := range y {
		if seen[w]--; seen[w] < 0 {
			return false
		}
	}
	return true
}

func TestExecuteResults(t *testing.T) {
	eng := newFakeEngine()
	s := New(Options{Engine: eng})
	defer s.Close()
	cs := connect(t, s, principal("alice"))
	png := []byte("\x89PNG\r\n\x1a\nfake")
	value := "42"
	big := strings.Repeat("x", 3*MaxInlineOutput)
	results := map[string]box.Result{
		"ok":      {Status: box.StatusOK, Stdout: "4\n", Result: &value, DurationMS: 12},
		"figure":  {Status: box.StatusOK, Display: []box.Display{{MIMEType: "image/png", Data: base64.StdEncoding.EncodeToString(png)}}},
		"blocked": {Status: box.StatusBlocked, ExitCode: -1, Violations: []box.Violation{{Rule: "python.import", Detail: "import of 'subprocess' is blocked by profile 'default'", Line: 1}}},
		"timeout": {Status: box.StatusTimeout, ExitCode: -1, Stderr: "[moat: killed after the timeout of 1s]\n"},
		"error":   {Status: box.StatusError, ExitCode: 1, Stderr: "Traceback...\nZeroDivisionError\n"},
		"flood":   {Status: box.StatusOK, Stdout: "start" + big + "end", Truncated: true, Redactions: 2},
		"silent":  {Status: box.StatusOK},
		"refused": {Status: box.StatusError, ExitCode: 1, Egress: &box.EgressUsage{Refused: 1, Refusals: []box.EgressRefusal{{Dest: "evil.test:443", Via: "connect", Reason: "not in the allowlist"}}}},
	}
	eng.run = func(code string) box.Result { return results[code] }

	tests := []struct {
		code    string
		isError bool
		want    []string
	}{
		{"ok", false, []string{"[stdout]\n4\n", "[result]\n42", "[status] ok: exit code 0, 12 ms"}},
		{"blocked", true, []string{"[blocked]", "line 1: import of 'subprocess' is blocked by profile 'default'"}},
		{"timeout", true, []string{"[stderr]\n[moat: killed after the timeout", "[status] timeout"}},
		{"error", true, []string{"ZeroDivisionError", "exited with status 1"}},
		{"flood", false, []string{"[stdout]\nstart", "end\n", "bytes left out of", "moat://outputs/1/stdout", "[truncated]", "[redacted] 2 secret(s)"}},
		{"silent", false, []string{"no output"}},
		{"figure", false, []string{"1 figure(s) attached"}},
		{"refused", true, []string{"[network] 1 destination(s) refused", "- evil.test:443 (connect): not in the allowlist"}},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			res := call(t, cs, "execute_python", map[string]any{"code": tc.code})
			if res.IsError != tc.isError {
				t.Errorf("isError %v, want %v: %s", res.IsError, tc.isError, texts(res))
			}
			got := texts(res)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("result lacks %q:\n%s", w, got)
				}
			}
			if len(got) > 3*MaxInlineOutput {
				t.Errorf("result is %d bytes: output was not clipped", len(got))
			}
		})
	}

	t.Run("a figure is image content", func(t *testing.T) {
		res := call(t, cs, "execute_python", map[string]any{"code": "figure"})
		var img *sdk.ImageContent
		for _, c := range res.Content {
			if ic, ok := c.(*sdk.ImageContent); ok {
				img = ic
			}
		}
		if img == nil || img.MIMEType != "image/png" || string(img.Data) != string(png) {
			t.Fatalf("no PNG image content in %+v", res.Content)
		}
	})
	t.Run("clipped output is a resource the client can read", func(t *testing.T) {
		res := call(t, cs, "execute_python", map[string]any{"code": "flood"})
		var link *sdk.ResourceLink
		for _, c := range res.Content {
			if l, ok := c.(*sdk.ResourceLink); ok {
				link = l
			}
		}
		if link == nil {
			t.Fatalf("no resource link: %s", texts(res))
		}
		rr, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: link.URI})
		if err != nil {
			t.Fatal(err)
		}
		if rr.Contents[0].Text != results["flood"].Stdout {
			t.Errorf("the resource holds %d bytes, want the whole stdout", len(rr.Contents[0].Text))
		}
		other := connect(t, s, principal("alice"))
		call(t, other, "session_list", nil)
		if _, err := other.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: link.URI}); err == nil {
			t.Error("another client read this client's output")
		}
	})
	t.Run("bad arguments are tool errors", func(t *testing.T) {
		for _, args := range []map[string]any{
			{},
			{"code": ""},
			{"code": 5},
			{"code": "ok", "timeout_seconds": 31},
			{"code": "ok", "timeout_seconds": 0},
			{"code": "ok", "profile": "open"},
			{"code": "ok", "extra": true},
		} {
			res := call(t, cs, "execute_python", args)
			if !res.IsError {
				t.Errorf("%v: accepted: %s", args, texts(res))
			}
		}
	})
	t.Run("a timeout and a network are passed to the engine", func(t *testing.T) {
		call(t, cs, "execute_shell", map[string]any{"command": "ok", "timeout_seconds": 7, "network": "none"})
		eng.mu.Lock()
		last := eng.requests[len(eng.requests)-1]
		eng.mu.Unlock()
		if last.Language != "bash" || last.Limits.Timeout != 7*time.Second || last.Profile != "default" || last.Network != "none" {
			t.Errorf("request %+v", last)
		}
		if c := last.Caller; c.Principal != "alice" || c.FrontEnd != "mcp" || c.RequestID == "" || c.Remote != "" {
			t.Errorf("caller %+v", c)
		}
	})
}

func TestSessions(t *testing.T) {
	eng := newFakeEngine()
	s := New(Options{Engine: eng})
	defer s.Close()
	alice := principal("alice")
	a1, a2 := connect(t, s, alice), connect(t, s, alice)

	id := sessionIDOf(t, call(t, a1, "session_create", map[string]any{"language": "python"}))
	if res := call(t, a1, "session_execute", map[string]any{"session_id": id, "code": "set x 5"}); res.IsError {
		t.Fatal(texts(res))
	}
	if got := texts(call(t, a1, "session_execute", map[string]any{"session_id": id, "code": "get x"})); !strings.Contains(got, "[result]\n5") {
		t.Errorf("the variable did not persist: %s", got)
	}

	t.Run("another client of the same principal cannot see or use the session", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{"session_execute", map[string]any{"session_id": id, "code": "get x"}},
			{"session_destroy", map[string]any{"session_id": id}},
			{"file_upload", map[string]any{"session_id": id, "path": "a", "content": "x"}},
			{"file_download", map[string]any{"session_id": id, "path": "a"}},
			{"file_list", map[string]any{"session_id": id}},
		} {
			res := call(t, a2, tc.tool, tc.args)
			if !res.IsError || !strings.Contains(texts(res), "no such session") {
				t.Errorf("%s: %s", tc.tool, texts(res))
			}
		}
		if got := texts(call(t, a2, "session_list", nil)); strings.Contains(got, id) {
			t.Errorf("session_list of another client shows %s: %s", id, got)
		}
		if got := texts(call(t, a1, "session_list", nil)); !strings.Contains(got, id) {
			t.Errorf("session_list does not show %s: %s", id, got)
		}
	})

	t.Run("the principal's session quota holds across its clients", func(t *testing.T) {
		sessionIDOf(t, call(t, a2, "session_create", nil))
		sessionIDOf(t, call(t, a2, "session_create", map[string]any{"language": "bash"}))
		res := call(t, a1, "session_create", nil)
		if !res.IsError || !strings.Contains(texts(res), "sessions quota") {
			t.Fatalf("a 4th session for a quota of 3: %s", texts(res))
		}
		bob := connect(t, s, principal("bob"))
		sessionIDOf(t, call(t, bob, "session_create", nil))
	})

	t.Run("a lost session says so", func(t *testing.T) {
		eng.mu.Lock()
		eng.lost[id] = "expired after 10m0s idle"
		eng.mu.Unlock()
		res := call(t, a1, "session_execute", map[string]any{"session_id": id, "code": "get x"})
		if got := texts(res); !res.IsError || !strings.Contains(got, "is lost: expired after 10m0s idle") || !strings.Contains(got, "session_create") {
			t.Errorf("%s", got)
		}
		eng.mu.Lock()
		delete(eng.lost, id)
		eng.mu.Unlock()
	})

	t.Run("destroy", func(t *testing.T) {
		if res := call(t, a1, "session_destroy", map[string]any{"session_id": id}); res.IsError {
			t.Fatal(texts(res))
		}
		if res := call(t, a1, "session_execute", map[string]any{"session_id": id, "code": "get x"}); !res.IsError {
			t.Errorf("a destroyed session answered: %s", texts(res))
		}
	})
}

func TestFiles(t *testing.T) {
	eng := newFakeEngine()
	s := New(Options{Engine: eng, MaxUpload: 4 << 20})
	defer s.Close()
	cs := connect(t, s, principal("alice"))
	id := sessionIDOf(t, call(t, cs, "session_create", nil))

	upload := func(path, content, enc string) *sdk.CallToolResult {
		return call(t, cs, "file_upload", map[string]any{"session_id": id, "path": path, "content": content, "encoding": enc})
	}
	download := func(path string) *sdk.CallToolResult {
		return call(t, cs, "file_download", map[string]any{"session_id": id, "path": path})
	}
	if res := upload("/workspace/data.csv", "a,b\n1,2\n", "text"); res.IsError || !strings.Contains(texts(res), `opens it as "data.csv"`) {
		t.Fatal(texts(res))
	}
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)
	blob := []byte{0, 1, 2, 3, 0xff}
	bigText := strings.Repeat("line of text\n", MaxInlineText/13+100)
	for name, data := range map[string][]byte{"plot.png": png, "blob.bin": blob, "big.txt": []byte(bigText), "huge.bin": make([]byte, MaxInlineImage+10)} {
		if res := upload(name, base64.StdEncoding.EncodeToString(data), "base64"); res.IsError {
			t.Fatalf("%s: %s", name, texts(res))
		}
	}

	t.Run("small text comes back as text", func(t *testing.T) {
		if got := texts(download("data.csv")); !strings.Contains(got, "[file data.csv, 8 bytes]\na,b\n1,2\n") {
			t.Error(got)
		}
	})
	t.Run("an image comes back as an image", func(t *testing.T) {
		res := download("plot.png")
		if ic, ok := res.Content[1].(*sdk.ImageContent); !ok || ic.MIMEType != "image/png" || len(ic.Data) != len(png) {
			t.Errorf("%+v", res.Content)
		}
	})
	t.Run("a small binary file is an embedded resource", func(t *testing.T) {
		res := download("blob.bin")
		er, ok := res.Content[1].(*sdk.EmbeddedResource)
		if !ok || string(er.Resource.Blob) != string(blob) || er.Resource.URI != "moat://sessions/"+id+"/files/blob.bin" {
			t.Errorf("%+v", res.Content)
		}
	})
	t.Run("a large file is a link, readable as a resource", func(t *testing.T) {
		for _, name := range []string{"big.txt", "huge.bin"} {
			res := download(name)
			got := texts(res)
			if !strings.Contains(got, "too large to return whole") || len(got) > 8<<10 {
				t.Errorf("%s: %.300s", name, got)
			}
			link, ok := res.Content[1].(*sdk.ResourceLink)
			if !ok {
				t.Fatalf("%s: no link: %+v", name, res.Content)
			}
			rr, err := cs.ReadResource(context.Background(), &sdk.ReadResourceParams{URI: link.URI})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if n := len(rr.Contents[0].Text) + len(rr.Contents[0].Blob); int64(n) != *link.Size {
				t.Errorf("%s: resource of %d bytes, link says %d", name, n, *link.Size)
			}
		}
		if got := texts(download("big.txt")); !strings.Contains(got, "its start follows]\nline of text\n") {
			t.Errorf("a large text file does not show its start: %.200s", got)
		}
	})
	t.Run("listing", func(t *testing.T) {
		got := texts(call(t, cs, "file_list", map[string]any{"session_id": id}))
		if !strings.Contains(got, "data.csv  8 bytes") || !strings.Contains(got, "plot.png") {
			t.Error(got)
		}
	})
	t.Run("bad paths and content are refused early", func(t *testing.T) {
		for _, res := range []*sdk.CallToolResult{
			upload("../etc/passwd", "x", "text"),
			upload("/etc/passwd", "x", "text"),
			upload("a\x00b", "x", "text"),
			upload("ok.bin", "not base64!", "base64"),
			upload("ok.txt", "x", "utf16"),
			upload("big", strings.Repeat("x", 4<<20+1), "text"),
			download("../../etc/shadow"),
			download("missing.txt"),
		} {
			if !res.IsError {
				t.Errorf("accepted: %s", texts(res))
			}
		}
	})
}

func TestClientEnd(t *testing.T) {
	t.Run("without grace a client's sessions go with it", func(t *testing.T) {
		eng := newFakeEngine()
		s := New(Options{Engine: eng})
		defer s.Close()
		cs := connect(t, s, principal("alice"))
		sessionIDOf(t, call(t, cs, "session_create", nil))
		sessionIDOf(t, call(t, cs, "session_create", nil))
		cs.Close()
		waitFor(t, func() bool { return eng.live() == 0 }, "the closed client's sessions to go")
		eng.mu.Lock()
		defer eng.mu.Unlock()
		for _, c := range eng.callers {
			if c.Principal != "alice" || c.FrontEnd != "mcp" {
				t.Errorf("a client's sessions destroyed as %+v", c)
			}
		}
	})
	t.Run("with grace a reconnected client takes its sessions over", func(t *testing.T) {
		eng := newFakeEngine()
		s := New(Options{Engine: eng, Grace: 300 * time.Millisecond})
		defer s.Close()
		alice := principal("alice")
		cs := connect(t, s, alice)
		kept := sessionIDOf(t, call(t, cs, "session_create", nil))
		dropped := sessionIDOf(t, call(t, cs, "session_create", nil))
		call(t, cs, "session_execute", map[string]any{"session_id": kept, "code": "set x 1"})
		cs.Close()
		time.Sleep(50 * time.Millisecond)

		bob := connect(t, s, principal("bob"))
		if res := call(t, bob, "session_execute", map[string]any{"session_id": kept, "code": "get x"}); !res.IsError {
			t.Fatalf("another principal took the session over: %s", texts(res))
		}
		again := connect(t, s, alice)
		if got := texts(call(t, again, "session_execute", map[string]any{"session_id": kept, "code": "get x"})); !strings.Contains(got, "[result]\n1") {
			t.Fatalf("the reconnected client could not use its session: %s", got)
		}
		waitFor(t, func() bool { return eng.live() == 1 }, "the session not taken over to go after the grace")
		eng.mu.Lock()
		_, keptLive := eng.sessions[kept]
		_, droppedLive := eng.sessions[dropped]
		eng.mu.Unlock()
		if !keptLive || droppedLive {
			t.Errorf("after the grace: the session taken over is live: %v (want true), the other: %v (want false)", keptLive, droppedLive)
		}
		again.Close()
		waitFor(t, func() bool { return eng.live() == 0 }, "the sessions of the second client to go")
	})
	t.Run("Close destroys every session", func(t *testing.T) {
		eng := newFakeEngine()
		s := New(Options{Engine: eng, Grace: time.Hour})
		cs := connect(t, s, principal("alice"))
		sessionIDOf(t, call(t, cs, "session_create", nil))
		s.Close()
		if eng.live() != 0 {
			t.Errorf("%d sessions left after Close", eng.live())
		}
		if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "session_list"}); err == nil && !res.IsError {
			t.Errorf("a closed server answered: %s", texts(res))
		}
	})
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err      error
		want     string
		internal bool
	}{
		{&session.LostError{ID: "s_1", Reason: "the box died: out of memory"}, "session s_1 is lost: the box died: out of memory", false},
		{session.ErrBusy, "serves one at a time", false},
		{&session.LimitError{Scope: session.ScopeTotal, Limit: 64}, "at most 64 on this server; destroy", false},
		{box.ErrFileNotFound, "file not found (file_list", false},
		{errorf("plain"), "plain", false},
		{context.Canceled, "cancelled", false},
		{errNoSession, "no such session", false},
		{&json.SyntaxError{}, "", true},
	} {
		got, internal := message(tc.err, "s_1")
		if internal != tc.internal || !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q internal=%v, want %q internal=%v", tc.err, got, internal, tc.want, tc.internal)
		}
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 100) // 200 bytes
	got, clipped := clip(s, 51, "see elsewhere")
	if !clipped || !strings.Contains(got, "see elsewhere") || !strings.HasPrefix(got, strings.Repeat("é", 12)) {
		t.Errorf("%q", got)
	}
	for _, part := range strings.Split(got, "\n") {
		if !strings.Contains(part, "[") && strings.ContainsRune(part, '\uFFFD') {
			t.Errorf("a rune was cut: %q", part)
		}
	}
	if got, clipped := clip("short", 10, ""); clipped || got != "short" {
		t.Errorf("%q", got)
	}
}

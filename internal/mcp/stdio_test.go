package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStdioMalformed drives ServeStdio with lines as a host (or noise) would write
// them: each malformed line gets a JSON-RPC error, the session goes on, and every
// call is answered before the end of the input ends it.
func TestStdioMalformed(t *testing.T) {
	eng := newFakeEngine()
	var logs syncBuffer
	s := New(Options{Engine: eng, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	defer s.Close()
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{not json`,
		`[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
		`{"foo":1}`,
		`{"jsonrpc":"2.0","id":"x7","foo":1}`,
		`{"jsonrpc":"1.0","id":3,"method":"tools/list"}`,
		``,
		`   `,
		`"just a string"`,
		`{"jsonrpc":"2.0","id":4,"method":"no/such/method"}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"session_create","arguments":null}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"not an object"}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"execute_python","arguments":{"code":"print(2+2)"}}}`,
		`{"jsonrpc":"2.0","id":99,"result":{}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`,
	}
	in := strings.NewReader(strings.Join(lines, "\n") + "\n")
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- s.ServeStdio(context.Background(), principal("local"), in, pw)
		pw.Close()
	}()

	byID := map[string]map[string]any{}
	var nullErrors []string
	sc := bufio.NewScanner(pr)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("the server wrote a line that is not JSON: %q", sc.Text())
		}
		if m["id"] == nil {
			e, _ := m["error"].(map[string]any)
			nullErrors = append(nullErrors, e["message"].(string))
			continue
		}
		b, _ := json.Marshal(m["id"])
		byID[string(b)] = m
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not end at the end of its input")
	}

	if len(nullErrors) != 4 { // not JSON, batch, {"foo":1}, a bare string
		t.Errorf("errors without id: %q", nullErrors)
	}
	errCode := func(id string) float64 {
		m, ok := byID[id]
		if !ok {
			t.Errorf("no answer to id %s", id)
			return 0
		}
		e, _ := m["error"].(map[string]any)
		if e == nil {
			return 0
		}
		return e["code"].(float64)
	}
	for id, want := range map[string]float64{`"x7"`: -32600, "3": -32600, "4": -32601, "7": -32602} {
		if got := errCode(id); got != want {
			t.Errorf("id %s: error code %v, want %v", id, got, want)
		}
	}
	for _, id := range []string{"1", "6", "8", "9"} {
		if byID[id]["result"] == nil {
			t.Errorf("id %s: no result: %v", id, byID[id])
		}
	}
	if r, _ := byID["5"]["result"].(map[string]any); r == nil && byID["5"]["error"] == nil {
		t.Errorf("id 5 (unknown tool): %v", byID["5"])
	}
	if got, _ := json.Marshal(byID["8"]["result"]); !strings.Contains(string(got), "ran: print(2+2)") {
		t.Errorf("the call was not run: %s", got)
	}
	if eng.live() != 0 {
		t.Errorf("%d sessions left after the end of the input", eng.live())
	}
	if strings.Contains(logs.String(), "panic") {
		t.Errorf("a request panicked:\n%s", logs.String())
	}
}

// syncBuffer is a log written by the server's goroutines while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestReadLine(t *testing.T) {
	r := bufio.NewReaderSize(strings.NewReader("short\n"+strings.Repeat("x", 100)+"\nafter\nlast"), 16)
	for _, want := range []struct {
		line    string
		tooLong bool
	}{{"short", false}, {"", true}, {"after", false}, {"last", false}} {
		line, tooLong, err := readLine(r, 50)
		if string(line) != want.line || tooLong != want.tooLong {
			t.Errorf("got %q tooLong=%v, want %q %v", line, tooLong, want.line, want.tooLong)
		}
		if want.line == "last" && err != io.EOF {
			t.Errorf("the last line: err %v, want EOF", err)
		}
	}
}

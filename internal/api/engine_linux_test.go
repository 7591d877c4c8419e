package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/childproc"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestMain lets the test binary act as the box's init: the native backend re-executes
// its own binary.
func TestMain(m *testing.M) {
	childproc.Dispatch()
	os.Exit(m.Run())
}

// realServer is an API server on a real engine with the native backend.
func realServer(t *testing.T) (*httptest.Server, *fakeGate) {
	t.Helper()
	testutil.RequireRoot(t)
	eng, err := engine.New(config.Default(), &native.Backend{}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	g := &fakeGate{tokens: map[string]*gate.Principal{tokAlice: {Name: "alice", Profile: "default", MaxLimits: box.DefaultLimits}}, busy: map[string]bool{}}
	ts := httptest.NewServer(New(Options{Engine: eng, Gate: g, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}))
	t.Cleanup(ts.Close)
	return ts, g
}

func post(t *testing.T, url, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestRealExecuteWithFiles(t *testing.T) {
	ts, _ := realServer(t)
	csv := "name,value\na,100\nb,200\n"
	body, _ := json.Marshal(ExecuteRequest{
		Language: "python",
		Code: "import csv\nrows = list(csv.DictReader(open('in/data.csv')))\n" +
			"open('out.txt', 'w').write('rows=%d' % len(rows))\nsum(int(r['value']) for r in rows) / len(rows)\n",
		Files: []InputFile{{Path: "in/data.csv", Content: base64.StdEncoding.EncodeToString([]byte(csv))}},
	})
	resp := post(t, ts.URL+"/v1/execute", string(body))
	var res box.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if res.Status != box.StatusOK || res.Result == nil || *res.Result != "150.0" {
		t.Fatalf("result %+v", res)
	}
}

func TestRealExecuteStreams(t *testing.T) {
	ts, _ := realServer(t)
	resp := post(t, ts.URL+"/v1/execute", `{"language":"bash","code":"echo one; echo two >&2; sleep 0.2; echo three; exit 3"}`, "Accept", "text/event-stream")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	events, _ := parseSSE(t, buf.String())
	// The filter holds output back in frames (to redact secrets split across
	// writes), so chunk boundaries are its own: compare the streams whole.
	out := map[string]string{}
	for _, ev := range events[:len(events)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatal(err)
		}
		out[ev.name] += c.Data
	}
	if out["stdout"] != "one\nthree\n" || out["stderr"] != "two\n" {
		t.Fatalf("streamed %q", out)
	}
	var res box.Result
	last := events[len(events)-1]
	if last.name != "result" || json.Unmarshal([]byte(last.data), &res) != nil || res.Status != box.StatusError || res.ExitCode != 3 {
		t.Fatalf("last event %+v", last)
	}
}

func TestRealExecuteBadProfile(t *testing.T) {
	ts, g := realServer(t)
	g.tokens[tokAlice].Profiles = []string{"nonexistent"}
	resp := post(t, ts.URL+"/v1/execute", `{"language":"bash","code":"echo","profile":"nonexistent"}`)
	var b errorBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil || resp.StatusCode != 400 || !strings.Contains(b.Error.Message, `unknown profile "nonexistent"`) {
		t.Fatalf("status %d %+v %v", resp.StatusCode, b, err)
	}
}

// testWriter sends the server's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

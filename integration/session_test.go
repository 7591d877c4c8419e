//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/client"
)

// sessionCall runs code in a session and fails the test on a transport error.
func sessionCall(t *testing.T, c *client.Client, id, code, timeout string) *box.Result {
	t.Helper()
	res, err := c.SessionExecute(context.Background(), id, &api.CallRequest{Code: code, Timeout: timeout}, nil)
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return res
}

func TestSessionMatplotlibFigure(t *testing.T) {
	s := startServer(t, serverOpts{})
	c := s.client(keyAlice)
	info, err := c.CreateSession(context.Background(), &api.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteSession(context.Background(), info.ID)
	res := sessionCall(t, c, info.ID, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('values')\nprint('drawn')", "")
	if res.Status != box.StatusOK || res.Stdout != "drawn\n" || len(res.Display) != 1 {
		t.Fatalf("figure call: %+v", res)
	}
	d := res.Display[0]
	png, err := base64.StdEncoding.DecodeString(d.Data)
	if d.MIMEType != "image/png" || err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
		t.Fatalf("display: %s, %d bytes, %v", d.MIMEType, len(png), err)
	}
	// The figure was shown once: the next call brings no stale display.
	if res := sessionCall(t, c, info.ID, "1 + 1", ""); len(res.Display) != 0 || res.Result == nil || *res.Result != "2" {
		t.Fatalf("next call: %+v", res)
	}
}

func TestSessionSurvivesTimeout(t *testing.T) {
	s := startServer(t, serverOpts{})
	c := s.client(keyAlice)
	for _, tc := range []struct{ lang, set, loop, get, want string }{
		{"python", "x = 41", "import time\nwhile True:\n    time.sleep(0.1)", "x + 1", "42"},
		{"python", "y = 'kept'", "while True:\n    pass", "y", "'kept'"},
		{"bash", "export Y=kept", "while :; do :; done", "echo $Y", "kept\n"},
	} {
		info, err := c.CreateSession(context.Background(), &api.SessionRequest{Language: tc.lang})
		if err != nil {
			t.Fatal(err)
		}
		sessionCall(t, c, info.ID, tc.set, "")
		start := time.Now()
		res := sessionCall(t, c, info.ID, tc.loop, "1s")
		if res.Status != box.StatusTimeout || !strings.Contains(res.Stderr, "session lives on") {
			t.Fatalf("%s loop: %+v", tc.lang, res)
		}
		if tc.lang == "python" && !strings.Contains(res.Stderr, "KeyboardInterrupt") {
			t.Fatalf("python loop: stderr %q, want a KeyboardInterrupt", res.Stderr)
		}
		if d := time.Since(start); d > 1*time.Second+box.InterruptGrace {
			t.Fatalf("%s: the interrupted call took %s", tc.lang, d)
		}
		res = sessionCall(t, c, info.ID, tc.get, "")
		got := res.Stdout
		if tc.lang == "python" && res.Result != nil {
			got = *res.Result
		}
		if res.Status != box.StatusOK || got != tc.want {
			t.Fatalf("%s after the timeout: %+v, want %q", tc.lang, res, tc.want)
		}
		if err := c.DeleteSession(context.Background(), info.ID); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSessionIdleExpiry(t *testing.T) {
	before := baselineHost(t)
	s := startServer(t, serverOpts{})
	c := s.client(keyAlice)
	ctx := context.Background()
	info, err := c.CreateSession(ctx, &api.SessionRequest{Language: "bash", IdleTTL: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	sessionCall(t, c, info.ID, "sleep 1000 & echo started", "")
	time.Sleep(2500 * time.Millisecond)
	_, err = c.GetSession(ctx, info.ID)
	if e := apiErr(t, err); e.Status != 410 || e.Code != "session_lost" || !strings.Contains(e.Message, "idle") {
		t.Fatalf("an expired session: %v", err)
	}
	_, err = c.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "echo hi"}, nil)
	if e := apiErr(t, err); e.Status != 410 || e.Code != "session_lost" {
		t.Fatalf("a call to an expired session: %v", err)
	}
	s.stop(t, 30*time.Second)
	before.check(t) // the expired session's box, and its background sleep, are gone
}

func TestSessionIsolation(t *testing.T) {
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	alice := s.client(keyAlice)
	a, err := alice.CreateSession(ctx, &api.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := alice.CreateSession(ctx, &api.SessionRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	res := sessionCall(t, alice, a.ID, `secret = 'only-in-a'
open('/workspace/a.txt', 'w').write('a')
open('/tmp/a.txt', 'w').write('a')
import threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
'ok'`, "")
	if res.Status != box.StatusOK {
		t.Fatalf("session a: %+v", res)
	}
	res = sessionCall(t, alice, b.ID, `import os
procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
('secret' in dir(), os.path.exists('/workspace/a.txt'), os.path.exists('/tmp/a.txt'), len(procs) <= 2)`, "")
	if res.Status != box.StatusOK || res.Result == nil || *res.Result != "(False, False, False, True)" {
		t.Fatalf("session b sees session a: %+v", res)
	}
	files, err := alice.ListFiles(ctx, b.ID, "")
	if err != nil || len(files) != 0 {
		t.Fatalf("session b's workspace: %+v %v", files, err)
	}
	// Another principal cannot see or touch alice's sessions at all.
	bob := s.client(keyBob)
	if _, err := bob.GetSession(ctx, a.ID); apiErr(t, err).Status != 404 {
		t.Fatalf("bob reads alice's session: %v", err)
	}
	if _, err := bob.SessionExecute(ctx, a.ID, &api.CallRequest{Code: "secret"}, nil); apiErr(t, err).Status != 404 {
		t.Fatalf("bob runs code in alice's session: %v", err)
	}
	var sink bytes.Buffer
	if _, err := bob.GetFile(ctx, a.ID, "a.txt", &sink); apiErr(t, err).Status != 404 || sink.Len() != 0 {
		t.Fatalf("bob downloads alice's file: %v", err)
	}
	if err := bob.DeleteSession(ctx, a.ID); apiErr(t, err).Status != 404 {
		t.Fatalf("bob deletes alice's session: %v", err)
	}
	if res := sessionCall(t, alice, a.ID, "secret", ""); res.Result == nil || *res.Result != "'only-in-a'" {
		t.Fatalf("alice's session after bob's attempts: %+v", res)
	}
}

//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/client"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestAttacksPooled runs the attack suite through a server whose warm pool serves
// Python executions of the attacks' profile ("open": policy off, the box alone must
// hold) from boxes made ahead of time. A pooled box must hold exactly as a cold one;
// each box serves one attack, so no attack sees another's traces either. The host is
// checked once the server has stopped (its pooled boxes live while it runs).
//
// The native backend forks each pooled box from a zygote, and the result's isolation
// says so: an attack served from the pool (the server's pool hits counter moved) must
// list "zygote" (a miss may be forked at once from its key's zygote too, or made
// cold when the key is new). Python attacks with the
// profile's own limits are all served from the pool, so a server whose pool silently
// made its boxes cold fails here.
func TestAttacksPooled(t *testing.T) {
	testutil.RequireRoot(t)
	before := snapshotHost(t)
	// Room for the keys of every attack's limits: none is dropped to make room for
	// another, so the warm key's boxes are always there.
	s := startServer(t, serverOpts{pool: "{size: 2, warm: [open], max_keys: 16}"})
	f := newFixtures(t, -1)
	env := []string{"MOAT_TOKEN=" + keyAlice}
	var pooled, warmKey int // attacks served from the pool; Python attacks of the warm key
	for _, a := range attacks() {
		t.Run(a.name, func(t *testing.T) {
			args := append([]string{"run", "--server", s.url, "--json", "--profile", "open", "--lang", a.lang}, a.args...)
			hitsBefore := awaitPoolFull(t, s)
			o := moatExecEnv(t, env, f.expand(a.code), args...)
			if err := json.Unmarshal([]byte(o.stdout), &o.res); o.exit != 0 || err != nil {
				t.Fatalf("moat run --server failed (%v):\n%s\n%s", err, o, o.stdout)
			}
			hit := metricsOf(t, s)["moat_pool_hits_total"] > hitsBefore
			if hit && !slices.Contains(o.res.Isolation, "zygote") {
				t.Errorf("served from the pool, isolation %v: want \"zygote\"", o.res.Isolation)
			}
			if hit {
				pooled++
			}
			if a.lang == "python" && len(a.args) == 0 {
				warmKey++
				if !hit {
					t.Errorf("a Python attack with the warm profile's limits was not served from the pool (isolation %v)", o.res.Isolation)
				}
			}
			if a.lang != "python" && hit {
				t.Errorf("a %s attack was served from the pool", a.lang)
			}
			okStatus := false
			for _, st := range a.status {
				okStatus = okStatus || o.res.Status == st
			}
			if !okStatus {
				t.Errorf("status %s, want one of %v\n%s", o.res.Status, a.status, o)
			}
			if a.check != nil {
				a.check(t, f, o)
			}
			f.assertCanaryIntact(t)
			if strings.Contains(o.stdout, hostSecret) {
				t.Errorf("the host secret leaked into the result")
			}
		})
	}
	if !strings.Contains(s.stderr.String(), "warm pool: on") {
		t.Fatalf("the server ran without its warm pool:\n%s", s.stderr)
	}
	t.Logf("%d attacks served from the pool, %d Python attacks with the warm profile's limits", pooled, warmKey)
	if warmKey < 10 {
		t.Errorf("only %d Python attacks with the warm profile's limits: the pool was hardly tested", warmKey)
	}
	s.stop(t, 30*time.Second)
	checkHostClean(t, before)
}

// awaitPoolFull waits until s's warm pool makes no box (every key it keeps has its
// ready boxes) and returns its hits so far.
func awaitPoolFull(t *testing.T, s *server) float64 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m := metricsOf(t, s)
		if m["moat_pool_making"] == 0 && m["moat_pool_ready"] >= 2 {
			return m["moat_pool_hits_total"]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool is still making boxes after 30s: ready %v, making %v", m["moat_pool_ready"], m["moat_pool_making"])
		}
	}
}

// soakDuration is how long TestPoolSoak keeps its clients busy, as issue 7 asks.
const soakDuration = 60 * time.Second

// TestPoolSoak keeps 8 clients executing back to back for a minute against a server
// whose warm pool (2 boxes) is emptied and refilled all the while. Every execution
// must come back ok from a whole, fresh box: the code checks for the marker the code
// of every execution leaves in /tmp, and for its interpreter being new (no variable
// of an earlier one). Busy answers (429, the principal's concurrency quota) are
// retried. Shutting the server down then destroys every box, pooled or in use: no
// box process or cgroup is left.
func TestPoolSoak(t *testing.T) {
	testutil.RequireRoot(t)
	before := snapshotHost(t)
	// alice with room for the 8 clients: the default quotas would answer most of
	// the load with 429s.
	s := startServer(t, serverOpts{config: "server:\n  pool: {size: 2, warm: [default]}\n  api_keys:\n" +
		"    - principal: alice\n      key_env: MOAT_TEST_KEY_ALICE\n      quotas: {concurrent: 8, rate: 100000/m}\n"})
	c := s.client(keyAlice)
	const probe = "import os\nfresh = not os.path.exists('/tmp/.soak') and 'soak_mark' not in globals()\n" +
		"open('/tmp/.soak', 'w').write('x')\nsoak_mark = 1\nprint('fresh' if fresh else 'REUSED')"
	var mu sync.Mutex
	var ok, busy int
	var failures []string
	deadline := time.Now().Add(soakDuration)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: probe}, nil)
				cancel()
				mu.Lock()
				var apiErr *client.Error
				switch {
				case errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests:
					busy++
				case err != nil:
					failures = append(failures, err.Error())
				case res.Status != box.StatusOK || res.Stdout != "fresh\n":
					failures = append(failures, fmt.Sprintf("status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr))
				default:
					ok++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d executions ok, %d busy answers, %d failures in %v", ok, busy, len(failures), soakDuration)
	if len(failures) > 0 {
		t.Errorf("%d executions failed, the first: %q", len(failures), failures[:min(3, len(failures))])
	}
	if ok < 300 || busy > ok {
		t.Errorf("only %d executions (and %d busy answers) in %v: the pool was not under load", ok, busy, soakDuration)
	}
	if !strings.Contains(s.stderr.String(), "warm pool: on") {
		t.Fatalf("the server ran without its warm pool:\n%s", s.stderr)
	}
	if code := s.stop(t, 30*time.Second); code != 0 {
		t.Errorf("moat serve exited %d after SIGTERM", code)
	}
	checkHostClean(t, before)
}

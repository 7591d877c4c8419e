//go:build integration

package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestAttacksPooled runs the attack suite through a server whose warm pool serves
// Python executions of the attacks' profile ("open": policy off, the box alone must
// hold) from boxes made ahead of time. A pooled box must hold exactly as a cold one;
// each box serves one attack, so no attack sees another's traces either. The host is
// checked once the server has stopped (its pooled boxes live while it runs).
func TestAttacksPooled(t *testing.T) {
	testutil.RequireRoot(t)
	before := snapshotHost(t)
	s := startServer(t, serverOpts{pool: "{size: 2, warm: [open]}"})
	f := newFixtures(t, -1)
	env := []string{"MOAT_TOKEN=" + keyAlice}
	for _, a := range attacks() {
		t.Run(a.name, func(t *testing.T) {
			args := append([]string{"run", "--server", s.url, "--json", "--profile", "open", "--lang", a.lang}, a.args...)
			o := moatExecEnv(t, env, f.expand(a.code), args...)
			if err := json.Unmarshal([]byte(o.stdout), &o.res); o.exit != 0 || err != nil {
				t.Fatalf("moat run --server failed (%v):\n%s\n%s", err, o, o.stdout)
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
	s.stop(t, 30*time.Second)
	checkHostClean(t, before)
}

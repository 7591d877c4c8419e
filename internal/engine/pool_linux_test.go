package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/childproc"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// TestMain lets the test binary act as the box's init (the native backend re-executes
// it).
func TestMain(m *testing.M) {
	childproc.Dispatch()
	os.Exit(m.Run())
}

func pooledEngine(t *testing.T, opts PoolOptions) *Engine {
	t.Helper()
	testutil.RequireRoot(t)
	e, err := New(config.Default(), &native.Backend{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.EnablePool(opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// waitReady waits until the pool holds n ready boxes.
func waitReady(t *testing.T, e *Engine, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.PoolStats().Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("the pool has %+v, want %d ready", e.PoolStats(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkZygote fails unless a box taken from the pool (pooled) was forked from a
// zygote, and a box made for its caller was not: the native backend forks every
// pooled Python box from its zygote, and says so in its isolation. A pool that
// silently made its boxes cold would pass every other check.
func checkZygote(t *testing.T, what string, pooled bool, isolation []string) {
	t.Helper()
	if pooled && !slices.Contains(isolation, "zygote") {
		t.Fatalf("%s: from the pool, isolation %v: want \"zygote\"", what, isolation)
	}
}

// TestPoolBoxServesOnce runs executions that each leave traces of every kind in
// their box; a later execution must find none of them, pooled or not.
func TestPoolBoxServesOnce(t *testing.T) {
	e := pooledEngine(t, PoolOptions{Size: 2, Warm: []string{"open"}})
	waitReady(t, e, 2)
	code := `import os, subprocess, sys
seen = [p for p in ('/workspace/trace', '/tmp/trace', '/dev/shm/trace') if os.path.exists(p)]
procs = [p for p in os.listdir('/proc') if p.isdigit() and open('/proc/%s/cmdline' % p, 'rb').read().startswith(b'sleep')]
print('seen', seen, 'procs', len(procs), 'env', os.environ.get('TRACE'), 'mod', 'trace_mod' in sys.modules, 'var', 'trace_var' in globals())
for p in ('/workspace/trace', '/tmp/trace', '/dev/shm/trace'):
    open(p, 'w').write('x')
os.environ['TRACE'] = '1'
sys.modules['trace_mod'] = sys
trace_var = 1
subprocess.Popen(['sleep', '1000'])
`
	for i := 0; i < 6; i++ {
		hits := e.PoolStats().Hits
		res, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte(code), Profile: "open"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != box.StatusOK || res.Stdout != "seen [] procs 0 env None mod False var False\n" {
			t.Fatalf("execution %d saw a previous one: %+v", i, res)
		}
		checkZygote(t, fmt.Sprintf("execution %d", i), e.PoolStats().Hits > hits, res.Isolation)
		time.Sleep(200 * time.Millisecond) // let the pool refill, so most runs are hits
	}
	if st := e.PoolStats(); st.Hits < 3 {
		t.Fatalf("pool stats %+v: want most executions served from the pool", st)
	}
}

// TestPoolTimeoutKillsTheBox: a pooled execution is killed at its timeout like a cold
// one, with the same result.
func TestPoolTimeoutKillsTheBox(t *testing.T) {
	e := pooledEngine(t, PoolOptions{Size: 1, Warm: []string{"default"}})
	waitReady(t, e, 1)
	// The timeout is one of the limits that key the pool: a first execution with it
	// (made for its caller) makes the pool keep boxes for it.
	lim := box.Limits{Timeout: time.Second}
	res, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte("pass"), Limits: lim})
	if err != nil || res.Status != box.StatusOK {
		t.Fatalf("warm the key: %+v %v", res, err)
	}
	waitReady(t, e, 2)
	start := time.Now()
	hits := e.PoolStats().Hits
	res, err = e.Execute(context.Background(), &Request{Language: "python", Code: []byte("print('started', flush=True)\nwhile True:\n    pass"), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	if e.PoolStats().Hits != hits+1 {
		t.Fatalf("the execution did not come from the pool: %+v", e.PoolStats())
	}
	checkZygote(t, "the timed-out execution", true, res.Isolation)
	if res.Status != box.StatusTimeout || res.Stdout != "started\n" || !strings.Contains(res.Stderr, "killed after the timeout of 1s") {
		t.Fatalf("timeout: %+v", res)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the timed-out execution took %s", d)
	}
}

// TestPoolUnderLoadAndClose: concurrent executions never get a half-made box, and
// Close leaves no box of this process behind.
func TestPoolUnderLoadAndClose(t *testing.T) {
	e := pooledEngine(t, PoolOptions{Size: 2, Warm: []string{"default"}})
	waitReady(t, e, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	var forked atomic.Int64 // executions whose box came from the zygote
	for c := 0; c < 4; c++ {
		wg.Go(func() {
			for i := 0; i < 8; i++ {
				res, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte(fmt.Sprintf("print(%d * %d)", c, i))})
				switch {
				case err != nil:
					errs <- err
				case res.Status != box.StatusOK || res.Stdout != fmt.Sprintf("%d\n", c*i):
					errs <- fmt.Errorf("client %d run %d: %+v", c, i, res)
				case slices.Contains(res.Isolation, "zygote"):
					forked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Every box was forked from the key's zygote, running since the pool filled: a
	// pool hit, or a miss made at once from the zygote.
	if st := e.PoolStats(); forked.Load() != 32 || st.Hits == 0 {
		t.Errorf("%d of 32 executions in zygote boxes, pool stats %+v: want all", forked.Load(), st)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	pattern := fmt.Sprintf("/sys/fs/cgroup/*/moat/box-%d-*", os.Getpid())
	if left, _ := filepath.Glob(pattern); len(left) > 0 {
		t.Fatalf("boxes left after Close: %v", left)
	}
	if st := e.PoolStats(); st.Ready != 0 || st.Making != 0 {
		t.Fatalf("pool after Close: %+v", st)
	}
}

// TestPoolPreloadAndSessions: a profile's preload modules are imported before the code
// arrives, and sessions are served from the pool too.
func TestPoolPreloadAndSessions(t *testing.T) {
	testutil.RequireRoot(t)
	cfg, err := config.Parse("moat.yaml", []byte("profiles:\n  pre:\n    preload: [json, pandas]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, &native.Backend{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if err := e.EnablePool(PoolOptions{Size: 1, Warm: []string{"pre"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.EnableSessions(SessionOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, 1)
	code := "import sys\nprint('pandas' in sys.modules)\nimport pandas as pd\nprint(int(pd.DataFrame({'a': [1, 2]}).sum()['a']))"
	hits := e.PoolStats().Hits
	res, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte(code), Profile: "pre"})
	if err != nil || res.Status != box.StatusOK || res.Stdout != "True\n3\n" {
		t.Fatalf("pooled execution with preload: %+v %v", res, err)
	}
	if e.PoolStats().Hits != hits+1 {
		t.Fatalf("the execution did not come from the pool: %+v", e.PoolStats())
	}
	checkZygote(t, "pooled execution with preload", true, res.Isolation)
	waitReady(t, e, 1)
	hits = e.PoolStats().Hits
	info, err := e.CreateSession(context.Background(), &SessionRequest{Owner: "o", Language: "python", Profile: "pre"})
	if err != nil {
		t.Fatal(err)
	}
	if e.PoolStats().Hits != hits+1 {
		t.Fatalf("the session did not come from the pool: %+v", e.PoolStats())
	}
	checkZygote(t, "session from the pool", true, info.Isolation)
	res, err = e.SessionExecute(context.Background(), "o", info.ID, &CallRequest{Code: []byte("x = 2\nx * 21")})
	if err != nil || res.Result == nil || *res.Result != "42" {
		t.Fatalf("session from the pool: %+v %v", res, err)
	}
	checkZygote(t, "a call in the session from the pool", true, res.Isolation)
	// Without preload, the module is not there before the code imports it (a key the
	// pool does not hold yet: a box made for the execution).
	hits = e.PoolStats().Hits
	res, err = e.Execute(context.Background(), &Request{Language: "python", Code: []byte("import sys\nprint('pandas' in sys.modules)")})
	if err != nil || res.Stdout != "False\n" {
		t.Fatalf("default profile: %+v %v", res, err)
	}
	checkZygote(t, "default profile", e.PoolStats().Hits > hits, res.Isolation)
	if slices.Contains(res.Isolation, "zygote") {
		t.Fatalf("default profile: the first box of a key the pool did not hold came from a zygote: %v", res.Isolation)
	}
}

// TestPoolWithoutZygote: with NoZygote (server.pool.zygote: false) the pool's boxes
// start their own interpreters, on a hit and on a miss alike.
func TestPoolWithoutZygote(t *testing.T) {
	e := pooledEngine(t, PoolOptions{Size: 1, Warm: []string{"default"}, NoZygote: true})
	waitReady(t, e, 1)
	for i := range 2 {
		hits := e.PoolStats().Hits
		res, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte("print(1)")})
		if err != nil || res.Status != box.StatusOK || res.Stdout != "1\n" {
			t.Fatalf("execution %d: %+v %v", i, res, err)
		}
		if slices.Contains(res.Isolation, "zygote") {
			t.Fatalf("execution %d (pool hit: %v) came from a zygote: %v", i, e.PoolStats().Hits > hits, res.Isolation)
		}
	}
	if e.PoolStats().Hits == 0 {
		t.Fatal("no execution was served from the pool")
	}
}

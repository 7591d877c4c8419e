package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/config"
)

// TestBenchServerConfigs: the configs moat bench gives its servers are valid, with the
// pool and the preloading profile as the report describes them.
func TestBenchServerConfigs(t *testing.T) {
	for _, c := range []struct {
		name     string
		o        ownServerOptions
		pool     bool
		warm     []string
		profiles []string
	}{
		{"pool", ownServerOptions{name: "moat bench", principal: benchPrincipal, concurrent: 8, pool: benchPoolYAML,
			profiles: benchProfilesYAML, allowProfiles: []string{benchPreloadProfile}}, true, []string{"default", benchPreloadProfile}, []string{benchPreloadProfile}},
		{"no pool", ownServerOptions{name: "moat bench", principal: benchPrincipal, concurrent: 8, pool: "{size: 0}"}, false, nil, nil},
		{"loadtest", ownServerOptions{name: "moat loadtest", principal: loadOwnPrincipal, concurrent: 100}, true, []string{"default"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse("own.yaml", []byte(c.o.config()))
			if err != nil {
				t.Fatalf("%v\n%s", err, c.o.config())
			}
			srv, err := cfg.ResolveServer(func(k string) (string, bool) {
				return "0123456789abcdef0123456789abcdef", k == ownKeyEnv
			})
			if err != nil {
				t.Fatal(err)
			}
			if srv.Pool.Enabled != c.pool || !slices.Equal(srv.Pool.Warm, c.warm) && c.pool {
				t.Fatalf("pool %+v, want enabled %v, warm %v", srv.Pool, c.pool, c.warm)
			}
			if c.pool && c.o.pool != "" && srv.Pool.Size != benchPoolSize {
				t.Fatalf("pool size %d, want %d", srv.Pool.Size, benchPoolSize)
			}
			if len(srv.Keys) != 1 || srv.Keys[0].Quotas.Concurrent < c.o.concurrent || !slices.Equal(srv.Keys[0].Profiles, c.o.allowProfiles) {
				t.Fatalf("keys %+v, want one allowing %d at once and profiles %v", srv.Keys, c.o.concurrent, c.o.allowProfiles)
			}
			for _, p := range c.profiles {
				prof, err := cfg.ResolveProfile(p)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(prof.Preload, []string{"pandas"}) {
					t.Fatalf("profile %s preloads %v, want pandas", p, prof.Preload)
				}
			}
		})
	}
}

// TestMeasure: cases run interleaved, warm-ups are not counted, a failing case is
// reported and not run again, and ratios and inferred hits follow the rows.
func TestMeasure(t *testing.T) {
	var order []string
	runs := map[string]int{}
	mk := func(id string, d time.Duration, fail bool) benchCase {
		return benchCase{id: id, name: id, run: func() error {
			order = append(order, id)
			runs[id]++
			if fail {
				return errors.New("boom")
			}
			time.Sleep(d)
			return nil
		}}
	}
	rows := measure(context.Background(), []benchCase{
		mk("base", 4*time.Millisecond, false), mk("slow", 12*time.Millisecond, false),
		mk("fast", 0, false), mk("bad", 0, true),
	}, 5, 2)
	if got := strings.Join(order[:4], ","); got != "base,slow,fast,bad" {
		t.Fatalf("first round %s, want the cases in order", got)
	}
	if runs["base"] != 7 || runs["bad"] != 1 {
		t.Fatalf("runs %v: want 7 of each case (2 warm-ups), 1 of the failing one", runs)
	}
	if rows[0].Runs != 5 || rows[3].Error != "boom" || rows[3].Runs != 0 {
		t.Fatalf("rows %+v", rows)
	}
	ratios(rows)
	if rows[0].Ratio != 1 || rows[1].Ratio <= 1 || rows[2].Ratio >= 1 {
		t.Fatalf("ratios %v %v %v", rows[0].Ratio, rows[1].Ratio, rows[2].Ratio)
	}
}

// TestPoolCounters: a pooled case reads the server's pool metrics after each run
// and counts the hits and misses of its measured runs only.
func TestPoolCounters(t *testing.T) {
	var hits, misses, ready int
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "# HELP moat_pool_hits_total Warm pool.\n# TYPE moat_pool_hits_total counter\nmoat_pool_hits_total %d\n"+
			"moat_pool_misses_total %d\nmoat_pool_ready %d\nmoat_pool_making 0\nmoat_pool_keys 1\nmoat_pool_hits_total_other 99\n",
			hits, misses, ready)
	}))
	defer ts.Close()
	s := &benchServers{ctx: context.Background(), pool: &ownServer{url: ts.URL, key: "k"}, hits: map[string]int64{}, misses: map[string]int64{}}
	n := 0
	c := s.pooled(benchCase{id: "p", name: "p", run: func() error {
		n++
		if n%3 == 0 {
			misses++
		} else {
			hits++
		}
		ready = benchPoolSize
		return nil
	}}, s.pool)
	rows := measure(context.Background(), []benchCase{c}, 6, 2)
	s.poolHits(rows)
	if s.countErr != nil {
		t.Fatal(s.countErr)
	}
	// Runs 3 and 6 of the 8 missed; runs 1 and 2 were warm-ups.
	if rows[0].PoolHits == nil || *rows[0].PoolHits != 4 || *rows[0].PoolMisses != 2 {
		t.Fatalf("hits %v, misses %v; want 4 and 2", rows[0].PoolHits, rows[0].PoolMisses)
	}
	s.pool.key = "wrong"
	if _, err := s.poolState(s.pool); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("poolState with a wrong key: %v", err)
	}
}

// TestBenchReport: the markdown has every row, failures show in their row, and the
// JSON has every list even when empty.
func TestBenchReport(t *testing.T) {
	hits, misses := int64(39), int64(1)
	rep := &benchReport{Host: "2 CPUs", Runs: 40, Pool: benchPoolDesc,
		Latency: []benchRow{
			{ID: "bare", Name: "bare `python3 -c 'print(1)'`", Runs: 40, P50MS: 20, P90MS: 21, P99MS: 25, Ratio: 1},
			{ID: "api_pool", Name: "API execute, warm pool", Runs: 40, P50MS: 2.5, P90MS: 3, P99MS: 9, Ratio: 0.13, PoolHits: &hits, PoolMisses: &misses},
			{ID: "bwrap", Name: "bubblewrap, all namespaces", Skipped: "bwrap not installed"},
			{ID: "session", Name: "API session execute", Error: "connection refused"},
		},
		Throughput: []throughputRow{
			{Clients: 4, Executions: 160, OK: 160, PerSecond: 30.5, P50MS: 120, P99MS: 300, PoolHits: 12, PoolMisses: 148, BarePerSecond: 122, Ratio: 0.25},
			{Clients: 8, Executions: 160, OK: 160, PerSecond: 31, P50MS: 240, P99MS: 600, PoolHits: 8, PoolMisses: 152, BareError: "exit status 1"},
		},
		Memory: []memoryRow{{ID: "box_python", Name: "warm box, bare Python", Boxes: 2, Procs: 2, RSSMiB: 21.9, PSSMiB: 9.7, PrivateMiB: 7.2}},
		Policy: []policyRow{{Name: "shell checker", CostMS: 0.59, Share: 1}},
		Flood:  floodResult{Status: "output_limit", PeakRSSMiB: 20},
	}
	var md bytes.Buffer
	writeBenchReport(&md, rep)
	for _, want := range []string{
		"| bare `python3 -c 'print(1)'` | 40 | 20.0 ms | 21.0 ms | 25.0 ms | 1.00× |",
		"| API execute, warm pool (pool hits 39/40) | 40 | 2.50 ms | 3.00 ms | 9.00 ms | 0.13× |",
		"| bubblewrap, all namespaces | – | – | – | – | skipped: bwrap not installed |",
		"| API session execute | – | – | – | – | failed: connection refused |",
		"| 4 concurrent clients | 160 | 160 | 0 | 12/160 | 30.5 | 120.0 ms | 300.0 ms | 122.0 | 0.25× |",
		"| 8 concurrent clients | 160 | 160 | 0 | 8/160 | 31.0 | 240.0 ms | 600.0 ms | failed: exit status 1 | – |",
		"| warm box, bare Python | 2 | 2.0 | 21.9 MiB | 9.7 MiB | 7.2 MiB | – |",
		"| shell checker | 0.59 ms | 1.0% |",
		"status output_limit): 20.0 MiB",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	rep = &benchReport{}
	rep.normalize()
	var js bytes.Buffer
	printJSON(&js, rep)
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"latency", "pandas", "throughput", "memory", "policy", "failures"} {
		if l, ok := m[k].([]any); !ok || l == nil {
			t.Errorf("JSON %s = %v, want an empty list", k, m[k])
		}
	}
}

// TestBenchColdFloor: the floor of a cold moat run is moat's start plus the runner
// alone, against bare python3, and the report says it; without every part measured
// there is none.
func TestBenchColdFloor(t *testing.T) {
	rows := []benchRow{
		{ID: "bare", Runs: 5, P50MS: 10},
		{ID: "run_cold", Runs: 5, P50MS: 30},
		{ID: "moat_start", Runs: 5, P50MS: 4.25},
		{ID: "runner_alone", Runs: 5, P50MS: 8.5},
	}
	f, ok := coldFloorOf(rows)
	if !ok || f.FloorMS != 12.75 || f.Ratio != 1.275 || f.RestMS != 17.25 {
		t.Fatalf("floor %+v (%v), want 12.75 ms, 1.275×, rest 17.25 ms", f, ok)
	}
	var md bytes.Buffer
	writeBenchReport(&md, &benchReport{Latency: rows, ColdFloor: f})
	if want := "the two rows measured alone above: 12.8 ms, 1.27× bare python3 before any isolation"; !strings.Contains(md.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, md.String())
	}
	if want := "took the other 17.2 ms"; !strings.Contains(md.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, md.String())
	}
	rows[3] = benchRow{ID: "runner_alone", Skipped: "no runner"}
	if f, ok := coldFloorOf(rows); ok || f != (coldFloor{}) {
		t.Errorf("floor %+v without the runner measured, want none", f)
	}
	md.Reset()
	writeBenchReport(&md, &benchReport{Latency: rows})
	if strings.Contains(md.String(), "costs at least") {
		t.Errorf("report states a floor that was not measured:\n%s", md.String())
	}
}

// TestBenchBackendsUnavailable: with no daemon and no runsc, the docker and gvisor rows of the
// print(1) table are skipped, each saying why, and no case is made for them.
func TestBenchBackendsUnavailable(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte("backend:\n  gvisor: {runsc: /nonexistent/runsc}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	down := errors.New("down")
	srv := &benchServers{ctx: context.Background(), poolErr: down, nopoolErr: down, dockerSkip: "no daemon"}
	cases, skipped := printCases("/nonexistent/moat", srv, nil)
	for _, c := range cases {
		if strings.Contains(c.id, "docker") || strings.Contains(c.id, "gvisor") {
			t.Errorf("case %s made for an unavailable backend", c.id)
		}
	}
	got := map[string]string{}
	for _, r := range skipped {
		got[r.ID] = r.Skipped
	}
	for _, id := range []string{"run_docker", "run_gvisor", "api_pool_docker", "runner_alone"} {
		if why := got[id]; why == "" || strings.Contains(why, "\n") {
			t.Errorf("row %s: skipped %q, want one line saying why", id, why)
		}
	}
	if !strings.Contains(got["run_docker"], "no-docker.sock") {
		t.Errorf("run_docker skipped %q, want the daemon's address", got["run_docker"])
	}
}

//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// Compare with: go test -tags integration -run - -bench . ./integration/
// The ratio of the two is what `moat bench` reports as "ratio to bare python3".

func BenchmarkBarePython(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/usr/bin/python3", "-c", "print(1)").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMoatRunCold(b *testing.B) {
	testutil.RequireRoot(b)
	bin := testutil.MoatBinary(b)
	for b.Loop() {
		cmd := exec.Command(bin, "run", "--lang", "python", "-")
		cmd.Stdin = strings.NewReader("print(1)\n")
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "1\n" {
			b.Fatalf("moat run: %v: %q", err, out)
		}
	}
}

// benchReport is the part of `moat bench --json` the test checks.
type benchReport struct {
	Latency    []benchRow `json:"latency"`
	Pandas     []benchRow `json:"pandas"`
	Throughput []struct {
		Clients, Executions, OK, Errors int
		PerSecond                       float64 `json:"per_second"`
		BarePerSecond                   float64 `json:"bare_per_second"`
		Ratio                           float64 `json:"ratio_to_bare"`
	} `json:"throughput"`
	Memory []struct {
		ID         string  `json:"id"`
		RSSMiB     float64 `json:"rss_mib"`
		PrivateMiB float64 `json:"private_mib"`
		Error      string  `json:"error"`
	} `json:"memory"`
	ColdFloor struct {
		FloorMS float64 `json:"floor_ms"`
		Ratio   float64 `json:"ratio"`
		RestMS  float64 `json:"rest_ms"`
	} `json:"cold_floor"`
	Policy []struct {
		Name string `json:"name"`
	} `json:"policy"`
	Flood struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"flood"`
	Egress struct {
		Request     []benchRow `json:"request"`
		DownloadMiB int        `json:"download_mib"`
		Download    []struct {
			ID    string  `json:"id"`
			Runs  int     `json:"runs"`
			MBps  float64 `json:"mb_per_s"`
			Ratio float64 `json:"ratio"`
			Error string  `json:"error"`
		} `json:"download"`
	} `json:"egress"`
	Failures []string `json:"failures"`
}

type benchRow struct {
	ID      string  `json:"id"`
	Runs    int     `json:"runs"`
	P50MS   float64 `json:"p50_ms"`
	P90MS   float64 `json:"p90_ms"`
	P99MS   float64 `json:"p99_ms"`
	Ratio   float64 `json:"ratio"`
	Skipped string  `json:"skipped"`
	Error   string  `json:"error"`
}

// TestBenchShort runs `moat bench --short` as CI does, so the benchmark cannot rot:
// every row must be measured (bubblewrap and pandas may be skipped only where they
// are not installed, the docker and gvisor rows only where the backend is not
// available, and none in CI, which runs scripts/backends first). No timing is
// asserted, but the ratios to bare python3 must be positive and finite.
func TestBenchShort(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.MoatBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "bench", "--short", "--json")
	cmd.Env = append(os.Environ(), "MOAT_TOKEN=")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("moat bench --short took %v", time.Since(start).Round(time.Second))
	if err != nil {
		t.Errorf("moat bench --short: %v; stderr:\n%s", err, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("no JSON report: %v\nstdout: %.2000s\nstderr: %.4000s", err, out, stderr.String())
	}
	for _, f := range rep.Failures {
		t.Errorf("failure: %s", f)
	}

	_, noBwrap := exec.LookPath("bwrap")
	noPandas := exec.Command("/usr/bin/python3", "-c", "import pandas").Run()
	optional := map[string]error{"bwrap": noBwrap}
	for _, id := range []string{"pandas_bare", "pandas_run_cold", "pandas_pool", "pandas_preload"} {
		optional[id] = noPandas
	}
	// The bench says in the row why a backend is not available; outside CI that is
	// a skip.
	backendRows := []string{"run_docker", "run_gvisor", "api_pool_docker"}
	for _, id := range backendRows {
		optional[id] = errors.New("the backend may be unavailable here")
	}
	checkRows := func(table string, rows []benchRow, ids ...string) {
		t.Helper()
		got := map[string]benchRow{}
		for _, r := range rows {
			got[r.ID] = r
		}
		for _, id := range ids {
			r, ok := got[id]
			switch {
			case !ok:
				t.Errorf("%s: no row %s", table, id)
			case r.Skipped != "" && optional[id] != nil && !testutil.InCI():
				t.Logf("%s: %s skipped: %s", table, id, r.Skipped)
			case r.Runs == 0 || r.P50MS <= 0 || r.Error != "" || r.Skipped != "":
				t.Errorf("%s: row %s not measured: %+v", table, id, r)
			}
		}
		if len(rows) != len(ids) {
			t.Errorf("%s: %d rows, want %d (%v)", table, len(rows), len(ids), ids)
		}
	}
	checkRows("latency", rep.Latency, "bare", "bwrap", "run_cold", "moat_start", "runner_alone", "run_docker", "run_gvisor",
		"api_pool", "api_nopool", "session", "api_pool_docker")
	if f := rep.ColdFloor; f.FloorMS <= 0 || f.Ratio <= 0 || f.RestMS <= 0 {
		t.Errorf("cold floor %+v, want measured (the floor and the rest positive)", f)
	}
	for _, r := range rep.Latency {
		if r.Runs > 0 && (r.Ratio <= 0 || math.IsInf(r.Ratio, 0) || math.IsNaN(r.Ratio)) {
			t.Errorf("latency %s: ratio %v to bare python3", r.ID, r.Ratio)
		}
		if slices.Contains(backendRows, r.ID) && r.Runs > 0 && (r.P90MS < r.P50MS || r.P99MS < r.P90MS) {
			t.Errorf("latency %s: percentiles out of order: %+v", r.ID, r)
		}
	}
	checkRows("pandas", rep.Pandas, "pandas_bare", "pandas_run_cold", "pandas_pool", "pandas_preload")

	levels := []int{}
	for _, l := range rep.Throughput {
		levels = append(levels, l.Clients)
		if l.OK == 0 || l.OK != l.Executions || l.Errors != 0 || l.PerSecond <= 0 || l.BarePerSecond <= 0 || l.Ratio <= 0 {
			t.Errorf("throughput at %d clients: %+v", l.Clients, l)
		}
	}
	if want := []int{1, 2, 4, 8}; !slices.Equal(levels, want) {
		t.Errorf("throughput levels %v, want %v", levels, want)
	}

	mem := map[string]bool{}
	for _, m := range rep.Memory {
		mem[m.ID] = true
		if m.Error != "" || m.RSSMiB <= 0 {
			t.Errorf("memory %s: %+v", m.ID, m)
		}
	}
	wantMem := []string{"server_pool", "box_python", "server_nopool", "server_pool_peak"}
	if noPandas == nil {
		wantMem = append(wantMem, "box_pandas")
	}
	for _, id := range wantMem {
		if !mem[id] {
			t.Errorf("memory: no row %s", id)
		}
	}
	if len(rep.Policy) != 3 {
		t.Errorf("policy rows %+v, want 3", rep.Policy)
	}
	if rep.Flood.Status != "output_limit" || rep.Flood.Error != "" {
		t.Errorf("flood %+v, want status output_limit", rep.Flood)
	}

	// The egress proxy against a direct connection: measured, positive, and the
	// ratios finite (JSON has no infinity: a zero baseline shows as ratio 0).
	checkRows("egress request", rep.Egress.Request, "direct", "proxy")
	for _, r := range rep.Egress.Request {
		if r.Ratio <= 0 {
			t.Errorf("egress request %s: ratio %v", r.ID, r.Ratio)
		}
	}
	if rep.Egress.DownloadMiB != 10 {
		t.Errorf("egress download of %d MiB, want 10 with --short", rep.Egress.DownloadMiB)
	}
	var ids []string
	for _, d := range rep.Egress.Download {
		ids = append(ids, d.ID)
		if d.Error != "" || d.Runs == 0 || d.MBps <= 0 || d.Ratio <= 0 {
			t.Errorf("egress download %s not measured: %+v", d.ID, d)
		}
	}
	if want := []string{"direct", "proxy"}; !slices.Equal(ids, want) {
		t.Errorf("egress download rows %v, want %v", ids, want)
	}
}

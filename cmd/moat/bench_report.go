package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// benchReport is everything one moat bench run measured; --json prints it.
type benchReport struct {
	Host  string `json:"host"`
	Runs  int    `json:"runs"` // measured runs per latency case (-n)
	Short bool   `json:"short"`
	// LoadBefore and LoadAfter are the host's 1-minute load average at the start
	// and the end of the run.
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`
	// Loads say how busy the host was in each part of the run: other work on it,
	// or on other VMs sharing its CPUs, shows here.
	Loads    []partLoad `json:"loads"`
	ElapsedS float64    `json:"elapsed_s"`
	// Pool is the warm pool of the server the pooled cases ran against, as its
	// config says it.
	Pool string `json:"pool"`

	// Latency holds the print(1) cases and Pandas the pandas workload, each with
	// ratios to its first row (bare python3) measured in the same run.
	Latency    []benchRow      `json:"latency"`
	Pandas     []benchRow      `json:"pandas"`
	Throughput []throughputRow `json:"throughput"`
	Memory     []memoryRow     `json:"memory"`
	Policy     []policyRow     `json:"policy"`
	// ColdFloor is what a cold `moat run` costs at least in this design (zero when
	// its parts were not measured).
	ColdFloor coldFloor    `json:"cold_floor"`
	Flood     floodResult  `json:"flood"`
	Egress    egressReport `json:"egress"`
	// Failures lists what could not be measured; the exit status is 1 when any.
	Failures []string `json:"failures"`
}

// partLoad is how busy the host was during one part of the run.
type partLoad struct {
	Part string `json:"part"`
	// Load is the 1-minute load average as the part began.
	Load float64 `json:"load"`
	// StealPct is the share of the host's CPU time the hypervisor gave to other VMs
	// during the part.
	StealPct float64 `json:"steal_pct"`
}

// benchRow is one latency case.
type benchRow struct {
	ID    string  `json:"id"`
	Name  string  `json:"name"`
	Runs  int     `json:"runs"`
	P50MS float64 `json:"p50_ms"`
	P90MS float64 `json:"p90_ms"`
	P99MS float64 `json:"p99_ms"`
	// Ratio is P50 over the table's baseline P50.
	Ratio float64 `json:"ratio"`
	// PoolHits and PoolMisses are the warm pool's counters over the measured runs
	// (the server's moat_pool_hits_total and moat_pool_misses_total), for cases
	// served by the pool.
	PoolHits   *int64 `json:"pool_hits,omitempty"`
	PoolMisses *int64 `json:"pool_misses,omitempty"`
	Skipped    string `json:"skipped,omitempty"`
	Error      string `json:"error,omitempty"`

	times []time.Duration // sorted
}

// throughputRow is one level of concurrency.
type throughputRow struct {
	Clients    int     `json:"clients"`
	Executions int     `json:"executions"`
	OK         int     `json:"ok"`
	Errors     int     `json:"errors"`
	WallMS     float64 `json:"wall_ms"`
	PerSecond  float64 `json:"per_second"`
	P50MS      float64 `json:"p50_ms"`
	P99MS      float64 `json:"p99_ms"`
	// PoolHits and PoolMisses are the warm pool's counters over the level.
	PoolHits   int64  `json:"pool_hits"`
	PoolMisses int64  `json:"pool_misses"`
	Error      string `json:"error,omitempty"` // the first failure
	// BarePerSecond is the baseline measured right after the level: bare python3
	// -c 'print(1)' processes run by as many clients, each back to back; Ratio is
	// PerSecond over it (0 when either failed). BareError is the baseline's first
	// failure.
	BarePerSecond float64 `json:"bare_per_second"`
	Ratio         float64 `json:"ratio_to_bare"`
	BareError     string  `json:"bare_error,omitempty"`
}

// memoryRow is the memory of the server process or of one kind of warm box
// (averaged over the boxes of that kind).
type memoryRow struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Boxes is how many boxes were averaged (0 for the server) and Procs how many
	// processes one of them has.
	Boxes      int     `json:"boxes"`
	Procs      float64 `json:"processes"`
	RSSMiB     float64 `json:"rss_mib"`
	PSSMiB     float64 `json:"pss_mib"`
	PrivateMiB float64 `json:"private_mib"`
	CgroupMiB  float64 `json:"cgroup_mib,omitempty"` // the box's memory cgroup usage; 0 when unknown
	Error      string  `json:"error,omitempty"`
}

// policyRow is what the policy adds to one execution.
type policyRow struct {
	Name   string  `json:"name"`
	CostMS float64 `json:"cost_ms"`
	// Share is the cost over the p50 of `moat run` cold, in percent.
	Share float64 `json:"share_pct"`
}

// coldFloor is the floor of a cold `moat run` of print(1): moat's own start and exit
// plus the Python runner with no box, which no isolation can make cheaper, against
// the same run's bare python3; and what the rest of the cold run took (the box, the
// engine, the audit trail).
type coldFloor struct {
	FloorMS float64 `json:"floor_ms"`
	Ratio   float64 `json:"ratio"` // FloorMS over bare python3's p50
	RestMS  float64 `json:"rest_ms"`
}

// coldFloorOf computes the floor from the print(1) rows; ok is false when a row it
// needs was not measured.
func coldFloorOf(rows []benchRow) (f coldFloor, ok bool) {
	bare, cold := rowByID(rows, "bare"), rowByID(rows, "run_cold")
	start, runner := rowByID(rows, "moat_start"), rowByID(rows, "runner_alone")
	for _, r := range []benchRow{bare, cold, start, runner} {
		if r.Runs == 0 || r.P50MS <= 0 {
			return coldFloor{}, false
		}
	}
	f.FloorMS = round(start.P50MS+runner.P50MS, 100)
	f.Ratio = round(f.FloorMS/bare.P50MS, 1000)
	f.RestMS = round(cold.P50MS-f.FloorMS, 100)
	return f, true
}

// floodResult is moat's own peak RSS while a box floods its output.
type floodResult struct {
	Status     string  `json:"status"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	Error      string  `json:"error,omitempty"`
}

// set fills the percentiles from the measured times.
func (r *benchRow) set(times []time.Duration) {
	slices.Sort(times)
	r.times = times
	r.Runs = len(times)
	r.P50MS, r.P90MS, r.P99MS = benchMS(pct(times, 50)), benchMS(pct(times, 90)), benchMS(pct(times, 99))
}

// ratios sets each row's ratio to the first row's p50.
func ratios(rows []benchRow) {
	if len(rows) == 0 || rows[0].P50MS <= 0 {
		return
	}
	for i := range rows {
		if rows[i].Runs > 0 {
			rows[i].Ratio = round(rows[i].P50MS/rows[0].P50MS, 1000)
		}
	}
}

// normalize replaces nil lists with empty ones so the JSON shape never varies.
func (r *benchReport) normalize() {
	for _, l := range []*[]benchRow{&r.Latency, &r.Pandas, &r.Egress.Request} {
		if *l == nil {
			*l = []benchRow{}
		}
	}
	if r.Throughput == nil {
		r.Throughput = []throughputRow{}
	}
	if r.Memory == nil {
		r.Memory = []memoryRow{}
	}
	if r.Policy == nil {
		r.Policy = []policyRow{}
	}
	if r.Egress.Download == nil {
		r.Egress.Download = []downloadRow{}
	}
	if r.Failures == nil {
		r.Failures = []string{}
	}
	if r.Loads == nil {
		r.Loads = []partLoad{}
	}
}

// failed records what could not be measured.
func (r *benchReport) failed(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

func writeBenchReport(w io.Writer, r *benchReport) {
	fmt.Fprintf(w, "moat bench: %d runs per case, interleaved, on %s; %.0f s\n", r.Runs, r.Host, r.ElapsedS)
	var loads []string
	for _, l := range r.Loads {
		loads = append(loads, fmt.Sprintf("%s %.2f, %.1f%%", l.Part, l.Load, l.StealPct))
	}
	fmt.Fprintf(w, "host load by part (1-min load average as it began, CPU stolen by the hypervisor during it): %s; at the end %.2f\n\n",
		strings.Join(loads, "; "), r.LoadAfter)

	latencyTable(w, "case", "bare python3", r.Latency)
	if f := r.ColdFloor; f.FloorMS > 0 {
		fmt.Fprintf(w, "\nA cold `moat run` costs at least moat's own start and exit plus the Python runner, "+
			"the two rows measured alone above: %s, %s bare python3 before any isolation. "+
			"The box (namespaces, mounts, cgroup, its init, seccomp, Landlock, teardown), the engine and the audit trail "+
			"took the other %s of the cold run's p50.\n", fmtMS(f.FloorMS), ratio(f.Ratio), fmtMS(f.RestMS))
	}
	fmt.Fprintf(w, "\nAPI cases run against a `moat serve` started by the bench (pool %s) and one with the pool off, "+
		"serially; after each warm-pool run the bench waits until the pool is full again (its /metrics), "+
		"so every run finds the pool as an idle server has it. Pool hits and misses are the server's own counters. "+
		"Each session run follows an untimed call in the same session, as an agent's calls follow each other. "+
		"The docker and gvisor runs are `moat run --backend docker|gvisor` with the config moat run finds (one new container or sandbox each); "+
		"the docker warm pool is a third `moat serve --backend docker`, pool %s.\n\n", r.Pool, benchPoolPlainYAML)

	latencyTable(w, "pandas workload", "bare python3", r.Pandas)
	fmt.Fprintf(w, "\nThe workload is `%s`; the preloading profile extends default with `preload: [pandas]`, "+
		"so its pooled interpreters import pandas before code arrives.\n\n", benchPandasCode)

	fmt.Fprintln(w, "| throughput: fresh-box `print(1)`, warm pool | executions | ok | errors | pool hits | executions/s | p50 | p99 | bare python3 processes/s | ratio to bare |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, t := range r.Throughput {
		name := fmt.Sprintf("%d concurrent client", t.Clients)
		if t.Clients > 1 {
			name += "s"
		}
		bare, rel := "–", "–"
		switch {
		case t.BareError != "":
			bare = "failed: " + t.BareError
		case t.BarePerSecond > 0:
			bare = fmt.Sprintf("%.1f", t.BarePerSecond)
		}
		if t.Ratio > 0 {
			rel = ratio(t.Ratio)
		}
		if t.OK == 0 {
			fmt.Fprintf(w, "| %s | %d | 0 | %d | – | – | – | failed: %s | %s | – |\n", name, t.Executions, t.Errors, t.Error, bare)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d/%d | %.1f | %s | %s | %s | %s |\n", name, t.Executions, t.OK, t.Errors,
			t.PoolHits, t.PoolHits+t.PoolMisses, t.PerSecond, fmtMS(t.P50MS), fmtMS(t.P99MS), bare, rel)
	}
	fmt.Fprintln(w, "\nEach level starts with the pool full and runs its executions back to back per client; "+
		"executions/s counts the ok ones over the level's wall time; pool hits are the executions that found a ready box. "+
		"Right after each level, as many clients run bare `python3 -c 'print(1)'` processes back to back "+
		"(a fifth as many runs): the machine's own rate at that moment, which the ratio compares with.")
	fmt.Fprintln(w)

	fmt.Fprintln(w, "| memory | boxes | processes each | RSS | PSS | private | memory cgroup |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, m := range r.Memory {
		if m.Error != "" {
			fmt.Fprintf(w, "| %s | – | – | – | – | – | failed: %s |\n", m.Name, m.Error)
			continue
		}
		boxes := "–"
		if m.Boxes > 0 {
			boxes = fmt.Sprint(m.Boxes)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s | %s | %s |\n", m.Name, boxes, m.Procs, mib(m.RSSMiB), mib(m.PSSMiB), mib(m.PrivateMiB), mib(m.CgroupMiB))
	}
	fmt.Fprintln(w, "\nRSS, PSS and private (Private_Clean + Private_Dirty) are summed from /proc/PID/smaps_rollup "+
		"of the server's process, or of every process in a box's cgroups (box-SERVERPID-*), averaged over the ready boxes "+
		"once the pool is full and its boxes have used no CPU for 300 ms. PSS shares pages among the processes that map them; "+
		"private is what one more box costs. The memory cgroup column is the box cgroup's usage (page cache included). "+
		"Warm boxes are forked from their profile's zygote (its init and preloaded interpreter, one box per profile): "+
		"they share its pages until they write them, so its memory is paid once, not per box.")
	fmt.Fprintln(w)

	fmt.Fprintln(w, "| policy cost | p50 | share of a `moat run` of print(1) |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, p := range r.Policy {
		fmt.Fprintf(w, "| %s | %s | %.1f%% |\n", p.Name, fmtMS(p.CostMS), p.Share)
	}
	fmt.Fprintln(w)
	if r.Flood.Error != "" {
		fmt.Fprintf(w, "moat peak RSS while a box floods output: failed: %s\n", r.Flood.Error)
	} else {
		fmt.Fprintf(w, "moat peak RSS while a box floods output (64 MiB written, cap 1 MiB, status %s): %s\n", r.Flood.Status, mib(r.Flood.PeakRSSMiB))
	}
	fmt.Fprintln(w)
	egressTables(w, &r.Egress)
	if len(r.Failures) > 0 {
		fmt.Fprintf(w, "\nfailures:\n")
		for _, f := range r.Failures {
			fmt.Fprintf(w, "- %s\n", f)
		}
	}
}

// latencyTable prints rows with ratios to the first, which is base.
func latencyTable(w io.Writer, title, base string, rows []benchRow) {
	fmt.Fprintf(w, "| %s | runs | p50 | p90 | p99 | ratio to %s (p50) |\n", title, base)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		name := r.Name
		if r.PoolHits != nil {
			name += fmt.Sprintf(" (pool hits %d/%d)", *r.PoolHits, *r.PoolHits+*r.PoolMisses)
		}
		switch {
		case r.Skipped != "":
			fmt.Fprintf(w, "| %s | – | – | – | – | skipped: %s |\n", name, r.Skipped)
		case r.Error != "":
			fmt.Fprintf(w, "| %s | – | – | – | – | failed: %s |\n", name, r.Error)
		default:
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", name, r.Runs, fmtMS(r.P50MS), fmtMS(r.P90MS), fmtMS(r.P99MS), ratio(r.Ratio))
		}
	}
}

// ratio spells a ratio with enough digits to read ones far below 1.
func ratio(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.3f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

// mib spells a size in MiB; 0 is "–" (not measured).
func mib(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", v)
}

// fmtMS spells milliseconds, with two decimals below 10.
func fmtMS(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// egressTables prints the egress proxy's cost.
func egressTables(w io.Writer, e *egressReport) {
	latencyTable(w, "egress: one HTTPS GET, fresh connection", "direct", e.Request)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| egress: %d MiB HTTPS download | runs | MB/s (median) | ratio to direct |\n", e.DownloadMiB)
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, d := range e.Download {
		if d.Error != "" {
			fmt.Fprintf(w, "| %s | – | – | failed: %s |\n", d.Name, d.Error)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %s |\n", d.Name, d.Runs, d.MBps, ratio(d.Ratio))
	}
	fmt.Fprintln(w, "\nIn the bench's process, on loopback: the upstream is an httptest TLS server on 127.0.0.1, "+
		"named "+benchEgressHost+" and mapped to 127.0.0.1 by the policy's hosts (the allowlist names 127.0.0.1 with its port); "+
		"the proxy is attached to a 127.0.0.1 listener as the server attaches it for a box. "+
		"Every request and download opens a new connection; the cases run interleaved.")
}

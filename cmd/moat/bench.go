package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/internal/config"
)

const benchUsage = `Usage: moat bench [flags]

Measures, in one run, and prints markdown tables (--json: one JSON object) of p50,
p90 and p99 latencies with ratios to bare python3 measured in the same run:

  - bare /usr/bin/python3 -c 'print(1)', bubblewrap with all namespaces (when
    installed) and a cold moat run of the same code, native and with --backend
    docker and gvisor (each skipped, saying why, when the backend is not available);
  - POST /v1/execute of print(1) against a moat serve the bench starts with the
    warm pool on, against one with the pool off, and against one on the docker
    backend with the warm pool on (when available); a session call of 1+1;
  - the pandas workload: bare, cold moat run, warm pool, warm pool preloading pandas;
  - throughput of fresh-box print(1) at 1, 2, 4 and 8 concurrent clients, each
    against bare python3 processes run by as many clients right after it;
  - the server's RSS when idle and the memory of one warm box;
  - what the policy costs, and moat's peak RSS while a box floods its output;
  - what the egress proxy costs, in this process and on loopback only: one HTTPS
    GET over a fresh connection and a 100 MiB download (10 MiB with --short),
    each direct and through the proxy, with ratios to direct.

Cases of one table run interleaved (A, B, C, A, B, C...) so drift in the machine's
load affects them alike. Needs what moat run and moat serve need (root for the
full native isolation).

Exit status: 0 when everything was measured, 1 when something failed (a failed
case is reported in its row), 2 for usage errors. Slow numbers never fail.

Flags:
`

// benchPython is the interpreter every case runs, by absolute path: the python3 on PATH
// may be a slow shim (pyenv), which would flatter every ratio.
const benchPython = "/usr/bin/python3"

// benchPandasCode is the pandas workload; benchPandasOut is what it prints.
const (
	benchPandasCode = "import pandas as pd; print(pd.DataFrame({'a':[1,2]}).sum())"
	benchPandasOut  = "a    3\ndtype: int64\n"
)

// benchNoPandas is why the pandas rows are skipped when python3 cannot import it.
const benchNoPandas = "pandas not installed for " + benchPython + " (apt-get install python3-pandas)"

// The names of the two parts of a cold `moat run` measured alone (printCases).
const (
	benchMoatStart   = "moat's own start and exit alone (`moat --version`)"
	benchRunnerAlone = "the Python runner alone, no box (`python3 -u -I -S runner.pyc`, profile default)"
)

// Settings of a run that are not flags.
const (
	benchWarmups   = 3 // unmeasured rounds before a latency table
	benchShortRuns = 5 // -n of --short
	// benchThroughputPerRun times -n is how many executions each throughput level runs
	// (1000 for the default -n 40: several seconds at each level).
	benchThroughputPerRun = 25
	benchPoolWait         = 60 * time.Second      // for the pool to refill after a pooled run
	benchTeardown         = 50 * time.Millisecond // then for the used box's teardown
	benchCallTimeout      = 2 * time.Minute
	benchMaxErrDetail     = 300
)

// benchCase is one latency case: run does it once and says what went wrong.
type benchCase struct {
	id, name string
	run      func() error
	// before, when set, runs before each run, off the clock: a session case makes
	// an untimed call first, so that its run is a call right after another, as an
	// agent's calls come, rather than the first call of a session gone cold while the
	// other cases ran.
	before func() error
	// after, when set, runs after each successful run, off the clock; measured
	// says whether the run counted. A pooled case counts its pool hits here and
	// waits for the pool to refill, so the refill neither competes with the next
	// case for the CPUs nor leaves it an empty pool.
	after func(measured bool)
}

func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	n := fs.Int("n", 40, fmt.Sprintf("measured runs per latency case (after warm-up runs); throughput runs %d×n executions per level", benchThroughputPerRun))
	short := fs.Bool("short", false, fmt.Sprintf("few runs (-n %d, one warm-up round), every row still measured: for CI", benchShortRuns))
	jsonOut := fs.Bool("json", false, "print one JSON object instead of the markdown tables")
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	warmups := benchWarmups
	if *short {
		*n, warmups = benchShortRuns, 1
	}
	if *n < 5 {
		fmt.Fprintln(stderr, "moat bench: -n must be at least 5")
		return exitUsage
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "moat bench: %v\n", err)
		return exitInternal
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	began := time.Now()
	rep := &benchReport{Host: hostSummary(), Runs: *n, Short: *short, LoadBefore: loadAverage(), Pool: benchPoolDesc}
	progress := func(format string, args ...any) { fmt.Fprintf(stderr, "moat bench: "+format+"\n", args...) }
	prevCPU := readCPU()
	part := func(name string) { // ends the previous part, if any, and begins name
		now := readCPU()
		if k := len(rep.Loads); k > 0 && now.total > prevCPU.total {
			rep.Loads[k-1].StealPct = round(100*float64(now.steal-prevCPU.steal)/float64(now.total-prevCPU.total), 10)
		}
		prevCPU = now
		if name != "" {
			rep.Loads = append(rep.Loads, partLoad{Part: name, Load: loadAverage()})
		}
	}

	pandasErr := exec.Command(benchPython, "-c", "import pandas").Run()
	srv := startBenchServers(ctx, pandasErr == nil, stderr, rep)
	defer srv.stop()
	if ctx.Err() == nil {
		progress("memory of the idle servers and their warm boxes")
		part("memory")
		rep.Memory = srv.idleMemory(ctx)
	}

	progress("print(1): %d runs per case", *n)
	part("print(1)")
	rd, err := newRunnerDir(map[string][]byte{"main.py": []byte("print(1)\n"), "script.py": []byte(pythonScript(300))})
	if err != nil {
		rep.failed("the runner's files, for the runner with no box and the policy cost: %v", err)
	} else {
		defer rd.remove()
	}
	cases, skipped := printCases(self, srv, rd)
	rep.Latency = measure(ctx, cases, *n, warmups)
	rep.Latency = append(rep.Latency, skipped...)
	srv.poolHits(rep.Latency)
	ratios(rep.Latency)
	rep.ColdFloor, _ = coldFloorOf(rep.Latency)
	srv.stopDocker()

	if pandasErr == nil {
		progress("pandas: %d runs per case", *n)
		part("pandas")
		rep.Pandas = measure(ctx, pandasCases(self, srv), *n, 1)
		srv.poolHits(rep.Pandas)
		ratios(rep.Pandas)
	} else {
		for _, c := range pandasCases(self, srv) {
			rep.Pandas = append(rep.Pandas, benchRow{ID: c.id, Name: c.name, Skipped: benchNoPandas})
		}
	}

	// Enough executions per level that the pool's first hits and the refills they start
	// are a small part of it: throughput is what the server sustains, not a burst.
	perLevel := benchThroughputPerRun * *n
	progress("throughput at 1, 2, 4 and 8 clients, %d executions each", perLevel)
	part("throughput")
	rep.Throughput = srv.throughput([]int{1, 2, 4, 8}, perLevel)
	rep.Memory = append(rep.Memory, srv.peakMemory()...)
	srv.stop()

	progress("policy cost")
	part("policy")
	if cold := rowByID(rep.Latency, "run_cold"); cold.Runs > 0 && rd != nil {
		rows, err := policyCost(rd, *n, pct(cold.times, 50))
		if err != nil {
			rep.failed("policy cost: %v", err)
		}
		rep.Policy = rows
	} else if rd != nil {
		rep.failed("policy cost: no `moat run` cold to compare with")
	}
	progress("output flood")
	rep.Flood = floodRSS(self)

	sizeMiB, downloads := benchDownloadMiB, benchDownloadRuns
	if *short {
		sizeMiB, downloads = benchShortDownloadMiB, benchShortDownloadRuns
	}
	progress("egress proxy: %d HTTPS requests and %d downloads of %d MiB per case", *n, downloads, sizeMiB)
	part("egress")
	if rep.Egress, err = egressCost(ctx, *n, warmups, sizeMiB, downloads); err != nil {
		rep.failed("egress: %v", err)
	}

	for _, rows := range [][]benchRow{rep.Latency, rep.Pandas} {
		for _, r := range rows {
			if r.Error != "" {
				rep.failed("%s: %s", r.Name, r.Error)
			}
		}
	}
	for _, r := range rep.Egress.Request {
		if r.Error != "" {
			rep.failed("egress, HTTPS request %s: %s", r.ID, r.Error)
		}
	}
	for _, r := range rep.Egress.Download {
		if r.Error != "" {
			rep.failed("egress, download %s: %s", r.ID, r.Error)
		}
	}
	for _, t := range rep.Throughput {
		if t.Errors > 0 {
			rep.failed("throughput at %d clients: %d errors, first: %s", t.Clients, t.Errors, t.Error)
		}
	}
	for _, m := range rep.Memory {
		if m.Error != "" {
			rep.failed("memory, %s: %s", m.Name, m.Error)
		}
	}
	if srv.countErr != nil {
		rep.failed("the warm pool's counters: %v", srv.countErr)
	}
	if rep.Flood.Error != "" {
		rep.failed("output flood: %s", rep.Flood.Error)
	}
	if ctx.Err() != nil {
		rep.failed("interrupted")
	}
	part("")
	rep.LoadAfter = loadAverage()
	rep.ElapsedS = round(time.Since(began).Seconds(), 10)
	rep.normalize()
	if *jsonOut {
		printJSON(stdout, rep)
	} else {
		writeBenchReport(stdout, rep)
	}
	if len(rep.Failures) > 0 {
		return 1
	}
	return 0
}

// printCases are the print(1) cases: processes, then the API's. Beside the cold
// `moat run`, the two parts of it that no box makes cheaper, each alone: moat's own
// start and exit, and the Python runner run on this host with no box (rd, nil when
// it could not be laid out: that row is then skipped).
func printCases(self string, srv *benchServers, rd *runnerDir) (cases []benchCase, skipped []benchRow) {
	cases = append(cases, bareCase())
	if bw, err := exec.LookPath("bwrap"); err == nil {
		cases = append(cases, procCase("bwrap", "bubblewrap, all namespaces", "1\n", func() *exec.Cmd {
			return exec.Command(bw, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
				"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
				"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", benchPython, "-c", "print(1)")
		}))
	} else {
		skipped = append(skipped, benchRow{ID: "bwrap", Name: "bubblewrap, all namespaces", Skipped: "bwrap not installed (apt-get install bubblewrap)"})
	}
	cases = append(cases, moatRunCase(self, "run_cold", "`moat run` cold (native)", "print(1)", "1\n"),
		procCase("moat_start", benchMoatStart, "", func() *exec.Cmd { return exec.Command(self, "--version") }))
	if rd != nil {
		cases = append(cases, procCase("runner_alone", benchRunnerAlone, "1\n", func() *exec.Cmd {
			return rd.command("policy.json", filepath.Join(rd.dir, "main.py"))
		}))
	} else {
		skipped = append(skipped, benchRow{ID: "runner_alone", Name: benchRunnerAlone, Skipped: "the runner's files could not be laid out"})
	}
	for _, name := range []string{config.BackendDocker, config.BackendGVisor} {
		id, title := "run_"+name, "`moat run --backend "+name+"` cold"
		if err := backendAvailable(srv.ctx, name); err != nil {
			skipped = append(skipped, benchRow{ID: id, Name: title, Skipped: err.Error()})
			continue
		}
		cases = append(cases, moatRunCase(self, id, title, "print(1)", "1\n", "--backend", name))
	}
	api, apiSkipped := srv.printCases()
	return append(cases, api...), append(skipped, apiSkipped...)
}

// backendAvailable opens the backend name as `moat run --backend name` would (the
// config moat run finds, the daemon, image and runtime) and closes it again; its
// error, first line only, says why the backend cannot make boxes here.
func backendAvailable(ctx context.Context, name string) error {
	cfg, err := loadConfig("")
	if err != nil {
		return err
	}
	rb, err := cfg.ResolveBackend(name)
	if err != nil {
		return err
	}
	_, closeB, err := openOne(ctx, rb, slog.New(slog.DiscardHandler))
	if err != nil {
		first, _, _ := strings.Cut(err.Error(), "\n")
		return errors.New(clip(first))
	}
	closeB()
	return nil
}

// pandasCases are the pandas workload's cases.
func pandasCases(self string, srv *benchServers) []benchCase {
	cases := []benchCase{
		procCase("pandas_bare", "bare python3", benchPandasOut, func() *exec.Cmd {
			return exec.Command(benchPython, "-c", benchPandasCode)
		}),
		moatRunCase(self, "pandas_run_cold", "`moat run` cold (native)", benchPandasCode, benchPandasOut),
	}
	return append(cases, srv.pandasCases()...)
}

// procCase runs a command that must succeed and, when want is not empty, print want.
func procCase(id, name, want string, cmd func() *exec.Cmd) benchCase {
	return benchCase{id: id, name: name, run: func() error {
		c := cmd()
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			return fmt.Errorf("%w: %s", err, clip(out.String()+errb.String()))
		}
		if want != "" && out.String() != want {
			return fmt.Errorf("printed %q, want %q; stderr %s", clip(out.String()), want, clip(errb.String()))
		}
		return nil
	}}
}

// bareCase runs bare python3 -c 'print(1)': the baseline of the print(1) table and
// of each throughput level.
func bareCase() benchCase {
	return procCase("bare", "bare `python3 -c 'print(1)'`", "1\n", func() *exec.Cmd {
		return exec.Command(benchPython, "-c", "print(1)")
	})
}

// moatRunCase runs code with `moat run`, cold, with the extra flags.
func moatRunCase(self, id, name, code, want string, flags ...string) benchCase {
	return procCase(id, name, want, func() *exec.Cmd {
		c := exec.Command(self, append(append([]string{"run"}, flags...), "--lang", "python", "-")...)
		c.Stdin = strings.NewReader(code + "\n")
		return c
	})
}

// clip bounds an error's detail.
func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > benchMaxErrDetail {
		return s[:benchMaxErrDetail] + "..."
	}
	return s
}

// measure runs the cases interleaved (case A, B, C, A, B, C...) so drift in the
// machine's load affects every case alike: warmups unmeasured rounds, then n. A case
// that fails once is reported failed and not run again. Cases with no run (their
// server did not start) carry their error already.
func measure(ctx context.Context, cases []benchCase, n, warmups int) []benchRow {
	times := make([][]time.Duration, len(cases))
	rows := make([]benchRow, len(cases))
	for c, bc := range cases {
		rows[c] = benchRow{ID: bc.id, Name: bc.name}
	}
	for i := 0; i < n+warmups && ctx.Err() == nil; i++ {
		for c, bc := range cases {
			if rows[c].Error != "" || ctx.Err() != nil {
				continue
			}
			if bc.before != nil {
				if err := bc.before(); err != nil {
					rows[c].Error = err.Error()
					continue
				}
			}
			start := time.Now()
			err := bc.run()
			d := time.Since(start)
			if err != nil {
				rows[c].Error = err.Error()
				continue
			}
			if i >= warmups {
				times[c] = append(times[c], d)
			}
			if bc.after != nil {
				bc.after(i >= warmups)
			}
		}
	}
	for c := range rows {
		if rows[c].Error == "" {
			rows[c].set(times[c])
		}
	}
	return rows
}

// rowByID returns the row with id, or a zero row.
func rowByID(rows []benchRow, id string) benchRow {
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	return benchRow{}
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// benchMS is d in milliseconds, to a hundredth.
func benchMS(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 100) }

// cpuTimes are the host's CPU times from /proc/stat, in ticks: all of them, and
// those stolen by the hypervisor (another VM ran on our CPUs).
type cpuTimes struct{ total, steal int64 }

func readCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var c cpuTimes
	for i := 1; i < len(f) && i <= 8; i++ {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		c.total += v
		if i == 8 {
			c.steal = v
		}
	}
	return c
}

// loadAverage is the host's 1-minute load average, 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func hostSummary() string {
	cpus := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strings.Count(string(b), "\nprocessor") + 1
	}
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs, Linux %s", cpus, kernel)
}

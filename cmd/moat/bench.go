package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// benchPython is the interpreter every case runs, by absolute path: the python3 on PATH
// may be a slow shim (pyenv), which would flatter every ratio.
const benchPython = "/usr/bin/python3"

type benchCase struct {
	name string
	cmd  func() *exec.Cmd
}

type benchRow struct {
	name               string
	n                  int
	median, p90, p99   time.Duration
	ratio              float64
	skipped, errDetail string
}

func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 40, "measured runs per case (after 3 warm-up runs)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *n < 5 {
		fmt.Fprintln(stderr, "moat: bench: -n must be at least 5")
		return exitUsage
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "moat: bench: %v\n", err)
		return exitInternal
	}
	cases := []benchCase{
		{"bare `python3 -c 'print(1)'`", func() *exec.Cmd { return exec.Command(benchPython, "-c", "print(1)") }},
	}
	var skipped []benchRow
	if bw, err := exec.LookPath("bwrap"); err == nil {
		cases = append(cases, benchCase{"bubblewrap, all namespaces", func() *exec.Cmd {
			return exec.Command(bw, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
				"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
				"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", benchPython, "-c", "print(1)")
		}})
	} else {
		skipped = append(skipped, benchRow{name: "bubblewrap, all namespaces", skipped: "bwrap not installed (apt-get install bubblewrap)"})
	}
	cases = append(cases, benchCase{"`moat run` cold (native)", func() *exec.Cmd {
		c := exec.Command(self, "run", "--lang", "python", "-")
		c.Stdin = strings.NewReader("print(1)\n")
		return c
	}})

	rows := measure(cases, *n)
	rows = append(rows, skipped...)
	fmt.Fprintf(stdout, "moat bench: %d runs per case, interleaved, on %s\n\n", *n, hostSummary())
	fmt.Fprintln(stdout, "| case | runs | median | p90 | p99 | ratio to bare python3 (median) |")
	fmt.Fprintln(stdout, "|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		switch {
		case r.skipped != "":
			fmt.Fprintf(stdout, "| %s | – | – | – | – | skipped: %s |\n", r.name, r.skipped)
		case r.errDetail != "":
			fmt.Fprintf(stdout, "| %s | – | – | – | – | failed: %s |\n", r.name, r.errDetail)
		default:
			fmt.Fprintf(stdout, "| %s | %d | %s | %s | %s | %.2f× |\n", r.name, r.n, ms(r.median), ms(r.p90), ms(r.p99), r.ratio)
		}
	}
	moatMedian := rows[len(rows)-1-len(skipped)].median
	if table, err := policyCost(*n, moatMedian); err != nil {
		fmt.Fprintf(stdout, "\npolicy cost: failed: %v\n", err)
	} else {
		fmt.Fprintln(stdout)
		fmt.Fprint(stdout, table)
	}
	rss, status, err := floodRSS(self)
	fmt.Fprintln(stdout)
	if err != nil {
		fmt.Fprintf(stdout, "moat peak RSS while a box floods output: failed: %v\n", err)
		return exitInternal
	}
	fmt.Fprintf(stdout, "moat peak RSS while a box floods output (64 MiB written, cap 1 MiB, status %s): %.1f MiB\n", status, float64(rss)/(1<<20))
	return 0
}

// measure runs the cases interleaved (case A, B, C, A, B, C...) so drift in the
// machine's load affects every case alike.
func measure(cases []benchCase, n int) []benchRow {
	times := make([][]time.Duration, len(cases))
	errs := make([]string, len(cases))
	for i := 0; i < n+3; i++ {
		for c, bc := range cases {
			if errs[c] != "" {
				continue
			}
			cmd := bc.cmd()
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			d := time.Since(start)
			if err != nil {
				errs[c] = fmt.Sprintf("%v: %.200s", err, out.String())
				continue
			}
			if i >= 3 {
				times[c] = append(times[c], d)
			}
		}
	}
	rows := make([]benchRow, len(cases))
	for c, bc := range cases {
		rows[c] = benchRow{name: bc.name, errDetail: errs[c]}
		if errs[c] != "" {
			continue
		}
		t := times[c]
		slices.Sort(t)
		rows[c].n = len(t)
		rows[c].median, rows[c].p90, rows[c].p99 = pct(t, 50), pct(t, 90), pct(t, 99)
	}
	if rows[0].median > 0 {
		for c := range rows {
			rows[c].ratio = float64(rows[c].median) / float64(rows[0].median)
		}
	}
	return rows
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// floodRSS runs a box that writes 64 MiB to stdout and samples moat's own peak RSS
// (VmHWM of the moat process only, not of the box).
func floodRSS(self string) (int64, string, error) {
	cmd := exec.Command(self, "run", "--json", "--lang", "python", "--output-limit", "1MiB", "-")
	cmd.Stdin = strings.NewReader("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 65536)\n")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return 0, "", err
			}
			status := "?"
			if i := bytes.Index(out.Bytes(), []byte(`"status":"`)); i >= 0 {
				rest := out.Bytes()[i+10:]
				status = string(rest[:bytes.IndexByte(rest, '"')])
			}
			return peak, status, nil
		case <-tick.C:
			if v := vmHWM(cmd.Process.Pid); v > peak {
				peak = v
			}
		}
	}
}

func vmHWM(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
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

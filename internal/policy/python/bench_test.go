package python

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkOverhead measures what the runner adds to a 300-line analysis script
// (testdata/bench/analysis.py) over running it with plain python3. Each iteration
// runs every variant once, in turn, so that load on the machine affects them alike;
// the metrics are medians per variant: wall and CPU milliseconds per run, and the
// difference to plain. The target is at most ~4 ms over plain.
//
//	go test ./internal/policy/python/ -run '^$' -bench Overhead -benchtime 40x
func BenchmarkOverhead(b *testing.B) {
	requirePython(b)
	script, err := os.ReadFile(filepath.Join("testdata", "bench", "analysis.py"))
	if err != nil {
		b.Fatal(err)
	}
	off := DefaultPolicy()
	off.Mode = ModeOff
	type variant struct {
		name      string
		runner    string // "" runs the script with plain python3
		policy    Policy
		args      []string
		wall, cpu []time.Duration
	}
	variants := []*variant{
		{name: "plain"},
		{name: "compiled-off", runner: "runner.pyc", policy: off},
		{name: "compiled-default", runner: "runner.pyc", policy: DefaultPolicy()},
		{name: "compiled-strict", runner: "runner.pyc", policy: StrictPolicy()},
		{name: "source-default", runner: "runner.py", policy: DefaultPolicy()},
	}
	work := b.TempDir()
	for _, v := range variants {
		moat := b.TempDir()
		for name, data := range map[string][]byte{
			"runner.py": Runner, "runner.pyc": env.compiled, "policy.json": v.policy.JSON(), "main.py": script,
		} {
			if err := os.WriteFile(filepath.Join(moat, name), data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		v.args = []string{"-u", "-I", filepath.Join(moat, "main.py")}
		if v.runner != "" {
			v.args = []string{"-u", "-I", filepath.Join(moat, v.runner), "--policy", filepath.Join(moat, "policy.json"), filepath.Join(moat, "main.py")}
		}
	}
	run := func(v *variant) {
		cmd := exec.Command(python, v.args...)
		cmd.Dir = work
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work, "LANG=C.UTF-8"}
		cmd.Stdout = io.Discard
		var w *os.File
		if v.runner != "" {
			var r *os.File
			if r, w, err = os.Pipe(); err != nil {
				b.Fatal(err)
			}
			cmd.ExtraFiles = []*os.File{w}
			go func() { io.Copy(io.Discard, r); r.Close() }()
		}
		start := time.Now()
		err := cmd.Start()
		if w != nil {
			w.Close()
		}
		if err == nil {
			err = cmd.Wait()
		}
		if err != nil {
			b.Fatalf("%s: %v", v.name, err)
		}
		v.wall = append(v.wall, time.Since(start))
		v.cpu = append(v.cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, v := range variants {
			run(v)
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	plainWall, plainCPU := median(variants[0].wall), median(variants[0].cpu)
	for _, v := range variants {
		b.ReportMetric(median(v.wall), v.name+"-wall-ms")
		b.ReportMetric(median(v.cpu), v.name+"-cpu-ms")
		if v != variants[0] {
			b.ReportMetric(median(v.wall)-plainWall, v.name+"-extra-wall-ms")
			b.ReportMetric(median(v.cpu)-plainCPU, v.name+"-extra-cpu-ms")
		}
	}
}

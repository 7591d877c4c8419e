package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/policy"
	"github.com/moat-sandbox/moat/internal/policy/python"
)

// policyCost measures what the policy adds to one execution: the Python runner (static
// check and audit hooks) on a 300-line script against the same script run by bare
// python3, and the shell checker on a 100-line script. Both are reported as a share of
// the median `moat run` of print(1) measured in the same bench run.
func policyCost(rd *runnerDir, n int, moatRun time.Duration) ([]policyRow, error) {
	script := filepath.Join(rd.dir, "script.py")
	// The same interpreter and flags as the runner's (python.Interpreter), running the
	// script itself: the difference is the runner alone (its stand-in for site too).
	bare := func() *exec.Cmd {
		argv := python.Interpreter(script)
		return exec.Command(argv[0], argv[1:]...)
	}
	withPolicy := func(doc string) func() *exec.Cmd {
		return func() *exec.Cmd { return rd.command(doc, script) }
	}
	rows := measure(context.Background(), []benchCase{
		procCase("bare", "bare", "", bare), procCase("default", "runner default", "", withPolicy("policy.json")),
		procCase("strict", "runner strict", "", withPolicy("strict.json")),
	}, n, benchWarmups)
	for _, r := range rows {
		if r.Error != "" {
			return nil, fmt.Errorf("%s: %s", r.Name, r.Error)
		}
	}
	p50 := func(r benchRow) time.Duration { return pct(r.times, 50) }
	pyCost, strictCost := p50(rows[1])-p50(rows[0]), p50(rows[2])-p50(rows[0])

	rules, err := rd.eng.ShellRules("strict")
	if err != nil {
		return nil, err
	}
	sh := shellScript(100)
	var shTimes []time.Duration
	for i := 0; i < 200; i++ {
		start := time.Now()
		if v := policy.CheckShell(sh, rules); len(v) != 0 {
			return nil, fmt.Errorf("the benchmark's shell script is blocked: %v", v[0].Detail)
		}
		shTimes = append(shTimes, time.Since(start))
	}
	slices.Sort(shTimes)
	shCost := pct(shTimes, 50)

	row := func(name string, d time.Duration) policyRow {
		return policyRow{Name: name, CostMS: benchMS(d), Share: round(100*float64(d)/float64(moatRun), 10)}
	}
	return []policyRow{
		row("Python runner, 300-line script, profile default (runner − the script run by the same `python3 -u -I -S`)", pyCost),
		row("Python runner, 300-line script, profile strict", strictCost),
		row("shell checker, 100-line script, profile strict", shCost),
	}, nil
}

// runnerDir is, in a temporary directory, what a box's /.moat holds for Python: the
// runner as boxes start it (compiled when it can be), the default and strict
// policies (policy.json, strict.json), and the caller's files; for running the runner
// on this host, with no box.
type runnerDir struct {
	eng         *engine.Engine
	dir, runner string // runner is the runner's path
}

// newRunnerDir lays out a runnerDir with extra (name to content) beside the runner's
// files, with the engine of the config moat finds; the caller calls remove.
func newRunnerDir(extra map[string][]byte) (*runnerDir, error) {
	eng, err := newEngine("")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"runner.py": python.Runner}
	for name, profile := range map[string]string{"policy.json": "default", "strict.json": "strict"} {
		if files[name], err = eng.PolicyDocument(profile); err != nil {
			return nil, err
		}
	}
	runner := "runner.py"
	if pyc := eng.CompiledRunner(); pyc != nil {
		runner = "runner.pyc" // what boxes start
		files[runner] = pyc
	}
	maps.Copy(files, extra)
	dir, err := os.MkdirTemp("", "moat-bench-")
	if err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	return &runnerDir{eng: eng, dir: dir, runner: filepath.Join(dir, runner)}, nil
}

// command runs the runner as a box starts it (python.Interpreter) on code (a path)
// with the policy file doc of the directory.
func (r *runnerDir) command(doc, code string) *exec.Cmd {
	argv := append(python.Interpreter(r.runner), "--policy", filepath.Join(r.dir, doc), code)
	return exec.Command(argv[0], argv[1:]...)
}

// remove deletes the directory and everything in it.
func (r *runnerDir) remove() { os.RemoveAll(r.dir) }

// pythonScript returns a realistic benign script of about n lines: classes, functions,
// comprehensions, string and math work.
func pythonScript(n int) string {
	var b strings.Builder
	b.WriteString("import json, math, re, statistics\nfrom collections import Counter, defaultdict\nfrom dataclasses import dataclass\n\n")
	lines := 4
	for i := 0; lines < n-3; i++ {
		fmt.Fprintf(&b, `@dataclass
class Item%[1]d:
    name: str
    price: float
    tags: list

    def total(self, qty: int) -> float:
        return round(self.price * qty * (1 + 0.2 * (len(self.tags) %% 3)), 2)


def summarize_%[1]d(items):
    words = Counter(w for it in items for w in re.findall(r"\w+", it.name.lower()))
    by_tag = defaultdict(list)
    for it in items:
        for t in it.tags:
            by_tag[t].append(it.price)
    stats = {t: statistics.mean(v) for t, v in by_tag.items() if v}
    return {"top": words.most_common(3), "stats": stats, "n": len(items)}


`, i)
		lines += 20
	}
	b.WriteString("items = [Item0(f'thing {i}', math.sqrt(i + 1), ['a', 'b'][: i % 3]) for i in range(50)]\nprint(json.dumps(summarize_0(items))[:80])\n")
	return b.String()
}

// shellScript returns a script of n lines of commands a strict profile allows.
func shellScript(n int) string {
	cmds := []string{
		`ls -la /workspace | grep -v total | sort -k5 -n | tail -3`,
		`cat data.txt 2>/dev/null | wc -l`,
		`for f in *.txt; do [ -f "$f" ] && head -n 2 "$f"; done`,
		`echo "$(date +%Y-%m-%d) report" | tr a-z A-Z`,
		`awk -F, '{ s += $2 } END { print s }' data.csv 2>/dev/null || echo 0`,
		`if [ -d out ]; then ls out | sort | uniq -c; else mkdir -p out; fi`,
		`sed -e 's/foo/bar/g' input.txt 2>/dev/null | cut -d: -f1 | head -5`,
		`x=$(echo hello | wc -c); echo "len $x"`,
		`printf '%s\n' a b c | sort -r | tr '\n' ' '; echo`,
		`grep -c error log.txt 2>/dev/null || true`,
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(cmds[i%len(cmds)])
		b.WriteByte('\n')
	}
	return b.String()
}

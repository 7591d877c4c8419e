package python

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// python is the interpreter the box runs (Debian's, not one on PATH).
const python = "/usr/bin/python3"

var env struct {
	once     sync.Once
	err      error  // why Python tests cannot run here
	compiled []byte // CompileRunner(python)
	mplDir   string // MPLCONFIGDIR shared by all runs: the font cache is built once
}

// requirePython skips (fails in CI) without Debian's python3 and the libraries the
// benign corpus uses, and prepares what every run shares.
func requirePython(t testing.TB) {
	t.Helper()
	env.once.Do(func() {
		if out, err := exec.Command(python, "-I", "-c", "import numpy, pandas, matplotlib").CombinedOutput(); err != nil {
			env.err = fmt.Errorf("needs %s with numpy, pandas and matplotlib "+
				"(apt-get install python3-numpy python3-pandas python3-matplotlib): %v: %s", python, err, out)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if env.compiled, env.err = CompileRunner(ctx, python); env.err != nil {
			return
		}
		if env.mplDir, env.err = os.MkdirTemp("", "moat-mpl-"); env.err != nil {
			return
		}
		// Build matplotlib's font cache now, not in 60 parallel runs.
		cmd := exec.Command(python, "-I", "-c", "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; plt.figure().savefig('/dev/null', format='png')")
		cmd.Env = append(os.Environ(), "MPLCONFIGDIR="+env.mplDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			env.err = fmt.Errorf("warm matplotlib: %v: %s", err, out)
		}
	})
	if env.err != nil {
		testutil.SkipOrFail(t, env.err.Error())
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if env.mplDir != "" {
		os.RemoveAll(env.mplDir)
	}
	os.Exit(code)
}

// outcome is what one run of the runner produced.
type outcome struct {
	Stdout, Stderr string
	Exit           int
	Report         Report
	RawReport      string
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d\nreport:\n%s\nstdout:\n%s\nstderr:\n%s", o.Exit, o.RawReport, o.Stdout, o.Stderr)
}

// runOpts changes how runCode starts the runner.
type runOpts struct {
	source    bool     // run runner.py rather than the compiled runner
	checkOnly bool     // pass --check-only
	noReport  bool     // leave fd 3 closed
	args      []string // appended after the code path
	extraEnv  []string
}

// runCode runs code under p the way a box does, without the box: a directory laid
// out like /.moat (runner, compiled runner, policy, main.py), a separate working
// directory, a pipe on fd 3.
func runCode(t testing.TB, p Policy, code string, o runOpts) outcome {
	t.Helper()
	requirePython(t)
	moat, work := t.TempDir(), t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(moat, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("runner.py", Runner)
	write("runner.pyc", env.compiled)
	write("policy.json", p.JSON())
	write("main.py", []byte(code))
	runner := filepath.Join(moat, "runner.pyc")
	if o.source {
		runner = filepath.Join(moat, "runner.py")
	}
	args := append(Interpreter(runner)[1:], "--policy", filepath.Join(moat, "policy.json"))
	if o.checkOnly {
		args = append(args, "--check-only")
	}
	args = append(args, filepath.Join(moat, "main.py"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append(args, o.args...)...)
	cmd.Dir = work
	cmd.Env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + work,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"TMPDIR=/tmp",
		"MPLCONFIGDIR=" + env.mplDir,
	}, o.extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var report []byte
	var readDone chan struct{}
	if !o.noReport {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.ExtraFiles = []*os.File{w}
		readDone = make(chan struct{})
		go func() {
			defer close(readDone)
			report, _ = io.ReadAll(r)
			r.Close()
		}()
		defer w.Close()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
	} else if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if readDone != nil {
		<-readDone
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("run python: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("run python: timed out\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	return outcome{
		Stdout:    stdout.String(),
		Stderr:    stderr.String(),
		Exit:      cmd.ProcessState.ExitCode(),
		Report:    ParseReport(report),
		RawReport: string(report),
	}
}

// hasRule reports whether the outcome reported a violation of rule.
func (o outcome) hasRule(rule string) bool {
	for _, v := range o.Report.Violations {
		if v.Rule == rule {
			return true
		}
	}
	return false
}

// corpusFile is one file of testdata/attacks or testdata/benign, with its headers:
//
//	# expect: python.import        (attacks: the rule that must be reported)
//	# success: stdout TEXT         (attacks: what shows the attack worked, besides the canary)
//	# control: skip REASON         (attacks: cannot succeed here even without policy)
//	# result: REPR                 (benign: the expected trailing-expression result)
type corpusFile struct {
	Name, Code string
	Header     map[string]string
}

func loadCorpus(t *testing.T, dir string) []corpusFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.py"))
	if err != nil {
		t.Fatal(err)
	}
	var files []corpusFile
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f := corpusFile{Name: strings.TrimSuffix(filepath.Base(p), ".py"), Code: string(data), Header: map[string]string{}}
		for _, line := range strings.Split(f.Code, "\n") {
			if !strings.HasPrefix(line, "# ") {
				break
			}
			if k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": "); ok {
				f.Header[k] = v
			}
		}
		files = append(files, f)
	}
	return files
}

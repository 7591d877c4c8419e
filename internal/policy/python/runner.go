package python

import (
	"bytes"
	"context"
	_ "embed" // Runner
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/internal/box"
)

// Runner is runner.py, the program the box starts instead of the code.
//
//go:embed runner.py
var Runner []byte

// Paths inside the box, and the runner's exit statuses.
const (
	// RunnerPath is where the engine places Runner.
	RunnerPath = "/.moat/runner.py"
	// CompiledRunnerPath is where the engine places the output of CompileRunner.
	CompiledRunnerPath = "/.moat/runner.pyc"
	// PolicyPath is where the runner reads Policy.JSON.
	PolicyPath = "/.moat/policy.json"

	// ExitViolation is the runner's exit status when policy refused the code; the
	// report channel then holds at least one violation (unless the code closed it).
	ExitViolation = 77
	// ExitInternal is the runner's exit status when it could not start (bad policy,
	// unreadable code) or, in a session, got a malformed request; also the exit of a
	// session's call whose code is not UTF-8.
	ExitInternal = 70
	// ExitInterrupted is the exit of a session's call that SIGINT interrupted.
	ExitInterrupted = 130
)

// Interpreter returns the argv that starts the runner at runner (RunnerPath or
// CompiledRunnerPath); the code path is appended by the box (Spec.Interpreter).
//
// -I (isolated mode) matters: without it Python reads PYTHON* variables and runs .pth
// files from the user's site-packages under HOME=/workspace before the runner
// starts, which is code outside any policy. -u keeps output printed before a kill.
// -S skips the site module, which the runner stands in for (runner.py's _site: the
// same sys.path and builtins, without running .pth files' import lines): about 4 ms
// of every box's start on a Debian host.
func Interpreter(runner string) []string {
	return []string{"/usr/bin/python3", "-u", "-I", "-S", runner}
}

// SessionInterpreter returns the argv that starts the runner at runner in session
// mode: no code path; requests come on fd 4 and each call ends with a done line on
// the report channel (see box.ParseSessionLine and the Session section of runner.py's
// docstring). The preload modules, when there are any, are imported before the
// runner says it is ready.
func SessionInterpreter(runner string, preload ...string) []string {
	argv := Interpreter(runner)
	if len(preload) > 0 {
		argv = append(argv, "--preload="+strings.Join(preload, ","))
	}
	return append(argv, "--session")
}

// ZygoteInterpreter returns the argv that starts a session interpreter (from
// SessionInterpreter) as a zygote instead: preloaded, then forked into fresh boxes by
// the native backend, each child going on as the session runner would
// (box.SessionSpec.Zygote). Nil if argv is not a session runner's.
func ZygoteInterpreter(argv []string) []string {
	if len(argv) == 0 || argv[len(argv)-1] != "--session" {
		return nil
	}
	return append(slices.Clone(argv[:len(argv)-1]), "--zygote", "--session")
}

// Support returns the files the engine places under /.moat for a Python run: the
// policy, and the runner compiled when compiled is not nil, else its source. The
// source is not shipped beside the bytecode: every box start pays for each byte of
// the spec, and the runner's frames are cut from tracebacks anyway.
func Support(p Policy, compiled []byte) []box.SupportFile {
	files := []box.SupportFile{{Path: PolicyPath, Data: p.JSON()}}
	if compiled != nil {
		return append(files, box.SupportFile{Path: CompiledRunnerPath, Data: compiled})
	}
	return append(files, box.SupportFile{Path: RunnerPath, Data: Runner})
}

// compileScript turns runner.py (stdin) into .pyc bytes (stdout): an unchecked
// hash-based pyc, which Python runs as a script after checking only its magic number.
const compileScript = `import sys, marshal, importlib.util
src = sys.stdin.buffer.read()
code = compile(src, sys.argv[1], 'exec', dont_inherit=True)
sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + (1).to_bytes(4, 'little')
                        + importlib.util.source_hash(src) + marshal.dumps(code))
`

// CompileRunner compiles Runner with the interpreter python, run on the host, so
// that boxes start the runner without compiling its 1,500 lines each time (about
// 12 ms, most of the runner's overhead). The result is only valid for the same
// Python version inside the box; for the native backend, which runs the host's
// /usr/bin/python3, it always is. Start the box with Interpreter(CompiledRunnerPath).
func CompileRunner(ctx context.Context, python string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, python, "-I", "-c", compileScript, RunnerPath)
	cmd.Stdin = bytes.NewReader(Runner)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("compile the python runner with %s: %w: %s", python, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if len(out) < 16 || out[2] != '\r' || out[3] != '\n' {
		return nil, fmt.Errorf("compile the python runner with %s: output is not a .pyc", python)
	}
	return out, nil
}

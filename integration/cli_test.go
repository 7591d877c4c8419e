//go:build integration

package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// This file holds black-box tests of the moat CLI's contract: benign code runs unharmed
// (TestBenign*), live mode passes output and exit statuses through (TestLive*), bad input
// is refused before any box is made (TestBadInput*), and the result reports the same
// protections whatever ended the code (TestCLI*).

// writeFixture writes data to dir/name (creating parents) and returns the path.
func writeFixture(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// decodeResult parses moat's stdout as the one JSON result of a --json run whose flags
// did not start with --json (moatExec only decodes those).
func decodeResult(t *testing.T, o *runOut) {
	t.Helper()
	if o.exit != 0 {
		t.Fatalf("moat exited %d, want 0 with --json\n%s", o.exit, o)
	}
	if err := json.Unmarshal([]byte(o.stdout), &o.res); err != nil {
		t.Fatalf("moat printed no JSON result: %v\nstdout: %.2000s\nstderr: %.2000s", err, o.stdout, o.stderr)
	}
}

// assertResult checks what every --json run of benign code must satisfy: moat exits 0,
// prints exactly one JSON line and nothing on its own stderr, with the wanted status
// and exit code.
func assertResult(t *testing.T, o runOut, status box.Status, exitCode int) {
	t.Helper()
	if o.exit != 0 {
		t.Fatalf("moat exited %d with --json, want 0\n%s", o.exit, o)
	}
	if !strings.HasSuffix(o.stdout, "}\n") || strings.Count(o.stdout, "\n") != 1 {
		t.Errorf("moat's stdout is not one JSON line:\n%.2000s", o.stdout)
	}
	if o.stderr != "" {
		t.Errorf("moat wrote on its own stderr in --json mode: %q", o.stderr)
	}
	if o.res.Status != status || o.res.ExitCode != exitCode {
		t.Fatalf("status=%s exit_code=%d, want %s/%d\n%s", o.res.Status, o.res.ExitCode, status, exitCode, o)
	}
	if strings.Contains(o.stdout, hostSecret) {
		t.Errorf("the host secret leaked into the result")
	}
}

// baseline runs trivial code and returns its result: the isolation and warnings this
// host gives every box.
func baseline(t *testing.T) box.Result {
	t.Helper()
	o := moatRun(t, "print(1)", "--lang", "python")
	assertResult(t, o, box.StatusOK, 0)
	if o.res.Stdout != "1\n" {
		t.Fatalf("baseline run printed %q", o.res.Stdout)
	}
	return o.res
}

// warningLines is what moat prints on stderr in live mode for the host's warnings.
func warningLines(w []string) string {
	var b strings.Builder
	for _, s := range w {
		fmt.Fprintf(&b, "moat: warning: %s\n", s)
	}
	return b.String()
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type benignCase struct {
	name     string
	stdin    string   // code on stdin (when args name no FILE)
	args     []string // after `run --json`
	status   box.Status
	exitCode int
	stdout   *string // exact stdout of the code, when set
	stderr   *string // exact stderr of the code, when set
	check    func(t *testing.T, o runOut)
}

func str(s string) *string { return &s }

func TestBenignJSON(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()

	// --file fixtures: random bytes with NULs, so any transcoding shows.
	src := make([]byte, 10000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(rng.UintN(256))
	}
	src[0], src[5000] = 0, 0
	srcPath := writeFixture(t, dir, "input.bin", src)
	srcSum := sha256Hex(src)
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(srcPath, past, past); err != nil {
		t.Fatal(err)
	}

	var long strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&long, "v%d = %d * 2\n", i, i)
	}
	long.WriteString(`print(sum(globals()["v%d" % i] for i in range(5000)))` + "\n")
	if long.Len() >= box.MaxCodeBytes {
		t.Fatalf("the long script is %d bytes, not under MaxCodeBytes", long.Len())
	}
	maxHead := "print('max')\n"
	maxScript := maxHead + strings.Repeat("#", box.MaxCodeBytes-len(maxHead)-1) + "\n"

	// Twelve KiB of numbered lines: head, middle and tail are all distinguishable.
	var numbered strings.Builder
	for i := range 2048 {
		fmt.Fprintf(&numbered, "%05d\n", i)
	}
	full := numbered.String()

	cases := []benignCase{
		{name: "python big integer", stdin: `print(2**100)`, args: []string{"--lang", "python"},
			status: box.StatusOK, stdout: str("1267650600228229401496703205376\n"), stderr: str("")},
		{name: "python sum of a million", stdin: `print(sum(range(10**6)))`, args: []string{"--lang", "python"},
			status: box.StatusOK, stdout: str("499999500000\n"), stderr: str("")},
		{name: "bash arithmetic", stdin: `echo $(( (1 << 40) + 7 * 6 ))`, args: []string{"--lang", "bash"},
			status: box.StatusOK, stdout: str("1099511627818\n")},
		{name: "files in tmp", args: []string{"--lang", "python"}, stdin: `
import os
with open("/tmp/a.txt", "w") as f:
    f.write("hello tmp")
print(open("/tmp/a.txt").read())
print("a.txt" in os.listdir("/tmp"))
os.makedirs("/tmp/d/e")
with open("/tmp/d/e/f.bin", "wb") as f:
    f.write(b"\x00\x01" * 1000)
print(os.path.getsize("/tmp/d/e/f.bin"), os.listdir("/tmp/d/e"))
os.remove("/tmp/a.txt")
print(os.path.exists("/tmp/a.txt"))`,
			status: box.StatusOK, stdout: str("hello tmp\nTrue\n2000 ['f.bin']\nFalse\n"), stderr: str("")},
		{name: "files in the workspace", args: []string{"--lang", "python"}, stdin: `
import os
print(os.getcwd() == "/workspace", os.getcwd())
print(os.listdir("."))
with open("notes.txt", "w") as f:
    f.write("line1\nline2\n")
print(open("/workspace/notes.txt").read().splitlines())
os.mkdir("sub")
os.rename("notes.txt", "sub/n.txt")
print(sorted(os.listdir(".")), os.listdir("sub"))
os.remove("sub/n.txt")
os.rmdir("sub")
print(os.listdir("/workspace"))`,
			status: box.StatusOK, stdout: str("True /workspace\n[]\n['line1', 'line2']\n['sub'] ['n.txt']\n[]\n"), stderr: str("")},
		{name: "bash files in the workspace", args: []string{"--lang", "bash"}, stdin: `cd; pwd; echo hi > f; cat f; ls; rm f; ls | wc -l`,
			status: box.StatusOK, stdout: str("/workspace\nhi\nf\n0\n"), stderr: str("")},
		{name: "unicode in code and output", args: []string{"--lang", "python"}, stdin: "# コメント\nnäme = 'ü'\nprint(näme * 3, 'héllo 世界 🚀')\nimport sys\nsys.stderr.write('ошибка ✗ <&>\\n')\n",
			status: box.StatusOK, stdout: str("üüü héllo 世界 🚀\n"), stderr: str("ошибка ✗ <&>\n")},
		{name: "unicode in bash", args: []string{"--lang", "bash"}, stdin: "echo 'héllo 世界 🚀'; printf '%s\\n' \"${#HOME}\"",
			status: box.StatusOK, stdout: str("héllo 世界 🚀\n10\n")},
		{name: "long script of 5000 lines", args: []string{"--lang", "python"}, stdin: long.String(),
			status: box.StatusOK, stdout: str("24995000\n"), stderr: str("")},
		{name: "script of exactly MaxCodeBytes", args: []string{"--lang", "python"}, stdin: maxScript,
			status: box.StatusOK, stdout: str("max\n"), stderr: str("")},
		{name: "SystemExit(3)", args: []string{"--lang", "python"}, stdin: "print('before')\nraise SystemExit(3)",
			status: box.StatusError, exitCode: 3, stdout: str("before\n"), stderr: str("")},
		{name: "sys.exit(0) is ok", args: []string{"--lang", "python"}, stdin: "import sys\nprint('x')\nsys.exit(0)\nprint('not reached')",
			status: box.StatusOK, stdout: str("x\n"), stderr: str("")},
		{name: "uncaught exception", args: []string{"--lang", "python"}, stdin: "def f():\n    raise ValueError('boom ü')\nprint('before')\nf()\n",
			status: box.StatusError, exitCode: 1, stdout: str("before\n"),
			check: func(t *testing.T, o runOut) {
				for _, want := range []string{"Traceback (most recent call last):", "in f\n", "ValueError: boom ü\n"} {
					if !strings.Contains(o.res.Stderr, want) {
						t.Errorf("stderr lacks %q:\n%s", want, o.res.Stderr)
					}
				}
			}},
		{name: "bash pipeline", args: []string{"--lang", "bash"}, stdin: `printf 'b\na\nc\n' | sort | head -2 | tr a-z A-Z`,
			status: box.StatusOK, stdout: str("A\nB\n"), stderr: str("")},
		{name: "bash exit code", args: []string{"--lang", "bash"}, stdin: "echo out\nexit 7\necho not reached",
			status: box.StatusError, exitCode: 7, stdout: str("out\n"), stderr: str("")},
		{name: "bash reads an empty stdin", args: []string{"--lang", "bash"}, stdin: `cat /dev/stdin; echo "rc=$?"; read -r line; echo "read=$? line=[$line]"`,
			status: box.StatusOK, stdout: str("rc=0\nread=1 line=[]\n"), stderr: str("")},
		{name: "python reads an empty stdin", args: []string{"--lang", "python"}, stdin: "import sys\nprint(repr(sys.stdin.read()))",
			status: box.StatusOK, stdout: str("''\n"), stderr: str("")},
		{name: "bash writes /dev/stderr and /dev/stdout", args: []string{"--lang", "bash"}, stdin: "echo x > /dev/stderr\necho y >&2\necho out > /dev/stdout",
			status: box.StatusOK, stdout: str("out\n"), stderr: str("x\ny\n")},
		{name: "file into the workspace", stdin: `
import hashlib, os
for p in ["input.bin", "sub/dir/name.csv", "abs/copy.bin"]:
    b = open(p, "rb").read()
    print(p, len(b), hashlib.sha256(b).hexdigest())
print(sorted(os.listdir(".")))
with open("input.bin", "ab") as f:
    f.write(b"changed in the box")
with open("sub/dir/name.csv", "wb") as f:
    f.write(b"")
print(os.path.getsize("input.bin"))`,
			args:   []string{"--lang", "python", "--file", srcPath, "--file", srcPath + ":sub/dir/name.csv", "--file", srcPath + ":/workspace/abs/copy.bin"},
			status: box.StatusOK, stderr: str(""),
			stdout: str(fmt.Sprintf("input.bin 10000 %[1]s\nsub/dir/name.csv 10000 %[1]s\nabs/copy.bin 10000 %[1]s\n['abs', 'input.bin', 'sub']\n10018\n", srcSum)),
			check: func(t *testing.T, o runOut) {
				b, err := os.ReadFile(srcPath)
				if err != nil || !bytes.Equal(b, src) {
					t.Errorf("the host file changed (err %v, %d bytes)", err, len(b))
				}
				fi, err := os.Stat(srcPath)
				if err != nil || !fi.ModTime().Equal(past) || fi.Mode().Perm() != 0o644 {
					t.Errorf("the host file's metadata changed: %v %v", fi, err)
				}
			}},
		{name: "env flags and a safe environment", args: []string{"--lang", "python", "--env", "A=1", "--env", "B=two words", "--env", "C="},
			stdin:  "import os, json\nprint(json.dumps(dict(os.environ)))",
			status: box.StatusOK, stderr: str(""),
			check: func(t *testing.T, o runOut) {
				var got map[string]string
				if err := json.Unmarshal([]byte(o.res.Stdout), &got); err != nil {
					t.Fatalf("bad env dump: %v\n%s", err, o)
				}
				want := map[string]string{}
				for _, kv := range box.MergeEnv([]string{"A=1", "B=two words", "C="}) {
					k, v, _ := strings.Cut(kv, "=")
					want[k] = v
				}
				if got["A"] != "1" || got["B"] != "two words" || got["HOME"] != "/workspace" || got["PATH"] == "" {
					t.Errorf("A, B, HOME or PATH wrong: %v", got)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("environment in the box:\n%v\nwant exactly:\n%v", got, want)
				}
			}},
		{name: "bash sees no host environment", args: []string{"--lang", "bash", "--env", "B=two words"},
			stdin:  `env | sort; echo "[$B]"; echo "$HOME"; echo "$PATH"`,
			status: box.StatusOK, stderr: str(""),
			check: func(t *testing.T, o runOut) {
				for _, bad := range []string{"MOAT_TEST_SECRET", "AWS_SECRET_ACCESS_KEY", hostSecret, "GOPATH=", "GOCACHE=", "CI="} {
					if strings.Contains(o.res.Stdout, bad) {
						t.Errorf("host environment %q visible in the box:\n%s", bad, o.res.Stdout)
					}
				}
				if !strings.HasSuffix(o.res.Stdout, "[two words]\n/workspace\n/usr/local/bin:/usr/bin:/bin\n") {
					t.Errorf("B, HOME or PATH wrong:\n%s", o.res.Stdout)
				}
			}},
		{name: "dash reads code from stdin", args: []string{"--lang", "bash", "-"}, stdin: "echo from-stdin",
			status: box.StatusOK, stdout: str("from-stdin\n")},
		{name: "output at the limit is not truncated", args: []string{"--lang", "python", "--output-limit", "4KiB"},
			stdin:  "import sys\nsys.stdout.write('y' * 4096)",
			status: box.StatusOK, stdout: str(strings.Repeat("y", 4096)),
			check: func(t *testing.T, o runOut) {
				if o.res.Truncated {
					t.Errorf("truncated is true for output of exactly the limit")
				}
			}},
		{name: "output truncated without flood", args: []string{"--lang", "python", "--output-limit", "4KiB"},
			stdin: `
import sys
sys.stdout.write("".join("%05d\n" % i for i in range(2048)))
sys.stdout.flush()
sys.stderr.write("done\n")`,
			status: box.StatusOK, stderr: str("done\n"),
			check: func(t *testing.T, o runOut) {
				out := o.res.Stdout
				if !o.res.Truncated {
					t.Errorf("truncated is false for %d bytes at a cap of 4096", len(full))
				}
				if !strings.HasPrefix(out, full[:2048]) {
					t.Errorf("stdout lacks the head:\n%.300s", out)
				}
				if !strings.HasSuffix(out, full[len(full)-2048:]) {
					t.Errorf("stdout lacks the tail:\n%s", out[max(0, len(out)-300):])
				}
				if !strings.Contains(out, "bytes elided") {
					t.Errorf("stdout lacks the elision marker")
				}
				if strings.Contains(out, "01000\n") || len(out) > 4096+200 {
					t.Errorf("the middle was kept: %d bytes", len(out))
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotHost(t)
			o := moatRun(t, c.stdin, c.args...)
			assertResult(t, o, c.status, c.exitCode)
			if c.stdout != nil && o.res.Stdout != *c.stdout {
				t.Errorf("stdout = %.500q\nwant     %.500q", o.res.Stdout, *c.stdout)
			}
			if c.stderr != nil && o.res.Stderr != *c.stderr {
				t.Errorf("stderr = %.500q\nwant     %.500q", o.res.Stderr, *c.stderr)
			}
			if c.check != nil {
				c.check(t, o)
			}
			checkHostClean(t, before)
		})
	}
}

// TestBenignFileArgument: code in a FILE, language from its extension, flags before or
// after the FILE.
func TestBenignFileArgument(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	py := []byte("import os\nprint('py', 6 * 7, os.environ.get('A'))\n")
	sh := []byte("echo \"sh-$((6 * 7))-${BASH_VERSINFO[0]:+bash}-$A\"\n")
	cases := []struct {
		name   string
		args   []string
		stdout string
	}{
		{"py extension", []string{"run", "--json", writeFixture(t, dir, "a/prog.py", py)}, "py 42 None\n"},
		{"upper-case PY extension", []string{"run", "--json", writeFixture(t, dir, "b/PROG.PY", py)}, "py 42 None\n"},
		{"sh extension", []string{"run", "--json", writeFixture(t, dir, "c/prog.sh", sh)}, "sh-42-bash-\n"},
		{"bash extension", []string{"run", "--json", writeFixture(t, dir, "d/prog.bash", sh)}, "sh-42-bash-\n"},
		{"lang overrides extension", []string{"run", "--json", "--lang", "python", writeFixture(t, dir, "e/prog.txt", py)}, "py 42 None\n"},
		{"lang overrides a wrong extension", []string{"run", "--json", "--lang", "bash", writeFixture(t, dir, "f/prog.py", sh)}, "sh-42-bash-\n"},
		{"flags after FILE", []string{"run", writeFixture(t, dir, "g/prog.py", py), "--json", "--env", "A=after", "--timeout", "20s"}, "py 42 after\n"},
		{"flags on both sides of FILE", []string{"run", "--env", "A=x", writeFixture(t, dir, "h/prog.sh", sh), "--json"}, "sh-42-bash-x\n"},
		// moat's own stdin holds text here: the code must get an empty stdin, not moat's.
		{"code's stdin is empty", []string{"run", "--json", writeFixture(t, dir, "i/stdin.sh", []byte(`cat /dev/stdin; echo "rc=$?"; read -r l; echo "read=$? [$l]"`))}, "rc=0\nread=1 []\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotHost(t)
			o := moatExec(t, "print('this stdin must be ignored')", c.args...)
			decodeResult(t, &o)
			assertResult(t, o, box.StatusOK, 0)
			if o.res.Stdout != c.stdout || o.res.Stderr != "" {
				t.Errorf("stdout %q stderr %q, want stdout %q", o.res.Stdout, o.res.Stderr, c.stdout)
			}
			checkHostClean(t, before)
		})
	}
}

// TestBenignJSONShape: every documented key is present with its JSON type, arrays are
// [] and never null, whatever the status.
func TestBenignJSONShape(t *testing.T) {
	testutil.RequireRoot(t)
	cases := []struct {
		name   string
		code   string
		args   []string
		status string
		check  func(t *testing.T, m map[string]any)
	}{
		{name: "ok with 50 MB allocated", status: "ok", args: []string{"--lang", "python"},
			code: "x = b'x' * (50 << 20)\nn = sum(range(3 * 10**6))\nprint(len(x), n)",
			check: func(t *testing.T, m map[string]any) {
				usage := m["usage"].(map[string]any)
				cpu, _ := usage["cpu_ms"].(json.Number).Int64()
				peak, _ := usage["peak_memory_bytes"].(json.Number).Int64()
				dur, _ := m["duration_ms"].(json.Number).Int64()
				if cpu <= 0 || cpu > 2*dur+100 {
					t.Errorf("usage.cpu_ms = %d for a CPU-busy run of %d ms", cpu, dur)
				}
				if peak < 50<<20 || peak > 1<<30 {
					t.Errorf("usage.peak_memory_bytes = %d after allocating 50 MiB", peak)
				}
				if dur <= 0 || dur > 30000 {
					t.Errorf("duration_ms = %d", dur)
				}
				if m["stdout"] != "52428800 4499998500000\n" {
					t.Errorf("stdout = %q", m["stdout"])
				}
			}},
		{name: "error", status: "error", args: []string{"--lang", "bash"}, code: "exit 3"},
		{name: "timeout", status: "timeout", args: []string{"--lang", "bash", "--timeout", "1s"}, code: "sleep 20"},
	}
	arrays := []string{"display", "violations", "isolation", "warnings"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotHost(t)
			o := moatRun(t, c.code, c.args...)
			if o.exit != 0 {
				t.Fatalf("moat exited %d\n%s", o.exit, o)
			}
			dec := json.NewDecoder(strings.NewReader(o.stdout))
			dec.UseNumber()
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			if dec.More() {
				t.Errorf("more than one JSON value on stdout")
			}
			for key, kind := range map[string]string{
				"status": "string", "exit_code": "number", "stdout": "string", "stderr": "string",
				"result": "null", "display": "array", "violations": "array", "redactions": "number",
				"truncated": "bool", "duration_ms": "number", "usage": "object", "isolation": "array", "warnings": "array",
			} {
				v, ok := m[key]
				if !ok {
					t.Errorf("key %q missing from the result", key)
					continue
				}
				got := "other"
				switch v.(type) {
				case nil:
					got = "null"
				case string:
					got = "string"
				case json.Number:
					got = "number"
				case bool:
					got = "bool"
				case []any:
					got = "array"
				case map[string]any:
					got = "object"
				}
				if got != kind {
					t.Errorf("key %q is %s (%v), want %s", key, got, v, kind)
				}
			}
			if t.Failed() {
				t.FailNow()
			}
			if _, ok := m["error"]; ok {
				t.Errorf("key error present outside internal_error: %v", m["error"])
			}
			if m["status"] != c.status {
				t.Errorf("status %v, want %s", m["status"], c.status)
			}
			for _, a := range arrays {
				if !strings.Contains(o.stdout, `"`+a+`":[`) {
					t.Errorf("%s is not a JSON array in %s", a, o.stdout)
				}
			}
			usage := m["usage"].(map[string]any)
			for _, k := range []string{"cpu_ms", "peak_memory_bytes"} {
				n, ok := usage[k].(json.Number)
				if !ok {
					t.Errorf("usage.%s missing or not a number: %v", k, usage[k])
					continue
				}
				if v, err := n.Int64(); err != nil || v < 0 {
					t.Errorf("usage.%s = %v", k, n)
				}
			}
			iso := map[string]bool{}
			for _, s := range m["isolation"].([]any) {
				iso[s.(string)] = true
			}
			for _, want := range []string{"user_namespace", "pid_namespace", "network_namespace", "mount_namespace", "seccomp", "no_new_privs"} {
				if !iso[want] {
					t.Errorf("isolation lacks %q: %v", want, m["isolation"])
				}
			}
			if c.check != nil {
				c.check(t, m)
			}
			checkHostClean(t, before)
		})
	}
}

// TestCLIIsolationReportStable: the isolation and warnings of a result describe the box,
// not how the code ended. A box whose code ran to a timeout, an OOM kill or an output
// flood had the same protections as one whose code exited cleanly.
func TestCLIIsolationReportStable(t *testing.T) {
	testutil.RequireRoot(t)
	base := baseline(t)
	cases := []struct {
		name   string
		code   string
		args   []string
		status box.Status
	}{
		{"error", "echo started; exit 3", []string{"--lang", "bash"}, box.StatusError},
		{"killed by a signal", "echo started; kill -TERM $$", []string{"--lang", "bash"}, box.StatusKilled},
		{"memory limit", "print('started', flush=True)\nx = b'x' * (200 << 20)", []string{"--lang", "python", "--memory", "32MiB"}, box.StatusMemoryLimit},
		{"timeout", "echo started; sleep 20", []string{"--lang", "bash", "--timeout", "1s"}, box.StatusTimeout},
		{"output flood", "import sys\nprint('started', flush=True)\nwhile True:\n    sys.stdout.write('A' * 65536)", []string{"--lang", "python", "--output-limit", "4KiB"}, box.StatusOutputLimit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotHost(t)
			o := moatRun(t, c.code, c.args...)
			if o.exit != 0 || o.res.Status != c.status {
				t.Fatalf("want status %s\n%s", c.status, o)
			}
			if !strings.HasPrefix(o.res.Stdout, "started\n") {
				t.Fatalf("the code did not start, so the box was set up:\n%s", o)
			}
			if !reflect.DeepEqual(o.res.Isolation, base.Isolation) {
				t.Errorf("isolation after %s:\n%v\nwant (as for a clean exit):\n%v", c.status, o.res.Isolation, base.Isolation)
			}
			if !reflect.DeepEqual(o.res.Warnings, base.Warnings) {
				t.Errorf("warnings after %s:\n%q\nwant (as for a clean exit):\n%q", c.status, o.res.Warnings, base.Warnings)
			}
			checkHostClean(t, before)
		})
	}
}

// TestCLISmallPidsLimit: a --pids value that the flag accepts either runs the code or is
// refused as a usage error; it must not crash moat's own box init.
func TestCLISmallPidsLimit(t *testing.T) {
	testutil.RequireRoot(t)
	for _, pids := range []string{"1", "2", "4", "8"} {
		t.Run("pids "+pids, func(t *testing.T) {
			before := snapshotHost(t)
			o := moatExec(t, "print('ran')", "run", "--lang", "python", "--pids", pids)
			switch o.exit {
			case 0:
				if o.stdout != "ran\n" {
					t.Errorf("stdout %q, want ran", o.stdout)
				}
			case 2:
				if !strings.HasPrefix(o.stderr, "moat: --pids") || strings.Count(o.stderr, "\n") != 1 || o.stdout != "" {
					t.Errorf("a refusal must be one moat: --pids line:\n%s", o.stderr)
				}
			default:
				t.Errorf("moat exited %d with --pids %s; want the code to run (0) or a usage error (2)\nstderr: %.600s", o.exit, pids, o.stderr)
			}
			if strings.Contains(o.stderr, "goroutine ") || strings.Contains(o.stderr, "fatal error") {
				t.Errorf("a Go runtime crash of moat was printed to the user:\n%.600s", o.stderr)
			}
			checkHostClean(t, before)
		})
	}
}

// TestLiveMode: without --json the code's output is passed through byte for byte and
// moat exits with the code's status, or with the documented status for how it was
// stopped, followed by one moat: line saying why.
func TestLiveMode(t *testing.T) {
	testutil.RequireRoot(t)
	warn := warningLines(baseline(t).Warnings)
	cases := []struct {
		name     string
		args     []string
		code     string
		exit     int
		stdout   string
		stderr   string // the code's stderr, passed through first
		moatTail string // moat's own lines after it, besides the host's warnings
		maxWall  time.Duration
	}{
		{name: "clean run", args: []string{"--lang", "python"}, code: "print('hello')", stdout: "hello\n"},
		{name: "verbatim bytes", args: []string{"--lang", "bash"},
			code:   `printf 'out\000\377 ü no newline'; printf 'err ü\n' >&2; printf 'more'`,
			stdout: "out\x00\xff ü no newlinemore", stderr: "err ü\n"},
		{name: "interleaved python streams", args: []string{"--lang", "python"},
			code:   "import sys\nfor i in range(3):\n    print('o', i)\n    print('e', i, file=sys.stderr)",
			stdout: "o 0\no 1\no 2\n", stderr: "e 0\ne 1\ne 2\n"},
		{name: "exit 5", args: []string{"--lang", "bash"}, code: "echo five; echo oops >&2; exit 5", exit: 5, stdout: "five\n", stderr: "oops\n"},
		{name: "python SystemExit(3)", args: []string{"--lang", "python"}, code: "raise SystemExit(3)", exit: 3},
		{name: "killed by SIGTERM", args: []string{"--lang", "python", "--profile", "open"}, code: "import os, signal\nprint('x', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)", exit: 128 + 15, stdout: "x\n"},
		{name: "timeout", args: []string{"--lang", "bash", "--timeout", "1s"}, code: "echo started; echo e >&2; sleep 30",
			exit: 124, stdout: "started\n", stderr: "e\n", moatTail: "moat: timeout: the code was stopped at its time limit (--timeout)\n", maxWall: 10 * time.Second},
		{name: "memory limit", args: []string{"--lang", "python", "--memory", "32MiB"},
			code: "print('started', flush=True)\nx = bytearray(200 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint('not reached')",
			exit: 137, stdout: "started\n", moatTail: "moat: memory limit: the code was killed at the box's memory limit (--memory)\n"},
		{name: "output flood", args: []string{"--lang", "python", "--output-limit", "4KiB"},
			code: "import sys\nwhile True:\n    sys.stdout.write('A' * 65536)",
			exit: 141, stdout: strings.Repeat("A", 4096),
			moatTail: "moat: output truncated at the output limit (--output-limit)\nmoat: output limit: killed for flooding output\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotHost(t)
			o := moatExec(t, c.code, append([]string{"run"}, c.args...)...)
			if o.exit != c.exit {
				t.Errorf("moat exited %d, want %d\nstderr: %.1000s", o.exit, c.exit, o.stderr)
			}
			if o.stdout != c.stdout {
				t.Errorf("stdout = %.300q\nwant     %.300q", o.stdout, c.stdout)
			}
			// The code's stderr comes first, verbatim; then moat's warnings and its reason.
			if want := c.stderr + warn + c.moatTail; o.stderr != want {
				t.Errorf("stderr = %q\nwant     %q", o.stderr, want)
			}
			if c.maxWall > 0 && o.wall > c.maxWall {
				t.Errorf("took %s, want under %s", o.wall, c.maxWall)
			}
			checkHostClean(t, before)
		})
	}
}

// TestBadInput: every refusal is a usage error (exit 2) that prints one line on stderr,
// nothing on stdout, and makes no box.
func TestBadInput(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	good := writeFixture(t, dir, "good.py", []byte("print(1)\n"))
	other := writeFixture(t, dir, "other.py", []byte("print(2)\n"))
	input := writeFixture(t, dir, "x.txt", []byte("data\n"))
	big := writeFixture(t, dir, "big.bin", bytes.Repeat([]byte("z"), 4096))
	ws := writeFixture(t, dir, "blank.py", []byte(" \n\t\n  \r\n"))
	empty := writeFixture(t, dir, "empty.sh", nil)
	unknownExt := writeFixture(t, dir, "prog.txt", []byte("print(1)\n"))
	noExt := writeFixture(t, dir, "prog", []byte("print(1)\n"))
	dirPy := filepath.Join(dir, "pkg.py")
	if err := os.Mkdir(dirPy, 0o755); err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	garbage[100] = 0
	garbageFile := writeFixture(t, dir, "garbage.py", garbage)
	latin1 := writeFixture(t, dir, "latin1.py", []byte("print('h\xe9llo')\n"))
	tooBigCode := strings.Repeat("#", box.MaxCodeBytes) + "\nprint(1)\n"
	tooBigFile := writeFixture(t, dir, "toobig.py", []byte(tooBigCode))
	missing := filepath.Join(dir, "does", "not", "exist.py")

	type badCase struct {
		name  string
		args  []string // the whole argv of moat
		stdin string
		// msg is the start of the first stderr line; want is a substring of it.
		msg, want string
		// usage: the error may be followed by usage text (flag's and the command
		// dispatcher's own behaviour); otherwise the error is exactly one line.
		usage bool
	}
	cases := []badCase{
		{name: "unknown flag", args: []string{"run", "--bogus", good}, msg: "flag provided but not defined: -bogus", usage: true},
		{name: "flag without its value", args: []string{"run", good, "--memory"}, msg: "flag needs an argument: -memory", usage: true},
		{name: "unknown lang", args: []string{"run", "--lang", "ruby"}, stdin: "puts 1", msg: "moat: --lang:", want: `"ruby"`},
		{name: "unknown lang with a file", args: []string{"run", "--lang", "perl", good}, msg: "moat: --lang:", want: `"perl"`},
		{name: "missing file", args: []string{"run", missing}, msg: "moat: cannot read code", want: "no such file"},
		{name: "directory as file", args: []string{"run", dir}, msg: "moat: cannot read code", want: "not a regular file"},
		{name: "directory named .py", args: []string{"run", dirPy}, msg: "moat: cannot read code", want: "not a regular file"},
		{name: "empty stdin", args: []string{"run", "--lang", "python"}, stdin: "", msg: "moat: code is empty"},
		{name: "whitespace-only stdin", args: []string{"run", "--lang", "bash", "-"}, stdin: "\n \t\n", msg: "moat: code is empty"},
		{name: "whitespace-only file", args: []string{"run", ws}, msg: "moat: code is empty"},
		{name: "empty file", args: []string{"run", empty}, msg: "moat: code is empty"},
		{name: "binary garbage on stdin", args: []string{"run", "--lang", "python"}, stdin: string(garbage), msg: "moat: code is", want: "NUL"},
		{name: "binary garbage file", args: []string{"run", garbageFile}, msg: "moat: code is", want: "NUL"},
		{name: "NUL after valid code", args: []string{"run", "--lang", "bash"}, stdin: "echo hi\n\x00", msg: "moat: code is binary", want: "offset 8"},
		{name: "invalid UTF-8 on stdin", args: []string{"run", "--lang", "python"}, stdin: "print('\xff\xfe')\n", msg: "moat: code is not valid UTF-8"},
		{name: "latin-1 file", args: []string{"run", latin1}, msg: "moat: code is not valid UTF-8"},
		{name: "code over MaxCodeBytes on stdin", args: []string{"run", "--lang", "python"}, stdin: tooBigCode, msg: "moat: code is", want: "over the limit"},
		{name: "code file over MaxCodeBytes", args: []string{"run", tooBigFile}, msg: "moat: code is", want: "over the limit"},
		{name: "stdin without lang", args: []string{"run"}, stdin: "print(1)", msg: "moat: cannot infer the language", want: "--lang"},
		{name: "dash without lang", args: []string{"run", "-"}, stdin: "print(1)", msg: "moat: cannot infer the language", want: "--lang"},
		{name: "unknown extension without lang", args: []string{"run", unknownExt}, msg: "moat: cannot infer the language", want: "prog.txt"},
		{name: "no extension without lang", args: []string{"run", noExt}, msg: "moat: cannot infer the language"},
		{name: "two positional files", args: []string{"run", good, other}, msg: "moat: expected at most one FILE", want: "other.py"},
		{name: "two files around flags", args: []string{"run", good, "--lang", "python", other}, msg: "moat: expected at most one FILE"},
		{name: "memory below minimum", args: []string{"run", "--memory", "8MiB", good}, msg: "moat: --memory:", want: "minimum"},
		{name: "memory 16MB is below 16MiB", args: []string{"run", "--memory", "16MB", good}, msg: "moat: --memory:", want: "minimum"},
		{name: "file missing source", args: []string{"run", "--file", missing, good}, msg: "moat: --file", want: "no such file"},
		{name: "file source is a directory", args: []string{"run", "--file", dir + ":d", good}, msg: "moat: --file", want: "not a regular file"},
		{name: "file empty source", args: []string{"run", "--file", ":dest.txt", good}, msg: "moat: --file", want: "SRC[:DEST]"},
		{name: "file empty dest", args: []string{"run", "--file", input + ":", good}, msg: "moat: --file", want: "empty"},
		{name: "file dest escapes by dotdot", args: []string{"run", "--file", input + ":../../etc/passwd", good}, msg: "moat: --file", want: "outside the workspace"},
		{name: "file dest is dotdot", args: []string{"run", "--file", input + ":..", good}, msg: "moat: --file", want: "outside the workspace"},
		{name: "file dest absolute outside", args: []string{"run", "--file", input + ":/etc/passwd", good}, msg: "moat: --file", want: "outside the workspace"},
		{name: "file dest is the workspace", args: []string{"run", "--file", input + ":/workspace", good}, msg: "moat: --file", want: "outside the workspace"},
		{name: "file dest absolute escapes", args: []string{"run", "--file", input + ":/workspace/../etc/x", good}, msg: "moat: --file", want: "outside the workspace"},
		{name: "file dest given twice", args: []string{"run", "--file", input + ":a/b", "--file", good + ":a/./b", good}, msg: "moat: --file", want: "given twice"},
		{name: "file larger than disk", args: []string{"run", "--disk", "1KiB", "--file", big, good}, msg: "moat: --file", want: "larger than the workspace"},
		{name: "network host", args: []string{"run", "--network", "host", good}, msg: "moat: network mode", want: `"host"`},
		{name: "network empty", args: []string{"run", "--network", "", good}, msg: "moat: network mode"},
		{name: "backend unknown", args: []string{"run", "--backend", "podman", good}, msg: "moat: --backend: unknown backend", want: `"podman" (want native, docker or gvisor)`},
		{name: "unknown subcommand", args: []string{"frob"}, msg: `moat: unknown command "frob"`, usage: true},
		{name: "misspelled run", args: []string{"rnu", good}, msg: `moat: unknown command "rnu"`, usage: true},
	}
	for _, v := range []string{"lots", "-1MiB", "0", "1.5.5GiB", "12XB", "1e30GiB", "NaN"} {
		cases = append(cases, badCase{name: "memory " + v, args: []string{"run", "--memory", v, good}, msg: "moat: --memory:", want: fmt.Sprintf("%q", v)})
	}
	cases = append(cases, badCase{name: "memory empty", args: []string{"run", "--memory", "", good}, msg: "moat: --memory:", want: "empty"})
	for _, v := range []string{"10", "-1s", "soon", "0s", ""} {
		cases = append(cases, badCase{name: "timeout " + v, args: []string{"run", "--timeout", v, good}, msg: "moat: --timeout:", want: fmt.Sprintf("%q", v)})
	}
	for _, v := range []string{"abc", "0", "-1", "0.001", "2000", "Inf", "NaN", "nan", ""} {
		cases = append(cases, badCase{name: "cpus " + v, args: []string{"run", "--cpus", v, good}, msg: "moat: --cpus:", want: fmt.Sprintf("%q", v)})
	}
	for _, v := range []string{"0", "-3", "many", "1.5", "0x10", "99999999999", ""} {
		cases = append(cases, badCase{name: "pids " + v, args: []string{"run", "--pids", v, good}, msg: "moat: --pids:", want: fmt.Sprintf("%q", v)})
	}
	for _, fl := range []string{"--disk", "--tmp", "--output-limit"} {
		for _, v := range []string{"big", "0", "-5MiB"} {
			cases = append(cases, badCase{name: fl + " " + v, args: []string{"run", fl, v, good}, msg: "moat: " + fl + ":", want: fmt.Sprintf("%q", v)})
		}
	}
	for _, v := range []string{"NOEQUALS", "1X=2", "=value", "A-B=1", "A B=1"} {
		cases = append(cases, badCase{name: "env " + v, args: []string{"run", "--env", v, good}, msg: "moat: --env:", want: fmt.Sprintf("%q", strings.SplitN(v, "=", 2)[0])})
	}

	for _, c := range cases {
		variants := [][]string{c.args}
		if c.args[0] == "run" {
			variants = append(variants, append([]string{"run", "--json"}, c.args[1:]...))
		}
		for _, args := range variants {
			name := c.name
			if len(args) > 1 && args[1] == "--json" {
				name += " json"
			}
			t.Run(name, func(t *testing.T) {
				before := snapshotHost(t)
				o := moatExec(t, c.stdin, args...)
				if o.exit != 2 {
					t.Errorf("moat exited %d, want 2 (usage error)", o.exit)
				}
				if o.stdout != "" {
					t.Errorf("stdout is not empty: %.300q", o.stdout)
				}
				first, rest, _ := strings.Cut(o.stderr, "\n")
				if !strings.HasPrefix(first, c.msg) || !strings.Contains(first, c.want) {
					t.Errorf("first stderr line %q, want it to start with %q and contain %q", first, c.msg, c.want)
				}
				switch {
				case c.usage && !strings.Contains(rest, "Usage:"):
					t.Errorf("no usage text after the error:\n%s", o.stderr)
				case !c.usage && (rest != "" || !strings.HasSuffix(o.stderr, "\n")):
					t.Errorf("stderr is not one line:\n%.1000s", o.stderr)
				}
				checkHostClean(t, before)
			})
		}
	}
}

// TestRunReapsKilledRun: a moat run killed with SIGKILL cannot destroy its box; its
// processes die with it (init's parent-death signal), its cgroups stay, and the next
// moat run removes them.
func TestRunReapsKilledRun(t *testing.T) {
	before := snapshotHost(t)
	var killed int
	o := moatExecWhile(t, nil, func(pid int) {
		killed = pid
		deadline := time.Now().Add(20 * time.Second)
		for len(testutil.BoxCgroups(fmt.Sprintf("box-%d-", pid))) == 0 || len(boxProcesses()) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the box did not start")
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}, "import time\ntime.sleep(60)", "run", "--json", "--lang", "python", "-")
	if o.exit != -1 {
		t.Fatalf("moat was not killed: %s", o)
	}
	prefix := fmt.Sprintf("box-%d-", killed)
	left := testutil.BoxCgroups(prefix)
	if len(left) == 0 {
		t.Fatal("the killed run left no cgroups: the test proves nothing")
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(boxProcesses()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if procs := boxProcesses(); len(procs) > 0 {
		t.Fatalf("the killed run's box outlived it: %v", procs)
	}
	next := moatRun(t, "print(1)", "--lang", "python", "-")
	assertResult(t, next, box.StatusOK, 0)
	if still := testutil.BoxCgroups(prefix); len(still) > 0 {
		t.Fatalf("the next moat run left the killed run's cgroups %v (there were %v)", still, left)
	}
	if strings.Contains(next.stderr, "reaped") {
		t.Errorf("moat run told the user of the reaping: %q", next.stderr)
	}
	checkHostClean(t, before)
}

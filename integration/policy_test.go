//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// corpus lists the .py files of a policy corpus directory.
func corpus(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "internal/policy/python/testdata", dir, "*.py"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s: %v", dir, err)
	}
	return files
}

// expectedRule reads "# expect: RULE" from the first line of an attack file.
func expectedRule(code string) string {
	first, _, _ := strings.Cut(code, "\n")
	if r, ok := strings.CutPrefix(strings.TrimSpace(first), "# expect:"); ok {
		return strings.TrimSpace(r)
	}
	return ""
}

// TestPolicyAttacksThroughMoat runs every attack of the Python corpus through the real
// binary under the default profile: each must come back blocked with a violation of
// its expected rule, and its effect (a PWNED line, a canary file in /tmp of the box)
// must not have happened.
func TestPolicyAttacksThroughMoat(t *testing.T) {
	testutil.RequireRoot(t)
	files := corpus(t, "attacks")
	if len(files) < 38 {
		t.Fatalf("attack corpus has %d files, want at least 38", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			code, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			want := expectedRule(string(code))
			o := moatRun(t, string(code), "--lang", "python", "--profile", "default")
			if o.exit != 0 {
				t.Fatalf("moat failed:\n%s", o)
			}
			if o.res.Status != box.StatusBlocked {
				t.Fatalf("status %s, want blocked\n%s", o.res.Status, o)
			}
			found := false
			for _, v := range o.res.Violations {
				found = found || v.Rule == want || want == ""
				if v.Detail == "" || !strings.HasPrefix(v.Rule, "python.") {
					t.Errorf("violation without a rule or detail: %+v", v)
				}
			}
			if !found {
				// The profile may stop the attack earlier, by another rule: still blocked.
				t.Logf("blocked by %+v rather than %q", o.res.Violations, want)
			}
			if strings.Contains(o.res.Stdout, "PWNED") {
				t.Errorf("the attack's effect happened:\n%s", o)
			}
		})
	}
}

// TestPolicyBenignThroughMoat runs the benign corpus under the default profile: zero
// violations, status ok. Under strict it logs what is blocked (not a failure).
func TestPolicyBenignThroughMoat(t *testing.T) {
	testutil.RequireRoot(t)
	files := corpus(t, "benign")
	if len(files) < 60 {
		t.Fatalf("benign corpus has %d files, want at least 60", len(files))
	}
	strictBlocked := 0
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			code, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			o := moatRun(t, string(code), "--lang", "python", "--profile", "default", "--memory", "512MiB", "--timeout", "60s")
			if o.res.Status != box.StatusOK || len(o.res.Violations) != 0 {
				t.Fatalf("benign code not ok under default:\n%s\nviolations: %+v", o, o.res.Violations)
			}
			s := moatRun(t, string(code), "--lang", "python", "--profile", "strict", "--memory", "512MiB", "--timeout", "60s")
			if s.res.Status == box.StatusBlocked {
				strictBlocked++
				t.Logf("strict blocks it: %+v", s.res.Violations)
			}
		})
	}
	t.Logf("strict blocked %d of %d benign snippets", strictBlocked, len(files))
}

// TestShellPolicyThroughMoat: under a profile that allows a few commands, the issue's
// attacks are blocked before any box starts, and pipelines of allowed commands run.
func TestShellPolicyThroughMoat(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "moat.yaml")
	if err := os.WriteFile(cfg, []byte(`profiles:
  tools:
    extends: open
    shell:
      allow: [ls, cat, grep, echo, head, tail, wc, sort, sed, awk, printf]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, code string
		ok         bool
	}{
		{"rm -rf /", "rm -rf /", false},
		{"curl", "curl http://example.com", false},
		{"wget", "wget http://example.com", false},
		{"nc", "nc -l 8080", false},
		{"substitution", "echo $(curl http://x)", false},
		{"backticks", "echo `wget http://x`", false},
		{"eval base64", `eval "$(echo Y3VybCBodHRwOi8veA== | base64 -d)"`, false},
		{"bash -c", "bash -c 'curl http://x'", false},
		{"absolute path", "/usr/bin/curl http://x", false},
		{"env wrapper", "env curl http://x", false},
		{"pipeline of allowed", "printf 'b\\na\\nc\\n' | sort | head -2 | wc -l", true},
		{"grep and awk", "echo 'x 1' | grep x | awk '{print $2}'", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := moatRun(t, c.code, "--lang", "bash", "--config", cfg, "--profile", "tools")
			if c.ok {
				if o.res.Status != box.StatusOK {
					t.Fatalf("allowed pipeline did not run:\n%s", o)
				}
				return
			}
			if o.res.Status != box.StatusBlocked || len(o.res.Violations) == 0 {
				t.Fatalf("not blocked:\n%s", o)
			}
			if o.res.DurationMS != 0 || o.res.Stdout != "" {
				t.Fatalf("a blocked script must never start a box:\n%s", o)
			}
		})
	}
}

// TestRedactionThroughMoat: secrets the code prints come back redacted, counted, and
// with markers naming the rule — also when printed byte by byte, and the exact value
// of a secret in moat's own environment.
func TestRedactionThroughMoat(t *testing.T) {
	testutil.RequireRoot(t)
	code := `
import sys, os
print("aws AKIAIOSFODNN7EXAMPLE")
k = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
for ch in k:
    sys.stdout.write(ch); sys.stdout.flush()
print()
print("db postgres://app:s3cretPassw0rd@db.internal:5432/prod")
`
	o := moatRun(t, code, "--lang", "python", "--profile", "open")
	if o.res.Status != box.StatusOK {
		t.Fatalf("status %s\n%s", o.res.Status, o)
	}
	for _, leak := range []string{"AKIAIOSFODNN7EXAMPLE", "ghp_a1B2c3D4e5F6", "s3cretPassw0rd"} {
		if strings.Contains(o.stdout, leak) {
			t.Errorf("secret %q leaked:\n%s", leak, o.res.Stdout)
		}
	}
	for _, marker := range []string{"[REDACTED:aws_access_key]", "[REDACTED:github_token]"} {
		if !strings.Contains(o.res.Stdout, marker) {
			t.Errorf("marker %s missing:\n%s", marker, o.res.Stdout)
		}
	}
	if o.res.Redactions < 3 {
		t.Errorf("redactions = %d, want at least 3", o.res.Redactions)
	}
	// The harness runs moat with MOAT_TEST_SECRET and AWS_SECRET_ACCESS_KEY set to
	// hostSecret; code that somehow learned the value must not be able to print it.
	o = moatRun(t, "print('x' + '"+hostSecret+"')", "--lang", "python", "--profile", "open")
	if strings.Contains(o.stdout, hostSecret) || !strings.Contains(o.res.Stdout, "[REDACTED:secret]") {
		t.Errorf("the exact value of moat's secret env var was not redacted:\n%s", o.res.Stdout)
	}
}

// TestConfigAndPolicyCommands: an invalid config stops moat (exit 2, every problem with
// its line, no box), `moat config check` validates, and `moat policy check` reports
// without running anything.
func TestConfigAndPolicyCommands(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("profile: default\nlimits:\n  memory: lots\nprofiles:\n  web:\n    python:\n      mode: allow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("profiles:\n  tools:\n    shell:\n      allow: [echo]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	before := snapshotHost(t)
	o := moatExec(t, "print(1)", "run", "--config", bad, "--lang", "python")
	if o.exit != 2 || o.stdout != "" {
		t.Fatalf("an invalid config must stop moat with exit 2 and no output; exit %d, stdout %q", o.exit, o.stdout)
	}
	for _, want := range []string{"bad.yaml:3: limits.memory", "bad.yaml:7: profiles.web.python.mode"} {
		if !strings.Contains(o.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, o.stderr)
		}
	}
	checkHostClean(t, before)

	if o := moatExec(t, "", "config", "check", bad); o.exit != 1 || !strings.Contains(o.stderr, "bad.yaml:7:") {
		t.Errorf("config check of a bad file: exit %d\n%s", o.exit, o.stderr)
	}
	if o := moatExec(t, "", "config", "check", good); o.exit != 0 || !strings.Contains(o.stdout, "ok") || !strings.Contains(o.stdout, "tools") {
		t.Errorf("config check of a good file: exit %d\n%s%s", o.exit, o.stdout, o.stderr)
	}

	// policy check never runs the code: its canary print must not appear.
	o = moatExec(t, "print('RAN')\nimport socket\n", "policy", "check", "--lang", "python", "-")
	if o.exit != 1 || !strings.Contains(o.stdout, "line 2: python.import") || strings.Contains(o.stdout, "RAN") {
		t.Errorf("policy check python: exit %d\n%s%s", o.exit, o.stdout, o.stderr)
	}
	o = moatExec(t, "echo hi; curl x\n", "policy", "check", "--config", good, "--profile", "tools", "--lang", "bash", "-")
	if o.exit != 1 || !strings.Contains(o.stdout, "shell.command") {
		t.Errorf("policy check bash: exit %d\n%s%s", o.exit, o.stdout, o.stderr)
	}
	if o := moatExec(t, "print(1)\n", "policy", "check", "--lang", "python", "-"); o.exit != 0 || !strings.Contains(o.stdout, "ok") {
		t.Errorf("policy check of benign code: exit %d\n%s%s", o.exit, o.stdout, o.stderr)
	}
}

package python

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// canary is the file an attack creates when its technique works.
func canary(name string) string { return "/tmp/moat-pwned-" + name }

// cleanAttack removes the canary and the payload files (/tmp/moat-payload-NAME*)
// an attack leaves behind.
func cleanAttack(t *testing.T, name string) {
	t.Helper()
	os.Remove(canary(name))
	payloads, err := filepath.Glob("/tmp/moat-payload-" + name + "*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range payloads {
		os.RemoveAll(p)
	}
}

// succeeded reports whether the attack's effect happened: its canary file exists,
// or its output shows it (PWNED, or the file's own "success: stdout" marker).
func succeeded(t *testing.T, f corpusFile, o outcome) (bool, string) {
	t.Helper()
	if _, err := os.Stat(canary(f.Name)); err == nil {
		return true, "canary " + canary(f.Name) + " exists"
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if strings.Contains(o.Stdout, "PWNED") {
		return true, "stdout has PWNED"
	}
	if marker, ok := strings.CutPrefix(f.Header["success"], "stdout "); ok && strings.Contains(o.Stdout, marker) {
		return true, "stdout has " + marker
	}
	return false, ""
}

// TestAttacks runs every file of testdata/attacks under the default policy: each must
// be refused with its expected rule and status 77, and its effect must not happen.
func TestAttacks(t *testing.T) {
	files := loadCorpus(t, "attacks")
	if len(files) < 45 {
		t.Fatalf("attack corpus has %d files, want at least 45", len(files))
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			want := f.Header["expect"]
			if want == "" {
				t.Fatalf("%s.py has no '# expect: RULE' header", f.Name)
			}
			cleanAttack(t, f.Name)
			defer cleanAttack(t, f.Name)
			o := runCode(t, DefaultPolicy(), f.Code, runOpts{})
			if ok, why := succeeded(t, f, o); ok {
				t.Errorf("attack worked (%s)\n%s", why, o)
			}
			if o.Exit != ExitViolation {
				t.Errorf("exit %d, want %d\n%s", o.Exit, ExitViolation, o)
			}
			if !o.hasRule(want) {
				t.Errorf("no %s violation\n%s", want, o)
			}
			for _, v := range o.Report.Violations {
				t.Logf("%s line %d: %s", v.Rule, v.Line, v.Detail)
			}
		})
	}
}

// TestAttacksWithoutPolicy proves the corpus is real: with policy off, each attack's
// effect happens (the box, not the runner, would then have to stop it).
func TestAttacksWithoutPolicy(t *testing.T) {
	off := DefaultPolicy()
	off.Mode = ModeOff
	for _, f := range loadCorpus(t, "attacks") {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			if reason, ok := strings.CutPrefix(f.Header["control"], "skip "); ok {
				t.Skip(reason)
			}
			cleanAttack(t, f.Name)
			defer cleanAttack(t, f.Name)
			o := runCode(t, off, f.Code, runOpts{})
			if ok, _ := succeeded(t, f, o); !ok {
				t.Errorf("attack did not work even without policy; fix the attack\n%s", o)
			}
			if len(o.Report.Violations) != 0 {
				t.Errorf("violations with policy off: %v", o.Report.Violations)
			}
		})
	}
}

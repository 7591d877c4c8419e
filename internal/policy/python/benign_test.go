package python

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
)

// TestBenign runs every file of testdata/benign, realistic programs an agent writes,
// under the default policy: none may be refused, each must exit 0, and the trailing
// expression must come back as its "# result:" header says.
func TestBenign(t *testing.T) {
	files := loadCorpus(t, "benign")
	if len(files) < 60 {
		t.Fatalf("benign corpus has %d files, want at least 60", len(files))
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			o := runCode(t, DefaultPolicy(), f.Code, runOpts{})
			if len(o.Report.Violations) != 0 || o.Exit != 0 {
				t.Fatalf("benign program refused or failed\n%s", o)
			}
			if want, ok := f.Header["result"]; ok {
				if o.Report.Result == nil {
					t.Fatalf("no result, want %s\n%s", want, o)
				}
				if *o.Report.Result != want {
					t.Errorf("result %s, want %s", *o.Report.Result, want)
				}
			}
		})
	}
}

// TestBenignStrict runs the benign corpus under StrictPolicy and logs what it refuses
// and why: strict is meant to refuse some of it, so this only fails when the runner
// itself fails (status 70) or a refusal has no violation.
func TestBenignStrict(t *testing.T) {
	files := loadCorpus(t, "benign")
	var mu sync.Mutex
	blocked := map[string][]string{}
	t.Run("corpus", func(t *testing.T) {
		for _, f := range files {
			t.Run(f.Name, func(t *testing.T) {
				t.Parallel()
				o := runCode(t, StrictPolicy(), f.Code, runOpts{})
				switch {
				case o.Exit == ExitInternal:
					t.Fatalf("runner failed\n%s", o)
				case o.Exit == ExitViolation && len(o.Report.Violations) == 0:
					t.Fatalf("status 77 without a violation\n%s", o)
				case o.Exit == ExitViolation:
					var why []string
					for _, v := range o.Report.Violations {
						why = append(why, fmt.Sprintf("%s (line %d): %s", v.Rule, v.Line, v.Detail))
					}
					mu.Lock()
					blocked[f.Name] = why
					mu.Unlock()
				case o.Exit != 0:
					mu.Lock()
					blocked[f.Name] = []string{fmt.Sprintf("exit %d: %s", o.Exit, lastLine(o.Stderr))}
					mu.Unlock()
				}
			})
		}
	})
	names := make([]string, 0, len(blocked))
	for n := range blocked {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("strict refuses %d of %d benign programs:", len(names), len(files))
	for _, n := range names {
		t.Logf("  %s: %s", n, strings.Join(blocked[n], "; "))
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

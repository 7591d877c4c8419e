package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
)

var shellRuleNames = map[string]bool{
	RuleShellParse: true, RuleShellCommand: true, RuleShellDynamic: true, RuleShellWrapper: true,
}

// FuzzCheckShell: CheckShell never panics, finishes quickly, is deterministic, and
// every violation has a known rule, a detail and a line of the script. Seeds are in
// testdata/fuzz/FuzzCheckShell.
func FuzzCheckShell(f *testing.F) {
	f.Add("ls -la | grep foo | sort | head -5", false)
	f.Add("f() { curl x; }; f", true)
	f.Fuzz(func(t *testing.T, script string, deny bool) {
		r := allowRules
		if deny {
			r = denyRules
		}
		done := make(chan []box.Violation, 1)
		go func() { done <- CheckShell(script, r) }()
		var got []box.Violation
		select {
		case got = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("CheckShell took over 10s for %q", script)
		}
		lines := strings.Count(script, "\n") + 1
		for _, v := range got {
			if !shellRuleNames[v.Rule] || v.Detail == "" || v.Line < 0 || v.Line > lines {
				t.Fatalf("bad violation %+v for %q", v, script)
			}
		}
		if again := CheckShell(script, r); !reflect.DeepEqual(got, again) {
			t.Fatalf("not deterministic for %q:\n%+v\n%+v", script, got, again)
		}
	})
}

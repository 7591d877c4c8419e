package policy

import (
	"reflect"
	"strings"
	"testing"
)

var shellRuleNames = map[string]bool{
	RuleShellParse: true, RuleShellCommand: true, RuleShellDynamic: true, RuleShellWrapper: true,
}

// FuzzCheckShell: CheckShell never panics, is deterministic, and every violation has
// a known rule, a detail and a line of the script. Seeds are in
// testdata/fuzz/FuzzCheckShell (9583a80ad4dbcded is an input the fuzzer flagged
// when a 10 s watchdog fired on an overloaded machine; it is fast).
func FuzzCheckShell(f *testing.F) {
	f.Add("ls -la | grep foo | sort | head -5", false)
	f.Add("f() { curl x; }; f", true)
	f.Fuzz(func(t *testing.T, script string, deny bool) {
		r := allowRules
		if deny {
			r = denyRules
		}
		got := CheckShell(script, r)
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

package python

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestPolicyJSON pins the contract with runner.py: the field names and that lists are
// never null.
func TestPolicyJSON(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal(DefaultPolicy().JSON(), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"allow_modules", "deny_attributes", "deny_builtins", "deny_modules", "file_access", "mode", "modules", "profile"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if m["allow_modules"] == nil || m["mode"] != "denylist" || m["file_access"] != "any" {
		t.Errorf("policy JSON %v", m)
	}
	osRule := m["modules"].(map[string]any)["os"].(map[string]any)
	if _, ok := osRule["allow"]; ok || !slices.Contains(toStrings(osRule["deny"]), "system") {
		t.Errorf("os rule %v", osRule)
	}

	var zero map[string]any
	if err := json.Unmarshal(Policy{}.JSON(), &zero); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"allow_modules", "deny_modules", "deny_builtins", "deny_attributes"} {
		if _, ok := zero[k].([]any); !ok {
			t.Errorf("%s is %v, want []", k, zero[k])
		}
	}
	if _, ok := zero["modules"].(map[string]any); !ok {
		t.Errorf("modules is %v, want {}", zero["modules"])
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestDefaultPolicyDeniesIssueList keeps the default close to the issue's profile.
func TestDefaultPolicyDeniesIssueList(t *testing.T) {
	p := DefaultPolicy()
	for _, m := range []string{"subprocess", "socket", "ctypes", "_ctypes", "multiprocessing", "pty", "importlib", "_posixsubprocess", "_socket"} {
		if !slices.Contains(p.DenyModules, m) {
			t.Errorf("default does not deny %s", m)
		}
	}
	for _, b := range []string{"eval", "exec", "compile", "__import__", "breakpoint"} {
		if !slices.Contains(p.DenyBuiltins, b) {
			t.Errorf("default does not deny %s", b)
		}
	}
	if len(p.DenyAttributes) != 21 {
		t.Errorf("default denies %d attributes, want the issue's 21", len(p.DenyAttributes))
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Policy{DefaultPolicy(), StrictPolicy()} {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", p.Profile, err)
		}
	}
	for name, change := range map[string]func(*Policy){
		"no profile":        func(p *Policy) { p.Profile = "" },
		"quote in profile":  func(p *Policy) { p.Profile = "a'b" },
		"no mode":           func(p *Policy) { p.Mode = "" },
		"unknown mode":      func(p *Policy) { p.Mode = "maybe" },
		"no file access":    func(p *Policy) { p.FileAccess = "" },
		"bad module":        func(p *Policy) { p.DenyModules = append(p.DenyModules, "os/path") },
		"bad allow module":  func(p *Policy) { p.AllowModules = []string{"numpy."} },
		"bad builtin":       func(p *Policy) { p.DenyBuiltins = []string{"e val"} },
		"bad attribute":     func(p *Policy) { p.DenyAttributes = []string{"a.b"} },
		"rule with both":    func(p *Policy) { p.Modules["os"] = ModuleRule{Allow: []string{"path"}, Deny: []string{"system"}} },
		"rule with neither": func(p *Policy) { p.Modules["os"] = ModuleRule{} },
		"bad rule module":   func(p *Policy) { p.Modules["1os"] = ModuleRule{Deny: []string{"x"}} },
		"bad rule pattern":  func(p *Policy) { p.Modules["os"] = ModuleRule{Deny: []string{"sys tem"}} },
	} {
		p := DefaultPolicy()
		change(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %s", name, p.JSON())
		}
	}
}

func TestSupport(t *testing.T) {
	files := Support(DefaultPolicy(), []byte("pyc"))
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
		if !strings.HasPrefix(f.Path, "/.moat/") || len(f.Data) == 0 {
			t.Errorf("support file %s", f.Path)
		}
	}
	if !reflect.DeepEqual(paths, []string{PolicyPath, CompiledRunnerPath}) {
		t.Errorf("paths with bytecode %v, want the policy and the bytecode only", paths)
	}
	paths = nil
	for _, f := range Support(DefaultPolicy(), nil) {
		paths = append(paths, f.Path)
	}
	if !reflect.DeepEqual(paths, []string{PolicyPath, RunnerPath}) {
		t.Errorf("paths without bytecode %v, want the policy and the source", paths)
	}
	if got := Interpreter(CompiledRunnerPath); !reflect.DeepEqual(got, []string{"/usr/bin/python3", "-u", "-I", "-S", CompiledRunnerPath}) {
		t.Errorf("Interpreter %v", got)
	}
}

func TestCompileRunnerFails(t *testing.T) {
	if _, err := CompileRunner(context.Background(), "/nonexistent/python3"); err == nil {
		t.Error("CompileRunner with no interpreter succeeded")
	}
	requirePython(t)
	if len(env.compiled) < 1000 || env.compiled[2] != '\r' || env.compiled[3] != '\n' {
		t.Errorf("compiled runner is %d bytes without a pyc header", len(env.compiled))
	}
}

package config

import (
	"strings"
	"testing"
	"time"
)

func TestAuditDefaults(t *testing.T) {
	c := Default()
	c.Server.DataDir = "/srv/moat"
	r, err := c.ResolveAudit("")
	if err != nil {
		t.Fatal(err)
	}
	want := ResolvedAudit{Path: "/srv/moat/audit.db", Buffer: DefaultAuditBuffer, CodeMax: DefaultAuditCodeMax}
	if r.Disable != want.Disable || r.Path != want.Path || r.FailOpen || r.Buffer != want.Buffer || r.CodeMax != want.CodeMax || r.Sink != "" || r.MaxAge != 0 || r.MaxRecords != 0 {
		t.Fatalf("defaults = %+v", r)
	}
	if r, _ := c.ResolveAudit("/run/dir"); r.Path != "/run/dir/audit.db" {
		t.Errorf("data dir argument: %s", r.Path)
	}
	if len(c.Warnings()) != 0 {
		t.Errorf("default warns: %v", c.Warnings())
	}
}

func TestAuditSettings(t *testing.T) {
	c := mustParse(t, "audit:\n  dir: /a\n  failure: fail_open\n  buffer: 10\n  code_max: none\n  sink: stdout\n  retention: {max_age: 90d, max_records: 5}\nserver:\n  metrics_public: true\n  listen: 0.0.0.0:7420\n")
	r, err := c.ResolveAudit("/ignored")
	if err != nil {
		t.Fatal(err)
	}
	if r.Path != "/a/audit.db" || !r.FailOpen || r.Buffer != 10 || r.CodeMax != -1 || r.Sink != "stdout" || r.MaxAge != 90*24*time.Hour || r.MaxRecords != 5 {
		t.Fatalf("resolved = %+v", r)
	}
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"audit.failure is fail_open", "server.metrics_public is set"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	c = mustParse(t, "audit: {disable: true}\n")
	if r, err := c.ResolveAudit(""); err != nil || !r.Disable {
		t.Fatalf("disabled: %+v %v", r, err)
	}
	if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "audit.disable") {
		t.Errorf("disabled warnings: %v", w)
	}
}

func TestAuditErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"relative dir", "audit:\n  dir: data\n", `m.yaml:2: audit.dir: "data" is not an absolute path`},
		{"unknown failure", "audit:\n  failure: retry\n", `m.yaml:2: audit.failure: unknown failure mode "retry"`},
		{"buffer zero", "audit:\n  buffer: 0\n", `m.yaml:2: audit.buffer: invalid value 0`},
		{"bad code_max", "audit:\n  code_max: lots\n", `m.yaml:2: audit.code_max: `},
		{"relative sink", "audit:\n  sink: audit.jsonl\n", `m.yaml:2: audit.sink: "audit.jsonl" is neither stdout nor an absolute path`},
		{"bad max_age", "audit:\n  retention:\n    max_age: 3x\n", `m.yaml:3: audit.retention.max_age: invalid duration "3x"`},
		{"negative days", "audit:\n  retention:\n    max_age: -1d\n", `m.yaml:3: audit.retention.max_age: invalid duration "-1d"`},
		{"max_records zero", "audit:\n  retention:\n    max_records: 0\n", `m.yaml:3: audit.retention.max_records: invalid value 0`},
		{"bool as string", "audit:\n  disable: yes please\n", `m.yaml:2: audit.disable: want true or false`},
		{"admin not bool", "server:\n  api_keys:\n    - principal: a\n      key_env: K\n      admin: 1\n", `m.yaml:5: server.api_keys[0].admin: want true or false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := parseErr(t, c.src)
			if !strings.Contains(got, c.want) {
				t.Errorf("error:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

package config

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// FuzzParse checks that Parse never panics, that every error is an *Error whose
// problems are well-formed and point into the file, and that every config it
// accepts is usable: valid, with every profile resolving to valid limits and the
// server section resolving. Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			checkError(t, data, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		for _, name := range c.profileNames() {
			p, err := c.ResolveProfile(name)
			if err != nil {
				t.Fatalf("ResolveProfile(%q): %v", name, err)
			}
			if _, err := p.Limits.Resolve(); err != nil {
				t.Fatalf("profile %q: limits: %v", name, err)
			}
		}
		// Every key variable holds a distinct, well-formed key.
		fuzzEnv := func(name string) (string, bool) { return "fuzz-key-for-variable-" + name, true }
		if _, err := c.ResolveServer(fuzzEnv); err != nil {
			t.Fatalf("ResolveServer: %v", err)
		}
		for _, w := range c.Warnings() {
			if w == "" || strings.ContainsAny(w, "\n") {
				t.Fatalf("malformed warning %q", w)
			}
		}
	})
}

// checkError checks that err lists well-formed problems located in data.
func checkError(t *testing.T, data []byte, err error) {
	t.Helper()
	e, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("error is %T, not *Error: %v", err, err)
	}
	if len(e.Problems) == 0 {
		t.Fatal("*Error without problems")
	}
	lines := 1 // counted as YAML does: CRLF, CR, LF, NEL, LS and PS
	for _, r := range strings.ReplaceAll(string(data), "\r\n", "\n") {
		if isBreak(r) {
			lines++
		}
	}
	for _, p := range e.Problems {
		if p.File != "fuzz.yaml" {
			t.Errorf("problem in file %q: %+v", p.File, p)
		}
		if p.Line < 1 && len(data) <= MaxFileSize || p.Line > lines+1 {
			t.Errorf("problem at line %d of a %d-line file: %+v", p.Line, lines, p)
		}
		msg := p.Msg
		if msg == "" || strings.ContainsAny(msg, "\r\n") || strings.HasSuffix(msg, ".") {
			t.Errorf("malformed message %q", msg)
		}
		if r := []rune(msg)[0]; unicode.IsUpper(r) {
			t.Errorf("message starts with a capital: %q", msg)
		}
		if strings.ContainsAny(p.Path, "\r\n") {
			t.Errorf("path spans lines: %q", p.Path)
		}
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "fuzz.yaml:") {
			t.Errorf("error line without its file: %q", line)
		}
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServeUsageErrors(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "moat.yaml")
	if err := os.WriteFile(cfg, []byte("profile: default\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--port", "1"}, "flag provided but not defined"},
		{"argument", []string{"--config", cfg, "extra"}, `unexpected argument "extra"`},
		{"bad listen", []string{"--config", cfg, "--data-dir", data, "--listen", "nowhere"}, "server.listen"},
		{"bad port", []string{"--config", cfg, "--data-dir", data, "--listen", "127.0.0.1:99999"}, "invalid port"},
		{"relative data dir", []string{"--config", cfg, "--data-dir", "rel/dir"}, "server.data_dir"},
		{"missing config", []string{"--config", filepath.Join(data, "none.yaml")}, "none.yaml"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(append([]string{"serve"}, c.args...), strings.NewReader(""), &bytes.Buffer{}, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("stderr %q, want %q", stderr.String(), c.want)
			}
		})
	}
}

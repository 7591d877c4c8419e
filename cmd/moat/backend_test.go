package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
)

// noDaemon is a Docker daemon address where nothing listens.
const noDaemon = "unix:///nonexistent.sock"

// backendEnv points moat at a config file holding cfg and at fresh data directories,
// and returns the config's path and the data directory (where an audit store would
// appear if anything ran).
func backendEnv(t *testing.T, cfg string) (configPath, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	configPath = filepath.Join(dir, "moat.yaml")
	if err := os.WriteFile(configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir = filepath.Join(dir, "data")
	t.Setenv("XDG_DATA_HOME", dataDir)
	t.Setenv("MOAT_CONFIG", "")
	return configPath, dataDir
}

// assertNothingRan: no audit store was made, so no execution reached the engine.
func assertNothingRan(t *testing.T, dataDir string) {
	t.Helper()
	var found []string
	_ = filepath.Walk(dataDir, func(p string, _ os.FileInfo, err error) error {
		if err == nil && strings.HasPrefix(filepath.Base(p), "audit.db") {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("an audit store was made, so something ran: %v", found)
	}
}

// TestGVisorUnavailable: a gvisor backend that cannot start here (no runsc where the
// config says, a root filesystem that is not there) refuses at once with exit 70 and
// a message that says what is missing; nothing runs.
func TestGVisorUnavailable(t *testing.T) {
	tests := []struct{ name, config, want string }{
		{"no runsc", "backend:\n  gvisor: {runsc: /nonexistent/runsc}\n", "gvisor backend: runsc /nonexistent/runsc is not an executable file"},
		{"no rootfs", "backend:\n  gvisor: {rootfs: /nonexistent-root}\n", "gvisor backend: rootfs /nonexistent-root is not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, data := backendEnv(t, tc.config)
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := run([]string{"run", "--config", cfg, "--backend", "gvisor", "--lang", "python"}, strings.NewReader("print(1)\n"), &stdout, &stderr)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v to refuse, want it at once", took)
			}
			if code != exitInternal || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), exitInternal, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			assertNothingRan(t, data)
		})
	}
}

func TestRunBackendUsageErrors(t *testing.T) {
	tests := []struct{ name, config, flag, want string }{
		{"unknown flag value", "", "bogus", `moat: --backend: unknown backend "bogus" (want native, docker or gvisor)`},
		{"empty-looking value", "", " docker", `unknown backend " docker"`},
		{"relative runsc in the config", "backend:\n  gvisor: {runsc: runsc}\n", "gvisor", `backend.gvisor.runsc: "runsc" is not an absolute path`},
		{"unknown platform in the config", "backend:\n  name: gvisor\n  gvisor: {platform: xen}\n", "", `backend.gvisor.platform: unknown platform "xen"`},
		{"unknown name in the config", "backend:\n  name: lxc\n", "", `backend.name: unknown backend "lxc"`},
		{"bad runtime in the config", "backend:\n  name: docker\n  docker: {runtime: crun}\n", "", `backend.docker.runtime: unknown runtime "crun"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", noDaemon)
			cfg, data := backendEnv(t, tc.config)
			args := []string{"run", "--config", cfg, "--lang", "python"}
			if tc.flag != "" {
				args = append(args, "--backend", tc.flag)
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, strings.NewReader("print(1)\n"), &stdout, &stderr); code != exitUsage {
				t.Fatalf("exit %d, want %d (usage); stderr: %s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			assertNothingRan(t, data)
		})
	}
}

// TestBackendUnavailable: with no daemon where moat looks, docker refuses at once with exit 70 and a message that names the daemon's address and how to start
// one; nothing runs, and moat never falls back to another backend by itself.
func TestBackendUnavailable(t *testing.T) {
	tests := []struct {
		name, config, daemon string
		args                 []string
	}{
		{"run --backend docker", "", noDaemon, []string{"run", "--backend", "docker", "--lang", "python"}},
		{"run --json --backend docker", "", noDaemon, []string{"run", "--json", "--backend", "docker", "--lang", "python"}},
		{"run with the config's docker", "backend:\n  name: docker\n  docker: {host: 'unix:///nonexistent-2.sock'}\n", "unix:///nonexistent-2.sock",
			[]string{"run", "--lang", "python"}},
		{"run: the flag drops the config's fallback", "backend:\n  name: docker\n  fallback: [native]\n", noDaemon,
			[]string{"run", "--backend", "docker", "--lang", "python"}},
		{"mcp --backend docker", "", noDaemon, []string{"mcp", "--backend", "docker"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", noDaemon)
			cfg, data := backendEnv(t, tc.config)
			args := append([]string{tc.args[0], "--config", cfg}, tc.args[1:]...)
			var stdout, stderr bytes.Buffer
			start := time.Now()
			code := run(args, strings.NewReader("print(1)\n"), &stdout, &stderr)
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v to refuse, want it at once", took)
			}
			if code != exitInternal {
				t.Fatalf("exit %d, want %d; stderr: %s", code, exitInternal, stderr.String())
			}
			for _, want := range []string{"cannot reach the Docker daemon at " + tc.daemon, "is dockerd running?", "apt-get install docker.io", "scripts/backends"} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") {
				var r box.Result
				if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Status != box.StatusInternalError || !strings.Contains(r.Error, "cannot reach the Docker daemon") {
					t.Errorf("--json: result %+v (%v), want status internal_error naming the daemon; stdout %q", r, err, stdout.String())
				}
			} else if tc.args[0] == "run" && stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			assertNothingRan(t, data)
		})
	}
}

func TestServeBackendErrors(t *testing.T) {
	t.Setenv("DOCKER_HOST", noDaemon)
	cfg, data := backendEnv(t, "")
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--config", cfg, "--data-dir", data, "--listen", "127.0.0.1:0", "--backend", "bogus"}, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != exitUsage {
		t.Fatalf("bogus: exit %d, want %d; stderr: %s", code, exitUsage, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"serve", "--config", cfg, "--data-dir", data, "--listen", "127.0.0.1:0", "--backend", "docker"}, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != exitInternal {
		t.Fatalf("docker: exit %d, want %d; stderr: %s", code, exitInternal, stderr.String())
	}
	if !strings.Contains(stderr.String(), "cannot reach the Docker daemon at "+noDaemon) || strings.Contains(stderr.String(), "listening on") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	assertNothingRan(t, data)
}

// TestOpenBackendFallback: only a fallback the config spells out is used, with a
// warning; without one the error stands.
func TestOpenBackendFallback(t *testing.T) {
	t.Setenv("DOCKER_HOST", noDaemon)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	rb := config.ResolvedBackend{Name: config.BackendDocker, Image: config.DefaultDockerImage}
	if b, _, err := openBackend(context.Background(), rb, log); err == nil || b != nil {
		t.Fatalf("openBackend without fallback = %v, %v; want the daemon's error", b, err)
	}

	rb.Fallback = []config.ResolvedBackend{{Name: config.BackendGVisor, Runsc: "/nonexistent/runsc", Platform: "ptrace"}, {Name: config.BackendNative}}
	b, closeB, err := openBackend(context.Background(), rb, log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeB()
	if b.Name() != config.BackendNative {
		t.Errorf("backend %q, want the fallback native", b.Name())
	}
	for _, want := range []string{"level=WARN msg=\"backend unavailable: trying the next one of backend.fallback\" backend=docker next=gvisor",
		"next=native", "level=WARN msg=\"backend: native, a fallback of backend.fallback\" configured=docker"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	rb.Fallback = rb.Fallback[:1]
	_, _, err = openBackend(context.Background(), rb, log)
	if err == nil || !strings.Contains(err.Error(), "fallback gvisor: gvisor backend: runsc /nonexistent/runsc is not an executable file") {
		t.Errorf("every backend unavailable: %v", err)
	}
}

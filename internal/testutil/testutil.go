// Package testutil holds helpers shared by tests. The Require* helpers skip a test with
// a reason on a developer machine that lacks something, but fail it in CI (env CI=true):
// CI runs as root with every backend installed, so a skip there hides a regression.
package testutil

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips t with reason outside CI and fails it in CI.
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI: %s", reason)
	}
	t.Skip(reason)
}

// RequireRoot needs euid 0 on Linux.
func RequireRoot(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		SkipOrFail(t, "needs Linux")
	}
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root")
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
	buildOut  []byte
)

// MoatBinary builds ./cmd/moat once per test binary (static, CGO_ENABLED=0) and
// returns its path.
func MoatBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "moat-bin-")
		if err != nil {
			buildErr = err
			return
		}
		// World-searchable, like an installed binary: the box's init is exec'd by fd,
		// but the test must not depend on that by accident either way.
		_ = os.Chmod(dir, 0o755)
		buildPath = filepath.Join(dir, "moat")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/moat")
		cmd.Dir = RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build moat: %v\n%s", buildErr, buildOut)
	}
	return buildPath
}

// RepoRoot returns the module root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// BoxCgroups lists the cgroup directories under /sys/fs/cgroup whose name starts with
// prefix ("box-" for every box of every moat; "box-PID-" for the boxes of one), in
// every hierarchy, nested ones (cgroup v1 memory under a parent's cgroup) included.
func BoxCgroups(prefix string) []string {
	var out []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), prefix) {
			out = append(out, p)
			return filepath.SkipDir
		}
		if strings.Count(p, "/") > 9 {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

package cgroup

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain removes the moat parent directories the kernel tests created
// on the host, when they are empty: they are meant to persist across
// boxes in production, not across test runs. A parent still in use by
// another process is not empty, so rmdir leaves it alone.
func TestMain(m *testing.M) {
	code := m.Run()
	if h := defaultHost; h != nil {
		bases := h.v1Bases()
		if h.version == V2 {
			bases = []string{h.base}
		}
		for _, base := range bases {
			_ = unix.Rmdir(base + "/" + parentName)
		}
	}
	os.Exit(code)
}

package docker

import (
	"os"
	"os/exec"
	"testing"
)

func TestProcessGone(t *testing.T) {
	self := os.Getpid()
	start, err := processStart(self)
	if err != nil || start == 0 {
		t.Fatalf("processStart(self) = %d, %v", start, err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid

	cases := []struct {
		name  string
		pid   int
		start uint64
		gone  bool
	}{
		{"self", self, 0, false},
		{"self with its start time", self, start, false},
		{"self with another start time: a recycled pid", self, start + 1, true},
		{"exited child", dead, 0, true},
		{"init, owned by another user or not: alive", 1, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := processGone(c.pid, c.start); got != c.gone {
				t.Errorf("processGone(%d, %d) = %v, want %v", c.pid, c.start, got, c.gone)
			}
		})
	}
}

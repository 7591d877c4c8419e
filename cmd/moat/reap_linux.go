package main

import (
	"context"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// reapBoxes removes the cgroups of boxes left by an earlier moat that died without
// destroying them (kill -9, a crash), killing what still runs in them. Boxes of live
// moat processes are left alone. How many it removed is logged at level (moat serve
// warns; moat run, whose log is the user's terminal, only says it at info); a failure
// is an error.
func reapBoxes(log *slog.Logger, level slog.Level) {
	n, err := cgroup.Sweep()
	if n > 0 {
		log.Log(context.Background(), level, "reaped boxes left by an earlier run", "boxes", n)
	}
	if err != nil {
		log.Error("reap boxes left by an earlier run", "err", err)
	}
}

// reapBoxesBehind runs reapBoxes in the background, for commands that should not wait
// for it before their first box (moat run, moat mcp); the returned func waits for it
// to end. The sweep never touches a live moat's boxes, ours included.
func reapBoxesBehind(log *slog.Logger, level slog.Level) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		reapBoxes(log, level)
	}()
	return func() { <-done }
}

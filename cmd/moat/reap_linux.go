package main

import (
	"log/slog"

	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// reapBoxes removes the cgroups of boxes left by an earlier moat that died without
// destroying them (kill -9, a crash), killing what still runs in them. Boxes of live
// moat processes are left alone.
func reapBoxes(log *slog.Logger) {
	n, err := cgroup.Sweep()
	if n > 0 {
		log.Warn("reaped boxes left by an earlier run", "boxes", n)
	}
	if err != nil {
		log.Error("reap boxes left by an earlier run", "err", err)
	}
}

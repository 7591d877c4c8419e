//go:build !linux

package main

import "log/slog"

// reapBoxes has nothing to do where there are no cgroups.
func reapBoxes(*slog.Logger) {}

//go:build !linux

package main

import "log/slog"

// reapBoxes has nothing to do where there are no cgroups.
func reapBoxes(*slog.Logger, slog.Level) {}

// reapBoxesBehind has nothing to wait for where there are no cgroups.
func reapBoxesBehind(*slog.Logger, slog.Level) func() { return func() {} }

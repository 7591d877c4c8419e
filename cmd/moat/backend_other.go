//go:build !linux

package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
)

// newDockerBackend: the docker backend runs moat's Linux agent in the box, so it
// needs a Linux host.
func newDockerBackend(context.Context, config.ResolvedBackend, *slog.Logger) (box.Backend, func(), error) {
	return nil, nil, errors.New("the docker backend needs a Linux host (the box's agent is moat itself)")
}

// newGVisorBackend: gVisor runs on Linux only.
func newGVisorBackend(context.Context, config.ResolvedBackend, *slog.Logger) (box.Backend, func(), error) {
	return nil, nil, errors.New("the gvisor backend needs a Linux host")
}

//go:build !linux

package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
)

// newDockerBackend: the docker and gvisor backends run moat's Linux agent in the box,
// so they need a Linux host.
func newDockerBackend(context.Context, config.ResolvedBackend, *slog.Logger) (box.Backend, func(), error) {
	return nil, nil, errors.New("the docker and gvisor backends need a Linux host (the box's agent is moat itself)")
}

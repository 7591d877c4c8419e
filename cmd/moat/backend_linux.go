package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/docker"
	"github.com/moat-sandbox/moat/internal/box/gvisor"
	"github.com/moat-sandbox/moat/internal/config"
)

// newDockerBackend builds a docker backend; it checks the daemon, the image
// and the runtime, and its error says which one is missing and how to get it. The
// returned func closes the backend's connection to the daemon.
func newDockerBackend(ctx context.Context, rb config.ResolvedBackend, log *slog.Logger) (box.Backend, func(), error) {
	b, err := docker.NewBackend(ctx, docker.Options{Host: rb.Host, Image: rb.Image, Images: rb.Images, Runtime: rb.Runtime, Log: log})
	if err != nil {
		return nil, nil, err
	}
	closeB := func() {}
	if c, ok := b.Starter.(io.Closer); ok {
		closeB = func() { _ = c.Close() }
	}
	return b, closeB, nil
}

// newGVisorBackend builds a gvisor backend; it checks root, runsc, the cgroups and the
// root filesystem, and removes what crashed moat processes left. The returned func
// removes what it made for this process.
func newGVisorBackend(ctx context.Context, rb config.ResolvedBackend, log *slog.Logger) (box.Backend, func(), error) {
	b, err := gvisor.NewBackend(ctx, gvisor.Options{Runsc: rb.Runsc, Platform: rb.Platform, Rootfs: rb.Rootfs, Log: log})
	if err != nil {
		return nil, nil, err
	}
	return b.Backend, func() {
		if err := b.Close(); err != nil {
			log.Error("gvisor backend: clean up", "err", err)
		}
	}, nil
}

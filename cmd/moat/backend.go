package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/docker"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/config"
)

// backendFlagUsage is the help of the --backend flag of moat run, serve and mcp.
const backendFlagUsage = "backend: native, docker or gvisor (runsc, as root) (default: backend.name of the config, else native)"

// openTimeout bounds opening a backend: connecting to the daemon, sweeping and
// checking the image and runtime. docker.Connect bounds its own ping.
const openTimeout = 30 * time.Second

// openBackend opens the backend rb names, so that moat refuses to start (rather than
// fail each run) when it cannot make boxes; the error says what is missing and how to
// get it, and is moat's failure (exit 70), not a usage error. When the backend cannot
// start, the fallbacks the config spells out are tried in order, each one logged as a
// warning; there is no other fallback.
//
// For docker, openBackend first removes the containers an earlier moat that crashed
// left behind (docker.Engine.Sweep) and logs how many; gvisor.NewBackend does the
// same for its sandboxes.
//
// The caller must call the returned func once the engine is closed (it is never nil).
func openBackend(ctx context.Context, rb config.ResolvedBackend, log *slog.Logger) (box.Backend, func(), error) {
	b, closeB, err := openOne(ctx, rb, log)
	if err == nil {
		log.Info("backend: " + rb.String())
		return b, closeB, nil
	}
	errs := []error{err}
	for _, fb := range rb.Fallback {
		log.Warn("backend unavailable: trying the next one of backend.fallback", "backend", rb.Name, "next", fb.Name, "err", err)
		b, closeB, err = openOne(ctx, fb, log)
		if err == nil {
			log.Warn("backend: "+fb.String()+", a fallback of backend.fallback", "configured", rb.Name)
			return b, closeB, nil
		}
		errs = append(errs, fmt.Errorf("fallback %s: %w", fb.Name, err))
	}
	return nil, func() {}, errors.Join(errs...)
}

// openOne opens one backend, without fallback.
func openOne(ctx context.Context, rb config.ResolvedBackend, log *slog.Logger) (box.Backend, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	switch rb.Name {
	case config.BackendNative:
		b := &native.Backend{Log: log}
		return b, func() { _ = b.Close() }, nil
	case config.BackendGVisor:
		return newGVisorBackend(ctx, rb, log)
	}
	if err := sweepContainers(ctx, rb.Host, log); err != nil {
		return nil, nil, backendError(rb, err)
	}
	b, closeB, err := newDockerBackend(ctx, rb, log)
	if err != nil {
		return nil, nil, backendError(rb, err)
	}
	return b, closeB, nil
}

// backendError puts "docker backend:" in front of err, unless err says so already.
func backendError(rb config.ResolvedBackend, err error) error {
	if strings.HasPrefix(err.Error(), "docker backend:") {
		return err
	}
	return fmt.Errorf("docker backend: %w", err)
}

// sweepContainers connects to the daemon at host and removes the containers that an
// earlier moat on this host left when it died (kill -9, a crash, a reboot of moat but
// not of dockerd). A daemon that does not answer is an error (it says where moat
// looked and how to start one); a container that cannot be removed is only logged.
func sweepContainers(ctx context.Context, host string, log *slog.Logger) error {
	e, err := docker.Connect(ctx, host)
	if err != nil {
		return err
	}
	defer e.Close()
	n, err := e.Sweep(ctx)
	if n > 0 {
		log.Warn("removed containers left by an earlier moat", "containers", n, "daemon", e.Host())
	}
	if err != nil {
		log.Error("remove containers left by an earlier moat", "err", err)
	}
	return nil
}

package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container"
	"github.com/moat-sandbox/moat/internal/box/native"
)

// Options configures NewBackend.
type Options struct {
	// Host is the daemon's address; "" is DOCKER_HOST, else the default socket.
	Host string
	// Image is the image boxes are made from, e.g. "moat-test-python:bookworm"
	// (scripts/backends builds it). Required.
	Image string
	// Images, by language (python, bash), replace Image for that language's boxes.
	Images map[string]string
	// Runtime is the daemon's OCI runtime: "" for its default (runc), "runsc" for
	// gVisor.
	Runtime string
	// Log receives operational messages; nil is slog.Default().
	Log *slog.Logger
}

// NewBackend connects to the daemon, checks that it has the images and the runtime,
// and returns a backend whose boxes are containers: the native backend's init, with
// its sessions, files and result contract, started by a Starter. The backend is
// named "docker", whatever its runtime. It uses this binary as the box's
// agent, so the binary must be static (CGO_ENABLED=0). Every error says what is
// missing and how to get it.
func NewBackend(ctx context.Context, o Options) (*native.Backend, error) {
	if o.Image == "" {
		return nil, errors.New("docker backend: no image configured: set the backend's image (e.g. moat-test-python:bookworm, which scripts/backends builds)")
	}
	e, err := Connect(ctx, o.Host)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*native.Backend, error) {
		e.Close()
		return nil, err
	}
	rt := &Runtime{Engine: e, Image: o.Image, Images: o.Images, OCIRuntime: o.Runtime}
	checked := map[string]bool{}
	for _, lang := range slices.Sorted(maps.Keys(box.Languages)) {
		img := rt.ImageFor(lang)
		if checked[img] {
			continue
		}
		checked[img] = true
		if err := e.ImageExists(ctx, img); err != nil {
			if o.Images[lang] != "" {
				return fail(fmt.Errorf("docker backend: %s's image: %w", lang, err))
			}
			return fail(fmt.Errorf("docker backend: %w", err))
		}
	}
	if o.Runtime != "" {
		rts, err := e.Runtimes(ctx)
		if err != nil {
			return fail(fmt.Errorf("docker backend: %w", err))
		}
		if !slices.Contains(rts, o.Runtime) {
			return fail(fmt.Errorf("docker backend: runtime %s is not registered with dockerd (it has %v): see scripts/backends", o.Runtime, rts))
		}
	}
	agent, err := os.Executable()
	if err != nil {
		return fail(fmt.Errorf("docker backend: find moat's own binary: %w", err))
	}
	if p, err := filepath.EvalSymlinks(agent); err == nil {
		agent = p
	}
	rt.AgentPath = agent
	rt.oom = e.watchOOM()
	return &native.Backend{
		Starter: &container.Starter{Runtime: rt, Log: o.Log},
		Label:   "docker",
		Log:     o.Log,
	}, nil
}

//go:build !linux

package gvisor

import (
	"context"
	"errors"
)

// Options configures the gvisor backend; see the Linux build.
type Options struct {
	Runsc, Platform, Rootfs, StateDir string
}

// Probe: gVisor runs on Linux only.
func Probe(context.Context, Options) (runsc, version string, err error) {
	return "", "", errors.New("gvisor backend: gVisor runs on Linux only")
}

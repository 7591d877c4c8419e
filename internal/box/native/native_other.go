//go:build !linux

package native

import (
	"context"
	"errors"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/box"
)

// Backend is the native backend; it exists only on Linux.
type Backend struct{ Log *slog.Logger }

// ErrUnsupported is returned on every OS but Linux.
var ErrUnsupported = errors.New("the native backend needs Linux (namespaces, seccomp, cgroups)")

// Name implements box.Backend.
func (*Backend) Name() string { return "native" }

// Close does nothing off Linux.
func (*Backend) Close() error { return nil }

// Run implements box.Backend.
func (*Backend) Run(context.Context, *box.Spec) (*box.Result, error) { return nil, ErrUnsupported }

// Check is one line of `moat doctor`.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Probe reports that nothing is available off Linux.
func Probe() []Check {
	return []Check{{Name: "native backend", OK: false, Detail: ErrUnsupported.Error()}}
}

// Enforced says what moat run enforces: nothing off Linux.
func Enforced([]Check) []string { return []string{"nothing: " + ErrUnsupported.Error()} }

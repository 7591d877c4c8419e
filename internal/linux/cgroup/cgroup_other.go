//go:build !linux

package cgroup

import (
	"fmt"
	"time"
)

// Detect reports None: cgroups exist only on Linux.
func Detect() Info {
	return Info{Reason: "cgroups exist only on linux"}
}

// Box is never created outside Linux.
type Box struct{}

// New validates its arguments like the Linux version and then returns
// an error wrapping ErrUnavailable.
func New(name string, lim Limits) (*Box, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := lim.validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: cgroups exist only on linux", ErrUnavailable)
}

// Version returns None.
func (b *Box) Version() Version { return None }

// Controllers returns nil.
func (b *Box) Controllers() []string { return nil }

// AddProc returns ErrUnavailable.
func (b *Box) AddProc(pid int) error { return ErrUnavailable }

// EnterThread returns ErrUnavailable.
func (b *Box) EnterThread() (func() error, error) { return nil, ErrUnavailable }

// TaskFDs returns ErrUnavailable.
func (b *Box) TaskFDs() ([]int, error) { return nil, ErrUnavailable }

// FD returns false.
func (b *Box) FD() (int, bool) { return -1, false }

// Stats returns ErrUnavailable.
func (b *Box) Stats() (Stats, error) { return Stats{}, ErrUnavailable }

// Kill returns ErrUnavailable.
func (b *Box) Kill() error { return ErrUnavailable }

// KillExcept returns ErrUnavailable.
func (b *Box) KillExcept(pid int) error { return ErrUnavailable }

// Destroy returns nil: there is nothing to remove.
func (b *Box) Destroy() error { return nil }

// Recycle returns nil: there is nothing to keep.
func (b *Box) Recycle() error { return nil }

// DestroySpares returns nil: none are kept.
func DestroySpares() error { return nil }

// Sweep returns an error wrapping ErrUnavailable.
func Sweep() (int, error) {
	return 0, fmt.Errorf("%w: cgroups exist only on linux", ErrUnavailable)
}

// Dirs returns nothing off Linux.
func (b *Box) Dirs() []string { return nil }

// Remove does nothing: there are no cgroups outside Linux.
func Remove(name string) error { return nil }

// OwnerGone reports false: there are no boxes outside Linux.
func OwnerGone(name string) bool { return false }

// OwnCPU reports nothing off Linux.
func OwnCPU() (time.Duration, bool) { return 0, false }

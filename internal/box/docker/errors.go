package docker

import "errors"

var (
	// ErrDaemonUnreachable is wrapped by every error that means no Docker daemon
	// answered: not installed, not running, wrong socket, or no permission on it.
	ErrDaemonUnreachable = errors.New("docker daemon unreachable")

	// ErrImageNotFound is wrapped by ImageExists when the daemon does not have the image.
	ErrImageNotFound = errors.New("image not found")
)

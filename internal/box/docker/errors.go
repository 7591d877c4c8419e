package docker

import "errors"

var (
	// ErrDaemonUnreachable is wrapped by every error that means no Docker daemon
	// answered: not installed, not running, wrong socket, or no permission on it.
	ErrDaemonUnreachable = errors.New("docker daemon unreachable")

	// ErrImageNotFound is wrapped by ImageExists when the daemon does not have the image.
	ErrImageNotFound = errors.New("image not found")

	// errProtocol is wrapped by every violation of the box stream's protocol
	// (mux.go): it ends the box.
	errProtocol = errors.New("box stream protocol error")

	// errHostGone: the agent read the end of its stdin, the host's side of the
	// stream.
	errHostGone = errors.New("the host closed the stream")
)

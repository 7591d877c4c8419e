//go:build !linux || !(amd64 || arm64)

package seccomp

import (
	"fmt"
	"runtime"
)

// Install always fails on this platform: the box's policy exists only for
// linux/amd64 and linux/arm64.
func Install() error {
	return fmt.Errorf("install seccomp filter: %w", unsupportedPlatform())
}

// Supported reports that seccomp filter mode is unavailable on this platform.
func Supported() error {
	return unsupportedPlatform()
}

// DeniedSyscalls returns nil: no policy exists for this platform.
func DeniedSyscalls() []string {
	return nil
}

func unsupportedPlatform() error {
	return fmt.Errorf("%w on %s/%s", ErrNotSupported, runtime.GOOS, runtime.GOARCH)
}

// Encoded reports that no filter exists on this platform.
func Encoded() ([]byte, error) { return nil, unsupportedPlatform() }

// InstallEncoded reports that no filter exists on this platform.
func InstallEncoded([]byte) error { return unsupportedPlatform() }

//go:build !linux

package landlock

// ABI returns 0: Landlock exists only on Linux.
func ABI() int { return 0 }

// Restrict validates rw and devRW like the Linux version and then, in
// best-effort mode, restricts nothing and returns ABI 0. Callers that
// require confinement must treat abi == 0 as "not sandboxed".
func Restrict(rw, devRW []string, connect ...uint16) (abi int, err error) {
	if err := checkPaths(rw, devRW); err != nil {
		return 0, err
	}
	return 0, nil
}

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

// Ruleset returns fd -1 and ABI 0: there is no Landlock ruleset to build.
// It does not check the paths, which only Linux's openat2(2) can resolve
// beneath root.
func Ruleset(root int, rw, devRW []string, connect ...uint16) (fd int, abi int, err error) {
	return -1, 0, nil
}

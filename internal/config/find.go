package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// EnvConfig names the environment variable that points at the config file when
// --config is not given.
const EnvConfig = "MOAT_CONFIG"

// SearchPath lists, in order, where moat looks for its config when --config is not
// given:
//
//  1. $MOAT_CONFIG, if set (it must then exist);
//  2. ./moat.yaml, in the working directory;
//  3. $XDG_CONFIG_HOME/moat/config.yaml, or ~/.config/moat/config.yaml when
//     XDG_CONFIG_HOME is unset or not absolute;
//  4. /etc/moat/config.yaml.
func SearchPath() []string {
	var list []string
	if p := os.Getenv(EnvConfig); p != "" {
		list = append(list, p)
	}
	list = append(list, "moat.yaml")
	if dir := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		list = append(list, filepath.Join(dir, "moat", "config.yaml"))
	} else if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		list = append(list, filepath.Join(home, ".config", "moat", "config.yaml"))
	}
	return append(list, "/etc/moat/config.yaml")
}

// Find returns the first file of SearchPath that exists, or "" when none does (the
// caller then uses Default); a candidate this user may not even stat is skipped. It is an error if $MOAT_CONFIG is set and missing, if
// a file found is not a regular file or cannot be inspected, and if a file found
// by searching (not named by $MOAT_CONFIG) is world-writable or owned by
// someone other than the current user or root: whoever could write it could
// weaken the sandbox.
func Find() (string, error) {
	if p := os.Getenv(EnvConfig); p != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("$%s: %w", EnvConfig, err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("$%s: %s is not a regular file", EnvConfig, p)
		}
		return p, nil
	}
	for _, p := range SearchPath() {
		fi, err := os.Stat(p)
		// A candidate in a directory this user may not search (another user's HOME,
		// inherited through sudo or setpriv) is not a config this user has: skip it.
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("config: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("config %s is not a regular file", p)
		}
		if fi.Mode().Perm()&0o002 != 0 {
			return "", fmt.Errorf("config %s is writable by every user (run chmod o-w %s, or pass --config)", p, p)
		}
		if err := checkOwner(p, fi); err != nil {
			return "", err
		}
		return p, nil
	}
	return "", nil
}

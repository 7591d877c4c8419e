package gate

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/internal/config"
)

const (
	// TokenFile is the name of the generated token's file in the data directory.
	TokenFile = "token"
	// EnvToken names the environment variable from which clients take the token
	// before they look for the token file.
	EnvToken = "MOAT_TOKEN"
	// TokenPrefix starts every generated token, so that secret scanners and
	// people can tell what it is.
	TokenPrefix = "moat_"

	maxTokenFile = 4096
)

// ReadToken returns the token a client sends: $MOAT_TOKEN (read with getenv, or
// os.Getenv when nil) if set, else the content of dataDir/token, which must
// pass the same checks as for the server (see the package doc). The error says
// how to proceed when there is neither.
func ReadToken(dataDir string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if t := strings.TrimSpace(getenv(EnvToken)); t != "" {
		if !validToken(t) {
			return "", fmt.Errorf("$%s holds spaces or characters other than printable ascii", EnvToken)
		}
		return t, nil
	}
	path := filepath.Join(dataDir, TokenFile)
	t, err := readTokenFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no API token: set $%s, or start moat serve, which writes one to %s: %w", EnvToken, path, err)
	}
	if errors.Is(err, fs.ErrPermission) {
		return "", fmt.Errorf("API token: %w (set $%s, or run as the user that runs moat serve)", err, EnvToken)
	}
	return t, err
}

// loadOrCreateToken returns the token in dir/token, generating it first if the
// file does not exist. dir is created with mode 0700 if missing, and must not be
// writable by others.
func loadOrCreateToken(dir string) (token, path string, generated bool, err error) {
	if err := ensureDir(dir); err != nil {
		return "", "", false, err
	}
	path = filepath.Join(dir, TokenFile)
	token, err = readTokenFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return token, path, false, err
	}
	token, err = createToken(dir, path)
	if errors.Is(err, fs.ErrExist) { // another moat created it meanwhile
		token, err = readTokenFile(path)
		return token, path, false, err
	}
	return token, path, err == nil, err
}

// ensureDir creates the data directory, or checks the one that exists: whoever
// can write to it can replace the token file.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("data directory %s is not a directory", dir)
	}
	return checkDir(dir, fi)
}

// newToken returns a fresh token: TokenPrefix and 32 random bytes in base64url.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// createToken writes a new token to path, which must not exist. The token is
// written to a temporary file of mode 0600 in dir and linked to path: path
// appears complete or not at all, and if another process created it first, the
// link fails with fs.ErrExist instead of replacing the token that process uses.
func createToken(dir, path string) (string, error) {
	token := newToken()
	tmp, err := os.CreateTemp(dir, ".token-*") // mode 0600
	if err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.WriteString(tmp, token+"\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	if d, err := os.Open(dir); err == nil { // make the new name durable
		_ = d.Sync()
		_ = d.Close()
	}
	return token, nil
}

// readTokenFile reads a token file, refusing a symbolic link, a file that is
// not regular, readable or writable by group or others, or owned by another
// user, and content that is not a token.
func readTokenFile(path string) (string, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if err := checkPrivate(path, fi); err != nil {
		return "", err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if len(data) > maxTokenFile || !validToken(token) || len(token) < config.MinKeyLength {
		return "", fmt.Errorf("token file %s does not hold a token (%d to %d printable characters without spaces); delete it to generate a new one", path, config.MinKeyLength, maxTokenFile)
	}
	return token, nil
}

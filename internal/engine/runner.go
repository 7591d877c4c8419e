package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/policy/python"
)

// hostPython is the interpreter boxes run; the native backend binds the host's /usr.
const hostPython = "/usr/bin/python3"

var (
	compiledOnce sync.Once
	compiledPyc  []byte
)

// compiledRunner returns the Python runner as bytecode for the host's interpreter, or
// nil when it cannot be had (the box then runs the source, about 12 ms slower).
// Compiling costs a Python start-up, so the result is kept for the process and in a
// private cache file keyed by the runner's hash and the interpreter's identity.
func compiledRunner(log *slog.Logger) []byte {
	compiledOnce.Do(func() {
		key, err := runnerKey()
		if err != nil {
			log.Debug("python runner: no cache key", "err", err)
			return
		}
		dir := cacheDir()
		file := filepath.Join(dir, "runner-"+key+".pyc")
		if b, err := os.ReadFile(file); err == nil && len(b) > 16 {
			compiledPyc = b
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, err := python.CompileRunner(ctx, hostPython)
		if err != nil {
			log.Warn("python runner: compile failed, running the source", "err", err)
			return
		}
		compiledPyc = b
		if err := os.MkdirAll(dir, 0o700); err == nil {
			tmp, err := os.CreateTemp(dir, "runner-*.tmp")
			if err == nil {
				_, werr := tmp.Write(b)
				cerr := tmp.Close()
				if werr == nil && cerr == nil && os.Rename(tmp.Name(), file) == nil {
					pruneRunners(dir, file)
				} else {
					_ = os.Remove(tmp.Name())
				}
			}
		}
	})
	return compiledPyc
}

// runnerKey identifies a compiled runner: the runner's source and the interpreter
// binary (path, size and modification time), so an upgraded Python gets a fresh one.
func runnerKey() (string, error) {
	exe, err := filepath.EvalSymlinks(hostPython)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(python.Runner)
	fmt.Fprintf(h, "\x00%s\x00%d\x00%d", exe, fi.Size(), fi.ModTime().UnixNano())
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// cacheDir is moat's private cache: $XDG_CACHE_HOME/moat or ~/.cache/moat (created
// 0700), falling back to a per-user directory under the temp dir.
func cacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "moat")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("moat-cache-%d", os.Getuid()))
}

// CompiledRunner returns the compiled Python runner the engine's boxes start, or nil
// when only the source is available; for benchmarks.
func (e *Engine) CompiledRunner() []byte { return compiledRunner(e.log) }

// pruneRunners removes the compiled runners of other runner versions or interpreters
// from the cache directory: one is kept, the current one.
func pruneRunners(dir, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, "runner-*.pyc"))
	for _, f := range old {
		if f != keep {
			_ = os.Remove(f)
		}
	}
}

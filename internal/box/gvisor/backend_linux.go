package gvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/internal/box/container"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// DefaultStateDir is where moat keeps runsc's state and the bundles: under /run, so a
// reboot (which ends every sandbox) clears it.
const DefaultStateDir = "/run/moat/gvisor"

// DefaultPlatform is runsc's platform when none is configured: ptrace works on every
// host, in VMs without nested virtualisation too.
const DefaultPlatform = "ptrace"

// Options configures NewBackend.
type Options struct {
	// Runsc is runsc's path; "" looks it up in PATH (and /usr/sbin, /usr/bin).
	Runsc string
	// Platform is runsc's --platform; "" is DefaultPlatform.
	Platform string
	// Rootfs is a directory holding the boxes' root filesystem (an image unpacked,
	// e.g. by debootstrap): it needs python3 and bash. "" shows boxes the host's own
	// runtime trees read-only, as the native backend does.
	Rootfs string
	// StateDir is "" for DefaultStateDir.
	StateDir string
	// Log receives operational messages; nil is slog.Default().
	Log *slog.Logger
}

// Backend is the gvisor backend's handle: the box backend, and what to close.
type Backend struct {
	*native.Backend
	runtime *Runtime
	// ownRoot is the skeleton root this process made ("" with Options.Rootfs).
	ownRoot string
}

// Close removes what NewBackend made for this process. Boxes must be gone.
func (b *Backend) Close() error {
	if b.ownRoot != "" {
		return os.RemoveAll(b.ownRoot)
	}
	return nil
}

// NewBackend checks that this host can run gVisor sandboxes (root, runsc, cgroups,
// the root filesystem), removes the leftovers of crashed earlier moat processes
// (Sweep), and returns a backend whose boxes are gVisor sandboxes running the native
// backend's init under the agent of package box/container. Every error says what is
// missing and how to get it.
func NewBackend(ctx context.Context, o Options) (*Backend, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	runsc, _, info, err := probe(ctx, o)
	if err != nil {
		return nil, err
	}
	agent, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("gvisor backend: find moat's own binary: %w", err)
	}
	if p, err := filepath.EvalSymlinks(agent); err == nil {
		agent = p
	}
	r := &Runtime{
		Runsc:       runsc,
		Platform:    o.Platform,
		StateDir:    o.StateDir,
		AgentPath:   agent,
		controllers: info.Controllers,
	}
	if r.Platform == "" {
		r.Platform = DefaultPlatform
	}
	if r.StateDir == "" {
		r.StateDir = DefaultStateDir
	}
	for _, d := range []string{r.StateDir, r.runscRoot(), r.bundlesDir(), r.rootsDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("gvisor backend: make its state directory: %w", err)
		}
	}
	if n, err := r.Sweep(); n > 0 || err != nil {
		log.Warn("removed gvisor sandboxes left by an earlier moat", "sandboxes", n, "err", err)
	}
	b := &Backend{runtime: r}
	if o.Rootfs != "" {
		r.Rootfs = o.Rootfs
	} else {
		b.ownRoot = filepath.Join(r.rootsDir(), native.BoxName())
		binds, err := makeHostRoot(b.ownRoot)
		if err != nil {
			_ = os.RemoveAll(b.ownRoot)
			return nil, fmt.Errorf("gvisor backend: make the boxes' root: %w", err)
		}
		r.Rootfs, r.Binds = b.ownRoot, binds
	}
	b.Backend = &native.Backend{
		Starter: &container.Starter{Runtime: r, Log: log},
		Label:   "gvisor",
		Log:     log,
	}
	return b, nil
}

// Probe checks, changing nothing, what NewBackend needs: root, runsc (it returns its
// path and version), the cgroup controllers, the configured root filesystem. moat
// doctor reports it.
func Probe(ctx context.Context, o Options) (runsc, version string, err error) {
	runsc, version, _, err = probe(ctx, o)
	return runsc, version, err
}

func probe(ctx context.Context, o Options) (runsc, version string, info cgroup.Info, err error) {
	if os.Geteuid() != 0 {
		return "", "", info, errors.New("gvisor backend: needs root (runsc makes the sandbox's namespaces, moat its cgroup): run moat as root, or use backend docker with runtime runsc")
	}
	if runsc, err = FindRunsc(o.Runsc); err != nil {
		return "", "", info, err
	}
	if version, err = Version(ctx, runsc); err != nil {
		return "", "", info, err
	}
	info = cgroup.Detect()
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(info.Controllers, c) {
			return "", "", info, fmt.Errorf("gvisor backend: needs the cgroup controllers memory and pids to bound a sandbox, and this host has %v (%s)", info.Controllers, info.Reason)
		}
	}
	if o.Rootfs != "" {
		if err := checkRootfs(o.Rootfs); err != nil {
			return "", "", info, err
		}
	}
	return runsc, version, info, nil
}

func (r *Runtime) rootsDir() string { return filepath.Join(r.StateDir, "roots") }

// FindRunsc returns runsc's path: path itself when not empty, else runsc from PATH,
// /usr/sbin or /usr/bin. The error says how to install it.
func FindRunsc(path string) (string, error) {
	if path != "" {
		if !filepath.IsAbs(path) {
			return "", fmt.Errorf("gvisor backend: runsc path %q is not absolute", path)
		}
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("gvisor backend: runsc %s is not an executable file", path)
		}
		return path, nil
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/runsc", "/usr/bin/runsc", "/usr/local/bin/runsc"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("gvisor backend: runsc not found (looked in PATH, /usr/sbin, /usr/bin, /usr/local/bin): on Debian or Ubuntu `apt-get install runsc`, else see https://gvisor.dev/docs/user_guide/install/")
}

// Version runs runsc --version and returns its first line, e.g.
// "runsc version 0.0~20221219.0".
func Version(ctx context.Context, runsc string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, runsc, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("gvisor backend: %s --version: %w (%s)", runsc, err, strings.TrimSpace(string(out)))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// checkRootfs checks a configured root filesystem: a directory with bash and python3
// where boxes look for them.
func checkRootfs(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("gvisor backend: rootfs %q is not absolute", dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("gvisor backend: rootfs %s is not a directory (make one with debootstrap: see the README)", dir)
	}
	for _, want := range []string{"usr/bin/python3", "bin/bash"} {
		if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
			return fmt.Errorf("gvisor backend: rootfs %s has no /%s", dir, want)
		}
	}
	return nil
}

// makeHostRoot makes the skeleton root of boxes that see the host's runtime trees:
// the host's symlinks among them (merged /usr) recreated, moat's /etc files written,
// and everything else bound read-only (the returned binds), the same view of the host
// as a native box has. gVisor makes the mount points in its own view.
func makeHostRoot(dir string) ([]Mount, error) {
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	var binds []Mount
	expose := func(host, inRoot string) error {
		fi, err := os.Lstat(host)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(host)
			if err != nil {
				return err
			}
			return os.Symlink(target, filepath.Join(dir, inRoot))
		}
		binds = append(binds, Mount{Source: host, Destination: inRoot})
		return nil
	}
	for _, t := range native.HostTrees() {
		if err := expose(t, t); err != nil {
			return nil, err
		}
	}
	for name, content := range native.BoxEtc(false) {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	for _, name := range native.HostEtc() {
		if err := expose("/etc/"+name, "/etc/"+name); err != nil {
			return nil, err
		}
	}
	return binds, nil
}

// Sweep removes what crashed earlier moat processes left: for each of their bundles,
// the sandbox's cgroup with whatever still runs there (runsc, the Sentry, the gofer),
// runsc's state of it and the bundle; and their skeleton roots. Those of live moat
// processes are left alone, and so are other boxes' cgroups (moat serve sweeps those).
// It returns how many sandboxes it removed.
func (r *Runtime) Sweep() (int, error) {
	var errs []error
	n := 0
	for _, dir := range []string{r.bundlesDir(), r.rootsDir()} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if !cgroup.OwnerGone(e.Name()) {
				continue
			}
			if dir == r.bundlesDir() {
				if err := cgroup.Remove(e.Name()); err != nil {
					errs = append(errs, err)
					continue // its processes may live: keep the bundle for the next sweep
				}
				deleteSandbox(r.Runsc, r.runscRoot(), e.Name())
				n++
			}
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

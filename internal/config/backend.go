package config

import (
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/internal/box"
)

// Backends (Backend.Name): what makes boxes.
const (
	// BackendNative makes boxes from namespaces, cgroups, Landlock and seccomp of this
	// host (package box/native).
	BackendNative = "native"
	// BackendDocker makes each box a container through the Docker Engine API, with
	// the hardened flag set of package box/docker.
	BackendDocker = "docker"
	// BackendGVisor makes each box a gVisor sandbox by running runsc directly, with
	// no Docker (package box/gvisor): the box runs on gVisor's kernel.
	BackendGVisor = "gvisor"
)

// Docker runtimes (DockerBackend.Runtime): the OCI runtimes moat is tested with.
const (
	RuntimeRunc  = "runc"
	RuntimeRunsc = "runsc"
)

// DefaultDockerImage is the image of docker boxes when backend.docker.image is unset: the one scripts/backends builds with debootstrap.
const DefaultDockerImage = "moat-test-python:bookworm"

// BackendNames lists the backends, in the order of the docs.
var BackendNames = []string{BackendNative, BackendDocker, BackendGVisor}

// GVisorPlatforms are the runsc platforms backend.gvisor.platform may name: ptrace
// (the default, works everywhere), systrap (newer runsc) and kvm (needs /dev/kvm).
var GVisorPlatforms = []string{"ptrace", "systrap", "kvm"}

var imageRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$`) })

// Backend chooses what makes boxes. The zero value is the native backend. The
// --backend flag of moat run, moat serve and moat mcp replaces Name (and then no
// fallback applies).
type Backend struct {
	// Name is native (the default when empty), docker or gvisor. A backend that is not available makes moat refuse to start,
	// with what is missing and how to get it; it never falls back silently.
	Name string `yaml:"name"`
	// Docker configures the docker backend.
	Docker DockerBackend `yaml:"docker"`
	// GVisor configures the gvisor backend.
	GVisor GVisorBackend `yaml:"gvisor"`
	// Fallback lists backends tried in order when Name cannot start (no daemon, no
	// image, no runtime), each logged as a warning. Empty (the default) means none:
	// moat refuses to start. Each result's isolation says what made its box. Not
	// applied when --backend names the backend. A warning when set.
	Fallback []string `yaml:"fallback"`
}

// DockerBackend configures the docker backend.
type DockerBackend struct {
	// Host is the Docker daemon's address: unix:///path or tcp://host:port. Empty
	// means $DOCKER_HOST, else unix:///var/run/docker.sock.
	Host string `yaml:"host"`
	// Image is the image every box runs in, for Python and bash alike: it needs
	// /usr/bin/python3 and /bin/bash. DefaultDockerImage when empty.
	Image string `yaml:"image"`
	// Images, by language (python, bash), replace Image for that language's boxes:
	// a Python image needs /usr/bin/python3, a bash one /bin/bash.
	Images map[string]string `yaml:"images"`
	// Runtime is the daemon's OCI runtime: runc (the daemon's default, also when
	// empty) or runsc (gVisor, registered with the daemon).
	Runtime string `yaml:"runtime"`
}

// GVisorBackend configures the gvisor backend: runsc run directly, as root.
type GVisorBackend struct {
	// Runsc is runsc's absolute path; empty looks it up in PATH.
	Runsc string `yaml:"runsc"`
	// Platform is runsc's --platform: ptrace (the default), systrap or kvm.
	Platform string `yaml:"platform"`
	// Rootfs is an absolute directory holding the boxes' root filesystem (an image
	// unpacked, e.g. by debootstrap; it needs python3 and bash). Empty shows boxes
	// the host's runtime trees read-only, as native boxes see them.
	Rootfs string `yaml:"rootfs"`
}

// ResolvedBackend is the backend to open, with its defaults applied.
type ResolvedBackend struct {
	// Name is BackendNative, BackendDocker or BackendGVisor.
	Name string
	// Host, Image, Images and Runtime configure a docker backend: Image is never
	// empty, Images (by language) may be, Runtime is "" (the daemon's default) or
	// "runsc".
	Host, Image, Runtime string
	Images               map[string]string
	// Runsc, Platform and Rootfs configure a gvisor backend: Platform is never
	// empty; Runsc and Rootfs may be (look runsc up; the host's trees).
	Runsc, Platform, Rootfs string
	// Fallback are the backends to try, in order, when this one cannot start.
	Fallback []ResolvedBackend
}

// ResolveBackend returns the backend to open: flagName when it is not empty (with no
// fallback), else backend.name (with backend.fallback). An unknown flagName is an
// error naming the backends.
func (c *Config) ResolveBackend(flagName string) (ResolvedBackend, error) {
	ps := &problems{file: c.file, lines: c.lines}
	c.checkBackend(ps)
	if err := ps.err(); err != nil {
		return ResolvedBackend{}, err
	}
	if flagName != "" {
		if !slices.Contains(BackendNames, flagName) {
			return ResolvedBackend{}, fmt.Errorf("unknown backend %q (want %s)", flagName, orList(BackendNames))
		}
		return c.resolveBackend(flagName), nil
	}
	name := c.Backend.Name
	if name == "" {
		name = BackendNative
	}
	r := c.resolveBackend(name)
	for _, fb := range c.Backend.Fallback {
		r.Fallback = append(r.Fallback, c.resolveBackend(fb))
	}
	return r, nil
}

// resolveBackend resolves one valid backend name, without fallback.
func (c *Config) resolveBackend(name string) ResolvedBackend {
	r := ResolvedBackend{Name: name}
	switch name {
	case BackendNative:
		return r
	case BackendGVisor:
		g := c.Backend.GVisor
		r.Runsc, r.Platform, r.Rootfs = g.Runsc, g.Platform, g.Rootfs
		if r.Platform == "" {
			r.Platform = GVisorPlatforms[0]
		}
		return r
	}
	d := c.Backend.Docker
	r.Host, r.Image, r.Runtime = d.Host, d.Image, d.Runtime
	if len(d.Images) > 0 {
		r.Images = maps.Clone(d.Images)
	}
	if r.Image == "" {
		r.Image = DefaultDockerImage
	}
	if r.Runtime == RuntimeRunc {
		r.Runtime = "" // the daemon's default
	}
	return r
}

// String describes r for logs and moat doctor: "docker (image I, runtime R, host H)",
// "gvisor (runsc R, platform P, root F)".
func (r ResolvedBackend) String() string {
	switch r.Name {
	case BackendNative:
		return r.Name
	case BackendGVisor:
		runsc, root := r.Runsc, r.Rootfs
		if runsc == "" {
			runsc = "from PATH"
		}
		if root == "" {
			root = "the host's runtime trees"
		}
		return fmt.Sprintf("%s (runsc %s, platform %s, root %s)", r.Name, runsc, r.Platform, root)
	}
	rt, host := r.Runtime, r.Host
	if rt == "" {
		rt = "the daemon's default"
	}
	if host == "" {
		host = "$DOCKER_HOST or the default socket"
	}
	image := r.Image
	for _, lang := range slices.Sorted(maps.Keys(r.Images)) {
		image += ", " + lang + " " + r.Images[lang]
	}
	return fmt.Sprintf("%s (image %s, runtime %s, daemon %s)", r.Name, image, rt, host)
}

// checkBackend checks c.Backend.
func (c *Config) checkBackend(ps *problems) {
	b := c.Backend
	name := b.Name
	if name != "" && !slices.Contains(BackendNames, name) {
		ps.add("backend.name", "unknown backend %q (want %s)", name, orList(BackendNames))
	}
	d := b.Docker
	switch d.Runtime {
	case "", RuntimeRunsc, RuntimeRunc:
	default:
		ps.add("backend.docker.runtime", "unknown runtime %q (want runc or runsc: the runtimes moat is tested with)", d.Runtime)
	}
	if d.Image != "" {
		if !imageRE().MatchString(d.Image) {
			ps.add("backend.docker.image", "invalid image reference %q (e.g. python:3.12-slim)", d.Image)
		}
	}
	for _, lang := range slices.Sorted(maps.Keys(d.Images)) {
		img := d.Images[lang]
		switch {
		case box.Languages[lang].Name == "":
			ps.add("backend.docker.images."+lang, "unknown language %q (want %s)", lang, orList(slices.Sorted(maps.Keys(box.Languages))))
		case !imageRE().MatchString(img):
			ps.add("backend.docker.images."+lang, "invalid image reference %q (e.g. python:3.12-slim)", img)
		}
	}
	if d.Host != "" {
		if msg := checkDockerHost(d.Host); msg != "" {
			ps.add("backend.docker.host", "%s", msg)
		}
	}
	g := b.GVisor
	if g.Runsc != "" && !filepath.IsAbs(g.Runsc) {
		ps.add("backend.gvisor.runsc", "%q is not an absolute path (empty: look runsc up in PATH)", g.Runsc)
	}
	if g.Platform != "" && !slices.Contains(GVisorPlatforms, g.Platform) {
		ps.add("backend.gvisor.platform", "unknown platform %q (want %s)", g.Platform, orList(GVisorPlatforms))
	}
	if g.Rootfs != "" && !filepath.IsAbs(g.Rootfs) {
		ps.add("backend.gvisor.rootfs", "%q is not an absolute path (empty: the host's runtime trees)", g.Rootfs)
	}
	seen := map[string]bool{}
	for i, fb := range b.Fallback {
		p := fmt.Sprintf("backend.fallback[%d]", i)
		primary := name
		if primary == "" {
			primary = BackendNative
		}
		switch {
		case !slices.Contains(BackendNames, fb):
			ps.add(p, "unknown backend %q (want %s)", fb, orList(BackendNames))
		case fb == primary:
			ps.add(p, "%s is backend.name itself", fb)
		case seen[fb]:
			ps.add(p, "%s is listed twice", fb)
		}
		seen[fb] = true
	}
}

// checkDockerHost checks a daemon address; it returns a message, or "" when the
// address is good.
func checkDockerHost(h string) string {
	switch {
	case strings.HasPrefix(h, "unix://"):
		if p := strings.TrimPrefix(h, "unix://"); !filepath.IsAbs(p) {
			return fmt.Sprintf("%q: want unix:///absolute/path", h)
		}
	case strings.HasPrefix(h, "tcp://"):
		hostPort := strings.TrimSuffix(strings.TrimPrefix(h, "tcp://"), "/")
		if host, port, err := net.SplitHostPort(hostPort); err != nil || host == "" || port == "" {
			return fmt.Sprintf("%q: want tcp://host:port", h)
		}
	default:
		return fmt.Sprintf("%q: want unix:///path or tcp://host:port (empty: $DOCKER_HOST, else unix:///var/run/docker.sock)", h)
	}
	return ""
}

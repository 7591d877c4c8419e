package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestBackendErrors(t *testing.T) {
	tests := []parseErrCase{
		{"unknown name", "backend:\n  name: podman\n", `m.yaml:2: backend.name: unknown backend "podman" (want native, docker or gvisor)`},
		{"unknown runtime", "backend:\n  name: docker\n  docker:\n    runtime: kata\n", `m.yaml:4: backend.docker.runtime: unknown runtime "kata" (want runc or runsc`},
		{"relative runsc", "backend:\n  gvisor:\n    runsc: bin/runsc\n", `m.yaml:3: backend.gvisor.runsc: "bin/runsc" is not an absolute path`},
		{"unknown platform", "backend:\n  gvisor:\n    platform: xen\n", `m.yaml:3: backend.gvisor.platform: unknown platform "xen" (want ptrace, systrap or kvm)`},
		{"relative rootfs", "backend:\n  gvisor:\n    rootfs: rootfs\n", `m.yaml:3: backend.gvisor.rootfs: "rootfs" is not an absolute path`},
		{"unknown gvisor key", "backend:\n  gvisor:\n    image: x\n", `m.yaml:3: backend.gvisor.image: unknown key (want platform, rootfs or runsc)`},
		{"image with a space", "backend:\n  docker:\n    image: 'python 3'\n", `m.yaml:3: backend.docker.image: invalid image reference "python 3"`},
		{"image with an option", "backend:\n  docker:\n    image: --privileged\n", `m.yaml:3: backend.docker.image: invalid image reference "--privileged"`},
		{"host without a scheme", "backend:\n  docker:\n    host: /var/run/docker.sock\n", `m.yaml:3: backend.docker.host: "/var/run/docker.sock": want unix:///path or tcp://host:port`},
		{"relative socket", "backend:\n  docker:\n    host: unix://docker.sock\n", `m.yaml:3: backend.docker.host: "unix://docker.sock": want unix:///absolute/path`},
		{"tcp without a port", "backend:\n  docker:\n    host: tcp://docker.internal\n", `m.yaml:3: backend.docker.host: "tcp://docker.internal": want tcp://host:port`},
		{"unknown fallback", "backend:\n  name: docker\n  fallback: [chroot]\n", `m.yaml:3: backend.fallback[0]: unknown backend "chroot"`},
		{"fallback to itself", "backend:\n  name: docker\n  fallback: [native, docker]\n", `m.yaml:3: backend.fallback[1]: docker is backend.name itself`},
		{"fallback to native by default", "backend:\n  fallback: [native]\n", `m.yaml:2: backend.fallback[0]: native is backend.name itself`},
		{"fallback twice", "backend:\n  name: gvisor\n  fallback: [docker, docker]\n", `m.yaml:3: backend.fallback[1]: docker is listed twice`},
		{"unknown key", "backend:\n  docker:\n    imagez: {python: x}\n", `m.yaml:3: backend.docker.imagez: unknown key (want host, image, images or runtime)`},
		{"image of an unknown language", "backend:\n  docker:\n    images: {ruby: 'ruby:3'}\n", `m.yaml:3: backend.docker.images.ruby: unknown language "ruby" (want bash or python)`},
		{"bad image of a language", "backend:\n  docker:\n    images: {bash: 'a b'}\n", `m.yaml:3: backend.docker.images.bash: invalid image reference "a b"`},
	}
	checkParseErrors(t, tests)
}

func TestResolveBackend(t *testing.T) {
	tests := []struct {
		name, src, flag string
		want            ResolvedBackend
	}{
		{"default", "", "", ResolvedBackend{Name: BackendNative}},
		{"native by flag", "backend: {name: docker}\n", "native", ResolvedBackend{Name: BackendNative}},
		{"docker defaults", "backend: {name: docker}\n", "", ResolvedBackend{Name: BackendDocker, Image: DefaultDockerImage}},
		{"docker by flag", "", "docker", ResolvedBackend{Name: BackendDocker, Image: DefaultDockerImage}},
		{"docker settings", "backend:\n  name: docker\n  docker: {host: 'tcp://10.0.0.2:2375', image: 'python:3.12-slim', runtime: runc}\n", "",
			ResolvedBackend{Name: BackendDocker, Host: "tcp://10.0.0.2:2375", Image: "python:3.12-slim"}},
		{"docker images by language", "backend:\n  name: docker\n  docker: {images: {python: 'python:3.12-slim'}}\n", "",
			ResolvedBackend{Name: BackendDocker, Image: DefaultDockerImage, Images: map[string]string{"python": "python:3.12-slim"}}},
		{"docker on runsc", "backend:\n  name: docker\n  docker: {runtime: runsc}\n", "",
			ResolvedBackend{Name: BackendDocker, Image: DefaultDockerImage, Runtime: RuntimeRunsc}},
		{"gvisor", "backend:\n  name: gvisor\n  gvisor: {runsc: /opt/runsc, platform: kvm, rootfs: /srv/root}\n  docker: {image: 'python:3.12-slim'}\n", "",
			ResolvedBackend{Name: BackendGVisor, Runsc: "/opt/runsc", Platform: "kvm", Rootfs: "/srv/root"}},
		{"gvisor by flag", "", "gvisor", ResolvedBackend{Name: BackendGVisor, Platform: "ptrace"}},
		{"gvisor with docker on runc", "backend:\n  docker: {runtime: runc}\n", "gvisor", ResolvedBackend{Name: BackendGVisor, Platform: "ptrace"}},
		{"fallback", "backend:\n  name: gvisor\n  fallback: [docker, native]\n", "",
			ResolvedBackend{Name: BackendGVisor, Platform: "ptrace", Fallback: []ResolvedBackend{
				{Name: BackendDocker, Image: DefaultDockerImage}, {Name: BackendNative}}}},
		{"a flag drops the fallback", "backend:\n  name: gvisor\n  fallback: [native]\n", "gvisor",
			ResolvedBackend{Name: BackendGVisor, Platform: "ptrace"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.src)
			got, err := c.ResolveBackend(tc.flag)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ResolveBackend(%q) = %+v, want %+v", tc.flag, got, tc.want)
			}
		})
	}
}

func TestResolveBackendFlagErrors(t *testing.T) {
	tests := []struct{ name, src, flag, want string }{
		{"unknown", "", "bogus", `unknown backend "bogus" (want native, docker or gvisor)`},
		{"case matters", "", "Docker", `unknown backend "Docker"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mustParse(t, tc.src).ResolveBackend(tc.flag)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("ResolveBackend(%q) = %v, want %q", tc.flag, err, tc.want)
			}
		})
	}
}

func TestBackendWarnings(t *testing.T) {
	for _, src := range []string{"backend: {name: docker}\n", "backend: {name: gvisor, gvisor: {platform: ptrace}}\n", "backend: {fallback: []}\n"} {
		if w := mustParse(t, src).Warnings(); len(w) != 0 {
			t.Errorf("%q warns: %q", src, w)
		}
	}
	w := mustParse(t, "backend:\n  name: docker\n  fallback: [gvisor, native]\n").Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "when docker cannot start, boxes are made by gvisor or native") {
		t.Errorf("fallback warnings = %q", w)
	}
}

func TestResolvedBackendString(t *testing.T) {
	for r, want := range map[*ResolvedBackend]string{
		{Name: BackendNative}:                                                                        "native",
		{Name: BackendGVisor, Platform: "ptrace"}:                                                    "gvisor (runsc from PATH, platform ptrace, root the host's runtime trees)",
		{Name: BackendGVisor, Runsc: "/r", Platform: "kvm", Rootfs: "/srv"}:                          "gvisor (runsc /r, platform kvm, root /srv)",
		{Name: BackendDocker, Image: "img", Host: "unix:///run/d.sock"}:                              "docker (image img, runtime the daemon's default, daemon unix:///run/d.sock)",
		{Name: BackendDocker, Image: "img", Images: map[string]string{"python": "py", "bash": "sh"}}: "docker (image img, bash sh, python py, runtime the daemon's default, daemon $DOCKER_HOST or the default socket)",
		{Name: BackendDocker, Image: "img", Runtime: RuntimeRunsc, Host: "tcp://h:1"}:                "docker (image img, runtime runsc, daemon tcp://h:1)",
	} {
		if got := r.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

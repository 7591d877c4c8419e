package gvisor

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container"
)

// TestSpec: the OCI spec of a box never runs as root, has no capability, no host
// mount but read-only binds, a new network namespace, and the limits asked for.
func TestSpec(t *testing.T) {
	lim := box.Limits{Memory: 96 << 20, Pids: 20, OpenFiles: 100, Disk: 8 << 20, Tmp: 4 << 20}
	s := Spec(BundleParams{
		Rootfs:        "/r",
		Binds:         []Mount{{Source: "/usr", Destination: "/usr"}, {Source: "/etc/ld.so.cache", Destination: "/etc/ld.so.cache"}},
		AgentHostPath: "/usr/local/bin/moat",
		Limits:        lim,
	})
	p := s.Process
	// The agent and init are the sandbox's root with container.RootCaps and nothing
	// more (init runs the code as the box's user, which drops them).
	if p.User.UID != 0 || p.User.GID != 0 || len(p.User.AdditionalGids) != 0 {
		t.Errorf("user %+v", p.User)
	}
	if c := p.Capabilities; c == nil || !slices.Equal(c.Bounding, container.RootCaps) || !slices.Equal(c.Effective, container.RootCaps) ||
		!slices.Equal(c.Permitted, container.RootCaps) || len(c.Inheritable)+len(c.Ambient) != 0 {
		t.Errorf("capabilities %+v, want container.RootCaps only (bounding, effective, permitted)", c)
	}
	for _, c := range container.RootCaps {
		if c == "CAP_SYS_ADMIN" || c == "CAP_SYS_PTRACE" || c == "CAP_NET_ADMIN" || c == "CAP_SYS_MODULE" {
			t.Errorf("container.RootCaps has %s", c)
		}
	}
	if !p.NoNewPrivileges || p.Terminal {
		t.Errorf("no_new_privs %v, terminal %v", p.NoNewPrivileges, p.Terminal)
	}
	if !slices.Equal(p.Args, []string{container.AgentPath, container.MuxRole}) {
		t.Errorf("args %v", p.Args)
	}
	rl := map[string]uint64{}
	for _, r := range p.Rlimits {
		if r.Hard != r.Soft {
			t.Errorf("rlimit %s: soft %d hard %d", r.Type, r.Soft, r.Hard)
		}
		rl[r.Type] = r.Hard
	}
	if rl["RLIMIT_NPROC"] != 20+container.AgentTasks || rl["RLIMIT_NOFILE"] != 100 || rl["RLIMIT_CORE"] != 0 {
		t.Errorf("rlimits %v", rl)
	}
	if !s.Root.Readonly || s.Root.Path != "/r" {
		t.Errorf("root %+v", s.Root)
	}
	var ns []specs.LinuxNamespaceType
	for _, n := range s.Linux.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins %s", n.Type, n.Path)
		}
		ns = append(ns, n.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace} {
		if !slices.Contains(ns, want) {
			t.Errorf("no new %s namespace", want)
		}
	}
	if s.Linux.Resources == nil || s.Linux.Resources.Memory == nil || *s.Linux.Resources.Memory.Limit != lim.Memory || s.Linux.CgroupsPath != "" {
		t.Errorf("resources %+v cgroups path %q: want only the memory limit, no cgroup of runsc's own", s.Linux.Resources, s.Linux.CgroupsPath)
	}
	if s.Linux.Seccomp != nil && s.Linux.Seccomp.DefaultAction == specs.ActAllow && len(s.Linux.Seccomp.Syscalls) == 0 {
		t.Error("an allow-all seccomp profile")
	}
	mounts := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = m
		switch m.Type {
		case "bind":
			if !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
				t.Errorf("bind %s -> %s is not read-only, nosuid and nodev: %v", m.Source, m.Destination, m.Options)
			}
		case "tmpfs", "proc":
			if !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
				t.Errorf("%s %s lacks nosuid or nodev: %v", m.Type, m.Destination, m.Options)
			}
		default:
			t.Errorf("mount %+v of an unexpected type", m)
		}
	}
	for dst, want := range map[string]string{
		"/tmp":              "size=4194304",
		box.WorkspaceDir:    "size=8388608",
		container.MoatDir:   "noexec",
		container.AgentPath: "ro",
		"/usr":              "ro",
		"/etc/ld.so.cache":  "ro",
		"/proc":             "nosuid",
	} {
		if m, ok := mounts[dst]; !ok || !slices.Contains(m.Options, want) {
			t.Errorf("mount %s: %+v, want option %s", dst, m, want)
		}
	}
	if len(mounts) != 7 {
		t.Errorf("%d mounts, want 7: %v", len(mounts), mounts)
	}
	if ws := strings.Join(mounts[box.WorkspaceDir].Options, ","); !strings.Contains(ws, "uid=65534") {
		t.Errorf("workspace options %s: not the box user's", ws)
	}
}

func TestHostTaskLimit(t *testing.T) {
	if got, want := HostTaskLimit(10), int64((10+container.AgentTasks)*HostTasksPerProc+HostTasks); got != want {
		t.Errorf("HostTaskLimit(10) = %d, want %d", got, want)
	}
}

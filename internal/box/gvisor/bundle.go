package gvisor

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container"
)

// Sizing of a sandbox's host tasks: the pids cgroup moat puts runsc in counts the
// Sentry's threads, the gofer's, and (with the ptrace platform) a stub process with
// threads for each process of the box, and reaching it crashes the whole sandbox. So it
// is a backstop, sized from Limits.Pids; the box's own processes are held to
// Limits.Pids plus container.AgentTasks by an nproc rlimit, which gVisor's kernel
// enforces inside the sandbox (it counts the box user's tasks there, not the host's).
const (
	HostTasksPerProc = 16
	HostTasks        = 256
)

// HostTaskLimit is the pids cgroup limit of a sandbox whose box may have pids
// processes.
func HostTaskLimit(pids int64) int64 {
	return (pids+container.AgentTasks)*HostTasksPerProc + HostTasks
}

// Mount is a bind mount of a host path, read-only, nosuid and nodev.
type Mount struct {
	Source, Destination string
}

// BundleParams describes one box's OCI bundle.
type BundleParams struct {
	// Rootfs is the root filesystem, relative to the bundle or absolute. It is
	// read-only for the box.
	Rootfs string
	// Binds are host paths shown read-only (the host's runtime trees and /etc
	// entries when the root is moat's own skeleton; nothing for an image's root).
	Binds []Mount
	// AgentHostPath is the host path of the moat binary, mounted read-only at
	// container.AgentPath.
	AgentHostPath string
	// Limits bound the box; zero fields take box.DefaultLimits. Disk sizes
	// /workspace, Tmp sizes /tmp; Memory, Pids and CPUs are the cgroup's (moat puts
	// runsc in one), OpenFiles and Pids also rlimits of the agent.
	Limits box.Limits
}

// Spec returns the OCI runtime spec of one box's sandbox. It touches nothing. What
// each setting is for:
//
//   - process: the agent, [container.AgentPath, container.MuxRole], as the
//     sandbox's root with container.RootCaps only, no_new_privs (init runs the code as
//     container.BoxUID:BoxGID with no capabilities: gVisor's kernel lets a process open
//     the fds of another of the same user through /proc even when that one is not
//     dumpable, so the code must not be the agent's user),
//     cwd /workspace, no terminal (its stdio are runsc's: moat's pipes), a minimal
//     environment, and rlimits: nofile from Limits.OpenFiles, nproc Limits.Pids plus
//     container.AgentTasks (enforced by gVisor's kernel), core 0.
//   - root: Rootfs, read-only.
//   - mounts: gVisor's own /proc (and, added by runsc, its own /dev and /sys: nothing
//     of the host's), tmpfs /tmp
//     (Limits.Tmp, 1777), /workspace (Limits.Disk, 0755, the box user's) and
//     container.MoatDir (noexec, root's: init's), all nosuid and nodev; the binds read-only; the moat
//     binary read-only at container.AgentPath. gVisor makes the mount points in its
//     own view of the root; the host directory is never written.
//   - namespaces: pid, network (runsc --network=none: loopback only), ipc, uts and
//     mount, all new. No user namespace: gVisor's kernel is the boundary, and its
//     Sentry and gofer drop to their own minimal privileges.
//   - linux.resources: only the memory limit, which the Sentry sizes its own memory
//     by; runsc runs with --ignore-cgroups and no cgroupsPath: moat makes the cgroup (memory with no
//     extra swap, pids, CPU) and starts runsc inside it, so the Sentry, the gofer and
//     everything they start are bounded and can be killed as one, and the OOM
//     killer's kills are counted where moat reads them.
//   - no seccomp: the application's is moat's own, installed by the box's init inside
//     the sandbox; gVisor filters the Sentry's own system calls on the host.
func Spec(p BundleParams) *specs.Spec {
	lim := p.Limits.WithDefaults()
	uid, gid := uint32(container.BoxUID), uint32(container.BoxGID)
	nproc := uint64(lim.Pids + container.AgentTasks)
	nofile := uint64(lim.OpenFiles)
	nosuid := []string{"nosuid", "nodev"}
	tmpfs := func(dst string, opts ...string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: append(append([]string(nil), nosuid...), opts...)}
	}
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: nosuid},
		tmpfs(container.TmpDir, "exec", fmt.Sprintf("size=%d", lim.Tmp), "mode=1777"),
		tmpfs(box.WorkspaceDir, "exec", fmt.Sprintf("size=%d", lim.Disk), "mode=0755", fmt.Sprintf("uid=%d", uid), fmt.Sprintf("gid=%d", gid)),
		// Root's, as init is: gVisor has no Landlock to keep the code from rewriting
		// the runner and its policy there.
		tmpfs(container.MoatDir, "noexec", fmt.Sprintf("size=%d", container.MoatDirBytes), "mode=0755", "uid=0", "gid=0"),
	}
	for _, b := range p.Binds {
		mounts = append(mounts, specs.Mount{Destination: b.Destination, Type: "bind", Source: b.Source, Options: ro})
	}
	if p.AgentHostPath != "" {
		mounts = append(mounts, specs.Mount{Destination: container.AgentPath, Type: "bind", Source: p.AgentHostPath, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{}},
			Args:     []string{container.AgentPath, container.MuxRole},
			Env:      []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + box.WorkspaceDir, "LANG=C.UTF-8"},
			Cwd:      box.WorkspaceDir,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: container.RootCaps, Effective: container.RootCaps, Permitted: container.RootCaps,
			},
			NoNewPrivileges: true,
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile},
				{Type: "RLIMIT_NPROC", Hard: nproc, Soft: nproc},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
		},
		Root:     &specs.Root{Path: p.Rootfs, Readonly: true},
		Hostname: "moat",
		Mounts:   mounts,
		Linux: &specs.Linux{
			Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &lim.Memory}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
			},
		},
	}
}

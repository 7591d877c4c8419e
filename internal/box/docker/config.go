package docker

import (
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"

	dcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container"
)

// Labels every moat container carries. Sweep finds leftovers by them.
const (
	// LabelBox marks a container as a moat box (value "1").
	LabelBox = "dev.moat.box"
	// LabelOwner names the moat process that made the container: "<pid>@<hostname>".
	LabelOwner = "dev.moat.owner"
	// LabelOwnerStart is the owner's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22), so that a recycled pid is not taken for the owner.
	// Empty where the start time is unknown.
	LabelOwnerStart = "dev.moat.owner-start"
)

// RuntimeGVisor is gVisor's runtime name, as scripts/backends registers it.
const RuntimeGVisor = "runsc"

// Sizing of a gVisor box's limits (see HardenedConfig).
const (
	// GVisorHostTasksPerProc bounds the host tasks (pids cgroup) one task in the
	// sandbox may cost; GVisorHostTasks is the Sentry's and the gofer's own share.
	GVisorHostTasksPerProc = 16
	GVisorHostTasks        = 256
)

// StopTimeout is how long Docker waits between SIGTERM and SIGKILL when it stops a box
// (docker stop, daemon shutdown). moat itself kills with SIGKILL; nothing in a box has
// state worth a grace period.
const StopTimeout = 1

// ContainerParams describes one box container. The zero value of every limit is the
// default of box.DefaultLimits, never "unlimited".
type ContainerParams struct {
	// Image is the image to run, e.g. "moat-test-python:bookworm". Required.
	Image string
	// Name is the container's name; empty lets Docker choose one.
	Name string
	// Entrypoint and Cmd replace the image's; the agent will be the entrypoint.
	Entrypoint []string
	Cmd        []string
	// Env holds KEY=VALUE pairs added to the image's environment.
	Env []string
	// UID and GID are the user the container's processes run as. Zero means
	// container.BoxUID/container.BoxGID: a box never runs as root. Under runsc
	// they are ignored: the agent and init are the container's root (with
	// container.RootCaps only) and run the code as container.BoxUID.
	UID, GID int
	// Runtime is the OCI runtime registered with the daemon, e.g. "runsc" for gVisor;
	// empty uses the daemon's default (runc).
	Runtime string
	// Limits bound the box; zero fields take box.DefaultLimits. Timeout and Output are
	// the caller's to enforce; Disk sizes /workspace, Tmp sizes /tmp and /dev/shm.
	Limits box.Limits
	// AgentHostPath is the host path of the moat binary, bind-mounted read-only at
	// container.AgentPath; empty mounts nothing. It must be absolute.
	AgentHostPath string
	// Stdin opens the container's stdin for one attached client (closed when that
	// client closes its write side).
	Stdin bool
	// Labels are added to the container's labels; they cannot replace LabelBox,
	// LabelOwner or LabelOwnerStart.
	Labels map[string]string
	// Owner is recorded in LabelOwner and LabelOwnerStart; zero means CurrentOwner().
	Owner Owner
}

// Owner identifies the moat process that owns a container.
type Owner struct {
	PID   int
	Host  string
	Start uint64 // clock ticks since boot; 0 if unknown
}

// String formats o as LabelOwner's value: "<pid>@<host>".
func (o Owner) String() string { return strconv.Itoa(o.PID) + "@" + o.Host }

// CurrentOwner returns this process as an Owner.
func CurrentOwner() Owner {
	host, _ := os.Hostname()
	pid := os.Getpid()
	start, _ := processStart(pid)
	return Owner{PID: pid, Host: host, Start: start}
}

// parseOwner reads LabelOwner's value back; ok is false if it is malformed.
func parseOwner(label string) (pid int, host string, ok bool) {
	p, h, found := strings.Cut(label, "@")
	if !found || h == "" {
		return 0, "", false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	return pid, h, true
}

// HardenedConfig builds the configuration of one box container from p. It talks to no
// daemon. What each setting is for:
//
//   - NetworkMode "none": the container has a loopback interface and nothing else.
//   - ReadonlyRootfs: the image cannot be changed; only the tmpfs mounts are writable.
//   - Tmpfs /tmp (Limits.Tmp, mode 1777) and /workspace (Limits.Disk, mode 0755, owned
//     by UID:GID): nosuid and nodev, but exec, as in the native backend. noexec would not
//     be a boundary (an interpreter runs any file it can read) and would break users
//     who build and run a helper in their workspace. tmpfs pages count against the
//     container's memory limit.
//   - Tmpfs container.MoatDir (container.MoatDirBytes, mode 0755, noexec), owned by
//     init's user (UID:GID, root under runsc): init writes the code and the support
//     files there (mode 0444); the interpreter reads them. Landlock keeps the code
//     from changing them under runc; under runsc, which has no Landlock, the code is
//     not their owner.
//   - ShmSize = Limits.Tmp for /dev/shm (Docker mounts it noexec, nosuid, nodev).
//   - CapDrop ALL and SecurityOpt no-new-privileges:true: no capabilities, and no way to
//     gain any through setuid binaries or file capabilities in the image.
//   - No seccomp option: Docker's default profile stays in force. Never
//     seccomp=unconfined.
//   - User UID:GID, never root; but under runsc the agent and init run as the
//     container's root with only container.RootCaps (CapAdd), and init runs the code as
//     UID:GID with none: gVisor's kernel lets a process open the fds of another of the
//     same user through /proc even when that one is not dumpable.
//   - PidsLimit (Limits.Pids plus container.AgentTasks for moat's agent and init), Memory with MemorySwap equal to it (no swap on top of the memory
//     limit), NanoCPUs, and a nofile ulimit from Limits.OpenFiles.
//   - For runtime runsc the pids cgroup holds gVisor's own host tasks (the Sentry's
//     threads and, with the ptrace platform, a stub process with threads for each
//     process of the box: about 8 host tasks each), and reaching it crashes the whole
//     sandbox. So there it is only a backstop, sized from Limits.Pids (see
//     GVisorHostTasksPerProc), and the box's processes are held to Limits.Pids plus
//     container.AgentTasks by an nproc ulimit, which gVisor enforces inside the sandbox
//     (its own kernel counts the box user's tasks). Under runc an nproc ulimit would
//     count every process of the uid on the host, so there the pids cgroup is the
//     limit.
//   - IpcMode private and CgroupnsMode private: no sharing with the host or other
//     containers whatever the daemon's defaults.
//   - Init false: the agent will be PID 1 and reaps the box's processes itself.
//   - One host mount: AgentHostPath read-only (and not recursive) at container.AgentPath.
//   - LogConfig "none": the box's output goes to the attached client and is never
//     written to the host's disk (json-file, Docker's default, has no size cap in 20.10
//     and would keep untrusted output, secrets included, after the box is gone).
//   - AutoRemove false: moat removes the box itself after reading its exit state.
//   - Labels LabelBox, LabelOwner and LabelOwnerStart for Sweep.
//   - Attach stdout and stderr (and stdin when p.Stdin), no TTY: a multiplexed stream.
func HardenedConfig(p ContainerParams) (*dcontainer.Config, *dcontainer.HostConfig) {
	lim := p.Limits.WithDefaults()
	uid, gid := p.UID, p.GID
	if uid == 0 {
		uid = container.BoxUID
	}
	if gid == 0 {
		gid = container.BoxGID
	}
	owner := p.Owner
	if owner == (Owner{}) {
		owner = CurrentOwner()
	}

	labels := make(map[string]string, len(p.Labels)+3)
	maps.Copy(labels, p.Labels)
	labels[LabelBox] = "1"
	labels[LabelOwner] = owner.String()
	labels[LabelOwnerStart] = ""
	if owner.Start != 0 {
		labels[LabelOwnerStart] = strconv.FormatUint(owner.Start, 10)
	}

	user, capAdd := fmt.Sprintf("%d:%d", uid, gid), []string(nil)
	// moatUID and moatGID own container.MoatDir: init's user, who writes the code and
	// the support files there.
	moatUID, moatGID := uid, gid
	if p.Runtime == RuntimeGVisor {
		// The agent and init: root with container.RootCaps only; init runs the code
		// as the box's user, who owns /tmp and /workspace but not MoatDir (gVisor has
		// no Landlock to keep the code from rewriting the runner and its policy).
		uid, gid = container.BoxUID, container.BoxGID
		moatUID, moatGID = 0, 0
		user, capAdd = "0:0", append(capAdd, container.RootCaps...)
	}
	stopTimeout := StopTimeout
	cfg := &dcontainer.Config{
		Image:        p.Image,
		User:         user,
		Env:          append([]string(nil), p.Env...),
		Entrypoint:   append([]string(nil), p.Entrypoint...),
		Cmd:          append([]string(nil), p.Cmd...),
		WorkingDir:   box.WorkspaceDir,
		Labels:       labels,
		StopTimeout:  &stopTimeout,
		AttachStdin:  p.Stdin,
		OpenStdin:    p.Stdin,
		StdinOnce:    p.Stdin,
		AttachStdout: true,
		AttachStderr: true,
	}

	noInit := false
	pids := lim.Pids + container.AgentTasks
	ulimits := []*dcontainer.Ulimit{{Name: "nofile", Soft: lim.OpenFiles, Hard: lim.OpenFiles}}
	if p.Runtime == RuntimeGVisor {
		nproc := lim.Pids + container.AgentTasks
		pids = nproc*GVisorHostTasksPerProc + GVisorHostTasks
		ulimits = append(ulimits, &dcontainer.Ulimit{Name: "nproc", Soft: nproc, Hard: nproc})
	}
	host := &dcontainer.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{
			container.TmpDir:  fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", lim.Tmp),
			box.WorkspaceDir:  fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=0755,uid=%d,gid=%d", lim.Disk, uid, gid),
			container.MoatDir: fmt.Sprintf("rw,noexec,nosuid,nodev,size=%d,mode=0755,uid=%d,gid=%d", container.MoatDirBytes, moatUID, moatGID),
		},
		ShmSize:      lim.Tmp,
		CapDrop:      []string{"ALL"},
		CapAdd:       capAdd,
		SecurityOpt:  []string{"no-new-privileges:true"},
		IpcMode:      dcontainer.IPCModePrivate,
		CgroupnsMode: dcontainer.CgroupnsModePrivate,
		Init:         &noInit,
		AutoRemove:   false,
		LogConfig:    dcontainer.LogConfig{Type: "none"},
		Runtime:      p.Runtime,
		Resources: dcontainer.Resources{
			Memory:     lim.Memory,
			MemorySwap: lim.Memory,
			NanoCPUs:   int64(lim.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits:    ulimits,
		},
	}
	if p.AgentHostPath != "" {
		host.Mounts = []mount.Mount{{
			Type:        mount.TypeBind,
			Source:      p.AgentHostPath,
			Target:      container.AgentPath,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{NonRecursive: true},
		}}
	}
	return cfg, host
}

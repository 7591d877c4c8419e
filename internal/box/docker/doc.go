// Package docker is the docker backend: boxes are containers of a Docker daemon (with
// its default runtime runc, or runsc where the daemon has gVisor). It holds a small
// layer over the Docker Engine API (github.com/moby/moby/client) that connects to a
// daemon, builds the hardened container configuration every moat box uses, drives a
// container's life (create, attach, start, wait, kill, remove) and sweeps away the
// leftovers of a crashed moat; and, on top of it, Runtime, the container.Runtime
// whose containers package box/container's Starter runs the native backend's box
// init in, so that sessions, files, policy, the filter and the result contract are
// the native backend's own.
//
// # The backend
//
//	b, err := docker.NewBackend(ctx, docker.Options{Image: "moat-test-python:bookworm"})
//	res, err := b.Run(ctx, spec) // b is a *native.Backend: box.Backend and box.SessionBackend
//
// NewBackend checks the daemon, the image and the runtime, and returns
// &native.Backend{Starter: &container.Starter{Runtime: &Runtime{...}}}. The moat
// binary is bind-mounted read-only into each container at container.AgentPath and is
// its entrypoint, as the agent (container.MuxRole): see package box/container for the
// agent, its stream and why it is safe.
//
// # Connecting
//
//	e, err := docker.Connect(ctx, "") // DOCKER_HOST, or unix:///var/run/docker.sock
//	if err != nil { ... }             // errors.Is(err, docker.ErrDaemonUnreachable)
//	defer e.Close()
//
// The client negotiates the API version down to what the daemon speaks: 1.41 for
// Debian bookworm's docker.io 20.10. The client refuses daemons older than API 1.40.
//
// # The hardened container
//
// HardenedConfig turns ContainerParams into the container.Config and
// container.HostConfig of one box. It is a pure function, so the flag set is unit-tested
// without a daemon; see its doc comment for each setting and why it is there. In short:
// no network, read-only root, tmpfs /tmp and /workspace with sizes, all capabilities
// dropped, no-new-privileges, Docker's default seccomp profile, a non-root user,
// pids/memory(=swap)/CPU limits, no host mounts except the moat binary read-only at
// container.AgentPath, the moat labels, and no log driver (output is never stored on the host).
//
// # One run
//
//	c, err := e.Create(ctx, p)         // c.Warnings: limits the daemon could not apply
//	s, err := e.Attach(ctx, c.ID)      // before Start, so no output is missed
//	err = e.Start(ctx, c.ID)
//	// write s.Stdin, drain s.Stdout and s.Stderr concurrently
//	exit, err := e.Wait(ctx, c.ID)     // exit.Code, exit.OOMKilled
//	err = e.Remove(ctx, c.ID, true)
//
// # Out of memory, and a daemon that goes away
//
// A session call's status is memory_limit when the OOM killer took a process during
// it. The daemon's OOMKilled mark cannot tell that: it stays set once set, dockerd
// 20.10 sets it only at the container's exit, and under runsc not always. So the
// Runtime reads the kernel's count, oom_kill in the container's memory cgroup, found
// through the container's host pid when the daemon is local, and follows the
// daemon's "oom" events of its containers (oomwatch.go), which come at once and
// before the "die" event, under runc and runsc alike: a container whose cgroup is
// gone by the time moat asks is still known to have met its limit. Under runsc the
// OOM killer takes gVisor's sandbox and with it the box: the session is lost,
// saying so.
//
// A container that the daemon kills (docker kill or stop, or dockerd's own shutdown,
// which stops every container) ends its box with an error wrapping
// native.ErrProcLost that says so; a daemon that dies makes Wait fail, naming the
// daemon. Leftovers of a daemon that went away are swept by the next moat.
//
// # Leftovers
//
// Every container carries LabelBox and LabelOwner ("<pid>@<hostname>", plus the owner's
// start time in LabelOwnerStart so a recycled pid is not mistaken for the owner). Sweep
// removes the containers whose owner on this host is gone; moat calls it on start.
//
// # Host requirements
//
// A Docker daemon speaking API 1.40 or later (docker.io 20.10 on bookworm), reachable by
// the caller (root, or the docker group: which is root-equivalent). For runtime "runsc",
// gVisor registered in /etc/docker/daemon.json; scripts/backends does both on Debian.
package docker

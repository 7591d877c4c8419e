// Package docker is the docker backend (and, with runtime runsc, the gvisor one): boxes
// are containers of a Docker daemon. It holds a small layer over the Docker Engine API
// (github.com/moby/moby/client) that connects to a daemon, builds the hardened
// container configuration every moat box uses, drives a container's life (create,
// attach, start, wait, kill, remove) and sweeps away the leftovers of a crashed moat;
// and, on top of it, the Starter that runs the native backend's box init in such a
// container, so that sessions, files, policy, the filter and the result contract are
// the native backend's own.
//
// # The backend
//
//	b, err := docker.NewBackend(ctx, docker.Options{Image: "moat-test-python:bookworm", Runtime: "runsc"})
//	res, err := b.Run(ctx, spec) // b is a *native.Backend: box.Backend and box.SessionBackend
//
// NewBackend checks the daemon, the image and the runtime, and returns
// &native.Backend{Starter: &Starter{...}}. The moat binary is bind-mounted read-only
// into each container at AgentPath and is its entrypoint, as the agent (MuxRole). The
// agent starts the box's init (native.InitRole) in container mode: the runtime made the
// namespaces, the read-only root, the tmpfs mounts (/tmp, /workspace, MoatDir) and the
// cgroup limits; init places the code and the files, sets rlimits, Landlock (where the
// kernel has it: not under gVisor) and moat's seccomp filter on top of Docker's, and
// runs the code as the box's user.
//
// # One box
//
//	moat (host)                     container: agent, PID 1     init (moat-init)
//	-----------                     ---------------------       ----------------
//	Create, Attach, Start  ------->  starts, reads stdin
//	plan frame (init's fds) ------>  pipes and socketpairs
//	                                 /proc/self/exe  ---------->  blocks on fd 3
//	spec on fd 3 (channel 3) ----->  fd 3  -------------------->  setupContained,
//	go frame  -------------------->                               fork+exec the code
//	stdout, stderr, report   <-----  channels 1, 2, N  <--------  the code's output
//	exit frame on channel 3  <-----                     <-------  {"kind":"exit"}, exits
//	                                 reaps init, kill(-1),
//	end of every channel     <-----  drains, exits with
//	Wait: container exit             init's status
//	Remove
//
// The container's attached stdin and stdout carry every fd of init, framed (mux.go:
// frames, channels, credit, and the order of stdout before the report). The host end
// is the Starter's proc; the container end is the agent (agent_linux.go).
//
// # Why the agent is safe
//
// The agent runs as the box's user with no capabilities and no_new_privs, like the
// code, which it does not trust. It is not dumpable, so the code (same uid) cannot
// ptrace it or open its fds or memory through /proc/1; moat's seccomp filter denies the
// code ptrace anyway. The code can signal it (same uid): the agent catches the usual
// signals, and the rest end only this box. Everything the agent reads from the host is
// bounded (the plan, frames, windows), and so is everything the host reads from the
// agent: a frame over MaxFrameData, a frame on a channel that carries nothing that way,
// or data past a window is a protocol error that kills the box, never the host process.
// The host logs at most maxAgentLog bytes of the agent's stderr.
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
// AgentPath, the moat labels, and no log driver (output is never stored on the host).
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

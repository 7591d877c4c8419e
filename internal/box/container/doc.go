// Package container runs the native backend's box init in a container that a
// Runtime makes: a Docker daemon's (package box/docker) or gVisor's runsc (package
// box/gvisor). Starter implements native.Starter on top of a Runtime, so a container
// box has the native backend's sessions, files, policy, filter and result contract.
//
// The moat binary is mounted read-only into each container at AgentPath and is its
// entrypoint, as the agent (MuxRole). The agent starts the box's init
// (native.InitRole) in container mode: the runtime made the namespaces, the read-only
// root, the tmpfs mounts (/tmp, /workspace, MoatDir) and the resource limits; init
// places the code and the files, sets rlimits, Landlock (where the kernel has it: not
// under gVisor) and moat's seccomp filter on top of the runtime's, and runs the code
// as the box's user.
//
// # One box
//
//	moat (host)                     container: agent, PID 1     init (moat-init)
//	-----------                     ---------------------       ----------------
//	Runtime.Start  -------------->  starts, reads stdin
//	plan frame (init's fds) ------>  pipes and socketpairs
//	                                 /proc/self/exe  ---------->  blocks on fd 3
//	spec on fd 3 (channel 3) ----->  fd 3  -------------------->  setupContained,
//	go frame  -------------------->                               fork+exec the code
//	stdout, stderr, report   <-----  channels 1, 2, N  <--------  the code's output
//	exit frame on channel 3  <-----                     <-------  {"kind":"exit"}, exits
//	                                 reaps init, kill(-1),
//	end of every channel     <-----  drains
//	reads the usage, release ---->   exits with init's status
//	Wait: container exit
//	Remove
//
// The container's attached stdin and stdout carry every fd of init, framed (mux.go:
// frames, channels, credit, and the order of stdout before the report). The host end
// is the Starter's proc; the container end is the agent (agent_linux.go).
//
// # Why the agent is safe
//
// Under runc the agent runs as the box's user with no capabilities and no_new_privs,
// like the code, which it does not trust. It is not dumpable, so the code (same uid)
// cannot ptrace it or open its fds or memory through /proc/1; moat's seccomp filter
// denies the code ptrace anyway. The code can signal it (same uid): the agent catches
// the usual signals, and the rest end only this box. Under runsc, gVisor's kernel lets
// a process open the fds of another of the same user through /proc/PID/fd whether or
// not that one is dumpable; there the agent and init run as the container's root with
// RootCaps only, init runs the code as BoxUID, and the code can neither open their
// fds nor signal them. Everything the agent reads from the host is
// bounded (the plan, frames, windows), and so is everything the host reads from the
// agent: a frame over MaxFrameData, a frame on a channel that carries nothing that way,
// or data past a window is a protocol error that kills the box, never the host process.
// The host logs at most maxAgentLog bytes of the agent's stderr.
package container

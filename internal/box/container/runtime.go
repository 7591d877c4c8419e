package container

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
)

// Paths inside a box's container.
const (
	// AgentPath is where the moat binary is mounted, read-only: the container's
	// entrypoint is [AgentPath, MuxRole].
	AgentPath = "/.moat-agent/moat"
	// TmpDir is the box's tmpfs /tmp.
	TmpDir = "/tmp"
	// MoatDir is the tmpfs where the box's init places the code and the engine's
	// support files (owned by the box user: init runs as that user).
	MoatDir = "/.moat"
	// MoatDirBytes is MoatDir's size.
	MoatDirBytes = 16 << 20
)

// MuxRole is argv[1] of the agent: the container's entrypoint is
// [AgentPath, MuxRole].
const MuxRole = "__moat-mux"

// BoxUID and BoxGID are the user a box container runs as: nobody/nogroup, as in the
// native backend. A box never runs as root.
const (
	BoxUID = 65534
	BoxGID = 65534
)

// RootCaps are the only capabilities of a box whose runtime separates moat's agent
// and init from the code (gVisor's): they run as the container's root with these,
// and init runs the code as BoxUID with none. Under gVisor's kernel, being not
// dumpable does not keep a process of the same user from opening another's fds
// through /proc/PID/fd; a different user does. So the code cannot read or write the
// stream to the host or init's pipes, nor signal either. SETUID and SETGID start the
// code as the box's user, KILL signals it (timeouts, interrupts, the end of the box),
// CHOWN, DAC_OVERRIDE and FOWNER let init place and serve the box user's files, and
// SETPCAP lets init empty the bounding set before it starts the code. None reaches
// the code: changing to a uid other than 0 drops them, the bounding set is empty, and
// no_new_privs holds.
var RootCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETPCAP"}

// AgentTasks is what the agent and the box's init (both Go) may use on top of
// Limits.Pids, in whatever counts the box's tasks (a pids cgroup, or an nproc limit
// that a gVisor kernel enforces). It keeps code that reaches its limit from starving
// moat's own processes first.
const AgentTasks = 32

// Runtime makes the containers of boxes: a Docker daemon (package box/docker) or
// gVisor's runsc (package box/gvisor).
type Runtime interface {
	// Name names the backend in errors: "docker", "gvisor".
	Name() string
	// Start makes and starts one box container for code in lang (a key of
	// box.Languages) bounded by lim (zero fields are box.DefaultLimits): its PID 1 is the agent, [AgentPath, MuxRole], as BoxUID,
	// with its stdin, stdout and stderr connected to the returned Container before
	// the agent runs. It has no network, a read-only root, and tmpfs TmpDir,
	// box.WorkspaceDir and MoatDir. On error nothing is left behind.
	Start(ctx context.Context, lang string, lim box.Limits) (Container, error)
	// Isolation lists the layers its boxes have, for the result's isolation (the
	// caller adds Landlock).
	Isolation() []string
	// AgentKillable reports whether the code can SIGKILL the agent, its box's PID 1.
	// The host's kernel drops a SIGKILL sent to a pid namespace's init from inside
	// it; gVisor's kernel delivers it. Where it cannot, an agent that died of
	// SIGKILL was killed from outside the box.
	AgentKillable() bool
}

// Container is one running box container, seen from the host.
type Container interface {
	// ID names the container in logs.
	ID() string
	// Stdin writes to the agent's stdin; Close half-closes it.
	Stdin() io.WriteCloser
	// Stdout and Stderr read the agent's stdout and stderr until io.EOF, or an
	// error once the stream broke or was closed. Both must be read concurrently.
	Stdout() io.Reader
	Stderr() io.Reader
	// CloseStream closes stdin, stdout and stderr: the agent reads the end of its
	// stdin and kills the box; the host's reads fail with io.ErrClosedPipe (or end).
	CloseStream()
	// Warnings are the runtime's warnings on making the container.
	Warnings() []string
	// Wait waits until the container is not running and returns how it ended; an
	// error means the runtime lost it (or ctx ended).
	Wait(ctx context.Context) (Exit, error)
	// Kill kills every process of the container. One that has exited is not an error.
	Kill(ctx context.Context) error
	// Remove kills what runs and removes the container and everything the runtime
	// made for it. One that is gone already is not an error.
	Remove(ctx context.Context) error
	// OOMKills counts the tasks the kernel's OOM killer killed in the container so
	// far, where the runtime can tell while it runs; else 0.
	OOMKills() int64
	// Usage is the CPU time and the peak memory of all the container's processes so
	// far, where the runtime can tell while it runs (its cgroup, read on the host);
	// ok is false otherwise, and once the container is gone.
	Usage() (cpu time.Duration, peak int64, ok bool)
}

// ExitKilled is a container's exit status when its PID 1 died of SIGKILL (the OOM
// killer's signal, and docker kill's).
const ExitKilled = 128 + 9

// Exit is how a container ended.
type Exit struct {
	Code      int
	OOMKilled bool // the kernel's OOM killer hit a process of the container
}

var (
	// errProtocol is wrapped by every violation of the box stream's protocol
	// (mux.go): it ends the box.
	errProtocol = errors.New("box stream protocol error")

	// errHostGone: the agent read the end of its stdin, the host's side of the
	// stream.
	errHostGone = errors.New("the host closed the stream")
)

package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// ConnectTimeout bounds Connect's ping when the caller's context has no earlier
// deadline: a daemon that accepts the connection but never answers is unreachable too.
const ConnectTimeout = 5 * time.Second

// Engine is a connection to one Docker daemon. It is safe for concurrent use.
type Engine struct {
	cli   *client.Client
	owner Owner
}

// Connect opens a client for the daemon at host ("" means DOCKER_HOST, or
// unix:///var/run/docker.sock when that is unset), pings it and negotiates the API
// version. An error wraps ErrDaemonUnreachable when no daemon answers; it says where
// moat looked and how to get a daemon. The caller must Close the Engine.
func Connect(ctx context.Context, host string) (*Engine, error) {
	opts := []client.Opt{client.FromEnv}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker backend: bad daemon address %q: %w", host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		daemon := cli.DaemonHost()
		_ = cli.Close()
		return nil, &unreachableError{host: daemon, err: err}
	}
	return &Engine{cli: cli, owner: CurrentOwner()}, nil
}

// unreachableError is Connect's error when the ping fails.
type unreachableError struct {
	host string
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("docker backend: cannot reach the Docker daemon at %s "+
		"(is dockerd running? install docker.io and start it: apt-get install docker.io, "+
		"then systemctl start docker, or run scripts/backends, which also starts dockerd): %v", e.host, e.err)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrDaemonUnreachable, e.err} }

// Close releases the client's connections.
func (e *Engine) Close() error { return e.cli.Close() }

// Host is the daemon's address, e.g. "unix:///var/run/docker.sock".
func (e *Engine) Host() string { return e.cli.DaemonHost() }

// APIVersion is the API version negotiated with the daemon, e.g. "1.41".
func (e *Engine) APIVersion() string { return e.cli.ClientVersion() }

// Version returns the daemon's version, e.g. "20.10.24+dfsg1".
func (e *Engine) Version(ctx context.Context) (string, error) {
	v, err := e.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return "", fmt.Errorf("docker version: %w", err)
	}
	return v.Version, nil
}

// Runtimes returns the names of the OCI runtimes the daemon has registered, sorted,
// e.g. ["io.containerd.runc.v2", "runc", "runsc"].
func (e *Engine) Runtimes(ctx context.Context) ([]string, error) {
	info, err := e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker info: %w", err)
	}
	names := make([]string, 0, len(info.Info.Runtimes))
	for name := range info.Info.Runtimes {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// ImageExists returns nil when the daemon has the image name. When it does not, the
// error wraps ErrImageNotFound and names the image and how to get one.
func (e *Engine) ImageExists(ctx context.Context, name string) error {
	_, err := e.cli.ImageInspect(ctx, name)
	if err == nil {
		return nil
	}
	if cerrdefs.IsNotFound(err) {
		return imageNotFound(name)
	}
	return fmt.Errorf("inspect image %s: %w", name, err)
}

func imageNotFound(name string) error {
	return fmt.Errorf("%w: image %s not found: build it with scripts/backends, "+
		"or docker pull python:3.12-slim where a registry is reachable", ErrImageNotFound, name)
}

// Created is a container that Create made.
type Created struct {
	ID string
	// Warnings are the daemon's, e.g. a limit the kernel cannot enforce ("PIDs limit
	// discarded"). The caller decides whether the box may still run: moat never runs
	// one silently weaker than configured.
	Warnings []string
}

// Create creates a box container from p (see HardenedConfig) without starting it.
// When p.Owner is zero the Engine's process is the owner.
func (e *Engine) Create(ctx context.Context, p ContainerParams) (Created, error) {
	if p.Image == "" {
		return Created{}, errors.New("create container: no image")
	}
	if p.AgentHostPath != "" && !filepath.IsAbs(p.AgentHostPath) {
		return Created{}, fmt.Errorf("create container: agent path %q is not absolute", p.AgentHostPath)
	}
	if p.Owner == (Owner{}) {
		p.Owner = e.owner
	}
	cfg, hostCfg := HardenedConfig(p)
	res, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     cfg,
		HostConfig: hostCfg,
		Name:       p.Name,
	})
	switch {
	case err == nil:
		return Created{ID: res.ID, Warnings: res.Warnings}, nil
	case cerrdefs.IsNotFound(err) && strings.Contains(err.Error(), "image"):
		return Created{}, fmt.Errorf("create container: %w", imageNotFound(p.Image))
	case p.Runtime != "" && strings.Contains(strings.ToLower(err.Error()), "unknown runtime"):
		return Created{}, fmt.Errorf("create container: runtime %q is not registered with the daemon "+
			"(add it under \"runtimes\" in /etc/docker/daemon.json; scripts/backends registers runsc): %w", p.Runtime, err)
	default:
		return Created{}, e.lost(ctx, fmt.Errorf("create container from %s: %w", p.Image, err))
	}
}

// Start starts a created container.
func (e *Engine) Start(ctx context.Context, id string) error {
	if _, err := e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return e.lost(ctx, fmt.Errorf("start container %s: %w", short(id), err))
	}
	return nil
}

// Stream is the attached stdio of a container.
//
// The caller must read Stdout and Stderr concurrently until EOF (or discard one with
// io.Copy(io.Discard, ...)): both come over one connection, and a stream nobody reads
// stalls the other. Close the Stream when done.
type Stream struct {
	// Stdin writes to the container's stdin (when it was created with Stdin). Closing
	// it half-closes the connection: the container reads EOF.
	Stdin io.WriteCloser
	// Stdout and Stderr end with io.EOF when the container's streams end, or with the
	// error that broke the connection.
	Stdout, Stderr io.Reader

	resp       client.HijackedResponse
	outR, errR *io.PipeReader
	done       chan struct{}
	err        error
}

// Attach connects to a container's stdin, stdout and stderr. Attach before Start, so
// that no output is lost.
func (e *Engine) Attach(ctx context.Context, id string) (*Stream, error) {
	res, err := e.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, e.lost(ctx, fmt.Errorf("attach container %s: %w", short(id), err))
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	s := &Stream{
		Stdin:  stdinWriter{&res.HijackedResponse},
		Stdout: outR,
		Stderr: errR,
		resp:   res.HijackedResponse,
		outR:   outR,
		errR:   errR,
		done:   make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		// Without a TTY the daemon multiplexes both streams with 8-byte headers.
		_, err := stdcopy.StdCopy(outW, errW, res.Reader)
		s.err = err
		outW.CloseWithError(err) // nil: readers see io.EOF
		errW.CloseWithError(err)
	}()
	return s, nil
}

// Close closes the connection and the readers (a read then fails with
// io.ErrClosedPipe), and waits for the demultiplexer to stop.
func (s *Stream) Close() error {
	s.resp.Close()
	s.outR.Close()
	s.errR.Close()
	<-s.done
	return nil
}

// Done is closed when both output streams have ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err is the error that ended the output streams, nil at a clean end. Valid once Done
// is closed.
func (s *Stream) Err() error { return s.err }

type stdinWriter struct{ resp *client.HijackedResponse }

func (w stdinWriter) Write(p []byte) (int, error) { return w.resp.Conn.Write(p) }
func (w stdinWriter) Close() error                { return w.resp.CloseWrite() }

// Exit is how a container ended.
type Exit struct {
	Code      int
	OOMKilled bool   // the kernel's OOM killer hit a process of the container
	Error     string // the daemon's error for the container, if any
}

// Wait waits until the container is not running, then reads its exit state. Call it
// after Start: a container that was created but never started counts as not running.
// A context that ends, or a daemon that goes away, ends Wait with an error.
func (e *Engine) Wait(ctx context.Context, id string) (Exit, error) {
	w := e.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
	case err := <-w.Error:
		return Exit{}, e.lost(ctx, fmt.Errorf("wait for container %s: %w", short(id), err))
	}
	res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return Exit{}, fmt.Errorf("inspect container %s: %w", short(id), err)
	}
	st := res.Container.State
	if st == nil {
		return Exit{}, fmt.Errorf("inspect container %s: no state", short(id))
	}
	return Exit{Code: st.ExitCode, OOMKilled: st.OOMKilled, Error: st.Error}, nil
}

// lostPingTimeout bounds lost's ping.
const lostPingTimeout = 2 * time.Second

// lost says so in err when the daemon no longer answers a ping: a call that broke
// because dockerd died ends in a bare "unexpected EOF" or "connection reset by peer"
// otherwise. The error then wraps ErrDaemonUnreachable. When ctx ended, the caller
// gave up: err is returned as is.
func (e *Engine) lost(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, lostPingTimeout)
	defer cancel()
	if _, perr := e.cli.Ping(pctx, client.PingOptions{}); perr != nil {
		return fmt.Errorf("%w: the Docker daemon at %s stopped answering (%w)", err, e.cli.DaemonHost(), ErrDaemonUnreachable)
	}
	return err
}

// State is what the daemon says of a container while it may still run.
type State struct {
	// PID is the host pid of the container's first process, as the daemon's pid
	// namespace sees it; 0 when it does not run. Only a daemon on this host, in our
	// pid namespace, gives a pid that means anything here.
	PID int
	// OOMKilled is the daemon's mark that the OOM killer hit the container. It
	// stays set. dockerd 20.10 sets it only when the container exits (it emits an
	// "oom" event at once); dockerd 23 and later as soon as containerd reports the
	// OOM.
	OOMKilled bool
}

// State inspects a container.
func (e *Engine) State(ctx context.Context, id string) (State, error) {
	res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return State{}, fmt.Errorf("inspect container %s: %w", short(id), err)
	}
	st := res.Container.State
	if st == nil {
		return State{}, nil
	}
	return State{PID: st.Pid, OOMKilled: st.OOMKilled}, nil
}

// Kill sends SIGKILL to the container's processes. A container that is no longer
// running, or no longer exists, is not an error: Kill only makes sure nothing runs.
func (e *Engine) Kill(ctx context.Context, id string) error {
	_, err := e.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
	if err == nil || cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		return nil
	}
	return fmt.Errorf("kill container %s: %w", short(id), err)
}

// Remove removes the container and its anonymous volumes; force kills it first if it
// runs. A container that no longer exists is not an error.
func (e *Engine) Remove(ctx context.Context, id string, force bool) error {
	_, err := e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: force, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("remove container %s: %w", short(id), err)
}

// Sweep removes every moat container on the daemon whose owner was a process on this
// host that no longer exists: the leftovers of a moat that crashed or was killed.
// Containers of live owners and of other hosts (a daemon shared through DOCKER_HOST)
// are left alone. It returns how many it removed; an error for one container does not
// stop the others.
func (e *Engine) Sweep(ctx context.Context) (int, error) {
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelBox+"=1"),
	})
	if err != nil {
		return 0, fmt.Errorf("list moat containers: %w", err)
	}
	removed := 0
	var errs []error
	for _, c := range list.Items {
		pid, host, ok := parseOwner(c.Labels[LabelOwner])
		if !ok || host != e.owner.Host {
			continue
		}
		start, _ := strconv.ParseUint(c.Labels[LabelOwnerStart], 10, 64)
		if !processGone(pid, start) {
			continue
		}
		if err := e.Remove(ctx, c.ID, true); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// short shortens a container ID for messages.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

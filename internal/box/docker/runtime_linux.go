package docker

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

// Runtime makes each box a container of Engine's daemon, from Image with
// HardenedConfig. It implements container.Runtime.
type Runtime struct {
	Engine *Engine
	// Image holds the interpreters, e.g. "moat-test-python:bookworm"; Images, by
	// language, replace it for that language's boxes.
	Image  string
	Images map[string]string
	// OCIRuntime is the daemon's OCI runtime; "" is its default (runc), "runsc" gVisor.
	OCIRuntime string
	// oom follows the daemon's OOM events of the boxes (NewBackend starts it); nil
	// leaves the kernel's counter and the daemon's mark.
	oom *oomWatch
	// AgentPath is the host path of the moat binary (os.Executable, symlinks
	// resolved), bind-mounted read-only at container.AgentPath. It must be static
	// (CGO_ENABLED=0): it runs on the image's libc, or none.
	AgentPath string
}

// Name implements container.Runtime.
func (r *Runtime) Name() string { return "docker" }

// Close stops following the daemon's events and closes the connection to it.
func (r *Runtime) Close() error {
	if r.oom != nil {
		r.oom.close()
	}
	return r.Engine.Close()
}

// Start implements container.Runtime: create, attach (before start, so that no
// output is missed), start. A container that fails part way is removed.
func (r *Runtime) Start(ctx context.Context, lang string, lim box.Limits) (container.Container, error) {
	c, err := r.Engine.Create(ctx, ContainerParams{
		Image:         r.ImageFor(lang),
		Runtime:       r.OCIRuntime,
		Limits:        lim,
		AgentHostPath: r.AgentPath,
		Entrypoint:    []string{container.AgentPath, container.MuxRole},
		Stdin:         true,
	})
	if err != nil {
		return nil, err
	}
	bc := &boxContainer{e: r.Engine, id: c.ID, warnings: c.Warnings, oom: r.oom}
	if r.oom != nil {
		r.oom.track(c.ID)
	}
	fail := func(err error) (container.Container, error) {
		if bc.stream != nil {
			bc.stream.Close()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		_ = bc.Remove(rctx)
		return nil, err
	}
	if bc.stream, err = r.Engine.Attach(ctx, c.ID); err != nil {
		return fail(err)
	}
	if err := r.Engine.Start(ctx, c.ID); err != nil {
		return fail(err)
	}
	return bc, nil
}

// removeTimeout bounds removing a container that failed to start; inspectTimeout
// asking the daemon about a running one.
const (
	removeTimeout  = 30 * time.Second
	inspectTimeout = 5 * time.Second
)

// ImageFor returns the image of lang's boxes: Images[lang], else Image.
func (r *Runtime) ImageFor(lang string) string {
	if img := r.Images[lang]; img != "" {
		return img
	}
	return r.Image
}

// Isolation implements container.Runtime.
func (r *Runtime) Isolation() []string {
	rt := r.OCIRuntime
	if rt == "" {
		rt = "runc"
	}
	iso := []string{"docker", "runtime_" + rt}
	if r.OCIRuntime == RuntimeGVisor {
		iso = append(iso, "gvisor_kernel")
	}
	return append(iso,
		"network_none", "pid_namespace", "mount_namespace", "ipc_namespace", "uts_namespace", "cgroup_namespace",
		"readonly_root", "uid_65534", "no_capabilities", "no_new_privs", "seccomp_docker_default", "seccomp", "rlimits",
		"cgroup_memory", "cgroup_pids", "cgroup_cpu",
	)
}

// AgentKillable implements container.Runtime: under runsc gVisor's kernel delivers a
// SIGKILL to the container's init (the code cannot send one: the agent is another
// user there, container.RootCaps).
func (r *Runtime) AgentKillable() bool { return r.OCIRuntime == RuntimeGVisor }

// boxContainer is one box's container on the daemon.
type boxContainer struct {
	e        *Engine
	id       string
	warnings []string
	stream   *Stream
	oom      *oomWatch // nil: none

	oomMu     sync.Mutex
	oomLooked bool   // the counter was looked for (once the container ran)
	oomFile   string // the container's OOM-kill counter, "" when not readable here
	oomSeen   int64  // the highest count OOMKills returned

	usageMu     sync.Mutex
	usageLooked bool   // the files were looked for (once the container ran)
	cpuFile     string // the container's CPU time, "" when not readable here
	peakFile    string // its peak memory
}

func (c *boxContainer) ID() string            { return short(c.id) }
func (c *boxContainer) Stdin() io.WriteCloser { return c.stream.Stdin }
func (c *boxContainer) Stdout() io.Reader     { return c.stream.Stdout }
func (c *boxContainer) Stderr() io.Reader     { return c.stream.Stderr }
func (c *boxContainer) CloseStream()          { c.stream.Close() }

// Warnings are the daemon's, prefixed "docker: ".
func (c *boxContainer) Warnings() []string {
	out := make([]string, 0, len(c.warnings))
	for _, w := range c.warnings {
		out = append(out, "docker: "+w)
	}
	return out
}

// Wait implements container.Container. A container whose PID 1 died of SIGKILL was
// OOM-killed when the daemon marked it so or sent an "oom" event of it (waited for
// until its "die" event, which follows, at most dieWait).
func (c *boxContainer) Wait(ctx context.Context) (container.Exit, error) {
	ex, err := c.e.Wait(ctx, c.id)
	if err == nil && ex.Code == container.ExitKilled && !ex.OOMKilled && c.oom != nil {
		c.oom.awaitDie(c.id, dieWait)
		ex.OOMKilled = c.oom.count(c.id) > 0
	}
	return container.Exit{Code: ex.Code, OOMKilled: ex.OOMKilled}, err
}

// dieWait bounds how long Wait waits for the daemon's "die" event of a container
// that ended badly, and with it for the "oom" events before it.
const dieWait = 2 * time.Second

func (c *boxContainer) Kill(ctx context.Context) error { return c.e.Kill(ctx, c.id) }

func (c *boxContainer) Remove(ctx context.Context) error {
	err := c.e.Remove(ctx, c.id, true)
	if err == nil && c.oom != nil {
		c.oom.forget(c.id)
	}
	return err
}

// OOMKills counts the OOM kills in the container's memory cgroup, read from the
// kernel's counter (oom_kill) like a native box's: it rises with every process the
// OOM killer takes, so that each session call can tell its own. The cgroup is found
// through the container's host pid, once; it must be this host's (a local daemon)
// and its path must name the container.
//
// Otherwise it falls back to the daemon's OOMKilled mark, counted as 1: a mark
// that stays set, so only the first OOM of a session can be told (later ones look
// like a plain SIGKILL: status killed). And dockerd 20.10 (Debian bookworm's) sets
// the mark only when the container exits, though it emits an "oom" event at once;
// dockerd 23 and later set it at the event. A failure to ask counts as no OOM. The
// count never goes down: once the container is gone, the last one read stands.
//
// Under runsc the host's OOM killer takes the sandbox (gVisor's kernel is charged
// for the code's memory), so the whole box ends, marked OOMKilled.
func (c *boxContainer) OOMKills() int64 {
	n := c.kernelOOMKills()
	if c.oom != nil {
		n = max(n, c.oom.count(c.id))
	}
	return n
}

// Usage implements container.Container: the container's cgroup counters, found as
// OOMKills finds its own through the container's host pid (once; the cgroup must be
// this host's and name the container). Not ok when they cannot be read here, or
// once the container is gone.
func (c *boxContainer) Usage() (time.Duration, int64, bool) {
	c.usageMu.Lock()
	defer c.usageMu.Unlock()
	if !c.usageLooked {
		c.usageLooked = true
		ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
		defer cancel()
		if st, err := c.e.State(ctx, c.id); err == nil && st.PID > 0 {
			c.cpuFile, c.peakFile, _ = cgroup.UsageFiles(st.PID, c.id)
		}
	}
	if c.cpuFile == "" {
		return 0, 0, false
	}
	cpu, err := cgroup.ReadCPU(c.cpuFile)
	if err != nil || cpu < 0 {
		return 0, 0, false
	}
	peak, err := cgroup.ReadPeak(c.peakFile)
	if err != nil || peak < 0 {
		peak = 0
	}
	return cpu, peak, true
}

// kernelOOMKills is OOMKills from the kernel's counter, else the daemon's mark.
func (c *boxContainer) kernelOOMKills() int64 {
	c.oomMu.Lock()
	defer c.oomMu.Unlock()
	if c.oomFile != "" {
		if v, err := cgroup.ReadOOMKills(c.oomFile); err == nil && v >= 0 {
			c.oomSeen = max(c.oomSeen, v)
			return c.oomSeen
		}
		c.oomFile = "" // the container is gone, and its cgroup with it
	}
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	st, err := c.e.State(ctx, c.id)
	if err != nil {
		return c.oomSeen
	}
	if !c.oomLooked && st.PID > 0 {
		c.oomLooked = true
		if file, err := cgroup.OOMKillFile(st.PID, c.id); err == nil {
			if v, err := cgroup.ReadOOMKills(file); err == nil && v >= 0 {
				c.oomFile, c.oomSeen = file, max(c.oomSeen, v)
				return c.oomSeen
			}
		}
	}
	if st.OOMKilled {
		c.oomSeen = max(c.oomSeen, 1)
	}
	return c.oomSeen
}

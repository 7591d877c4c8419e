package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Box is one box's cgroup: a directory in every v1 hierarchy used, or
// one v2 directory. Its methods are safe for concurrent use. The caller
// must call Destroy, which also closes the descriptor returned by FD.
type Box struct {
	name    string
	version Version
	// dirs are the box's distinct directories in creation order.
	dirs []string
	// ctl maps each v1 controller to its directory; nil on v2.
	ctl         map[string]string
	controllers []string
	ops         fsOps
	lim         Limits // as applied: a spare is handed out for the same limits
	// oomBase is the OOM kill count the box's directories had when it got them
	// (a spare's earlier boxes'); Stats counts from it.
	oomBase int64

	mu        sync.Mutex
	fd        int       // v2 O_PATH descriptor of dirs[0], or -1
	counters  *counters // open counter files, from the first Stats on
	tasks     []int     // v1 tasks files open for writing, from the first TaskFDs on
	destroyed bool
	froze     bool // the freezer was used: not kept as a spare
}

// New creates the cgroup name (e.g. "box-<ownerpid>-<random>"; see
// Sweep for why the owner pid belongs in it) below the "moat" parent
// directory under our own cgroup, and applies lim. The name must not
// exist yet. On any error New removes what it created. The caller must
// call Destroy (or Recycle). On cgroup v1 New may instead hand out a spare:
// the directories of an earlier box with the same limits that Recycle kept,
// renamed name (see Recycle).
func New(name string, lim Limits) (*Box, error) {
	h, err := current()
	if err != nil {
		return nil, err
	}
	return h.newBox(name, lim)
}

func (h *host) newBox(name string, lim Limits) (*Box, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := lim.validate(); err != nil {
		return nil, err
	}
	if b := h.takeSpare(lim, name); b != nil {
		return b, nil
	}
	for attempt := 0; ; attempt++ {
		enabled, err := h.prepare()
		if err != nil {
			return nil, err
		}
		b := h.layout(name)
		err = b.create(lim, enabled)
		if err == nil {
			return b, nil
		}
		// The moat parent was removed behind our back: recreate it once.
		if attempt == 0 && errors.Is(err, fs.ErrNotExist) && !b.parentsExist() {
			h.unprepare()
			continue
		}
		return nil, err
	}
}

// layout returns the (not yet created) box name on h.
func (h *host) layout(name string) *Box {
	b := &Box{name: name, version: h.version, ops: h.ops, fd: -1}
	if h.version == V2 {
		b.dirs = []string{h.base + "/" + parentName + "/" + name}
		return b
	}
	b.ctl = make(map[string]string, len(h.v1))
	for _, c := range v1Controllers {
		base := h.v1[c]
		if base == "" {
			continue
		}
		d := base + "/" + parentName + "/" + name
		b.ctl[c] = d
		if !slices.Contains(b.dirs, d) {
			b.dirs = append(b.dirs, d)
		}
	}
	return b
}

// parentsExist reports whether the moat parent of every box directory
// exists.
func (b *Box) parentsExist() bool {
	for _, d := range b.dirs {
		if !isDir(path.Dir(d)) {
			return false
		}
	}
	return true
}

// create makes b's directories, applies lim and, on v2, opens the
// descriptor for CLONE_INTO_CGROUP. enabled lists the v2 controllers
// the parent enables. On error it removes the directories it made.
func (b *Box) create(lim Limits, enabled []string) (err error) {
	var made []string
	defer func() {
		if err == nil {
			return
		}
		if b.fd >= 0 {
			unix.Close(b.fd)
			b.fd = -1
		}
		for _, d := range slices.Backward(made) {
			// Nothing ran in the box yet, so a plain rmdir succeeds;
			// its error would only hide the original one.
			_ = b.ops.removeDir(d)
		}
	}()
	for _, d := range b.dirs {
		if err := b.ops.makeDir(d); err != nil {
			return err
		}
		made = append(made, d)
	}
	if b.version == V2 {
		err = b.apply2(lim, enabled)
	} else {
		err = b.apply1(lim)
	}
	if err != nil {
		return err
	}
	slices.Sort(b.controllers)
	b.lim = lim
	if b.version == V2 {
		fd, err := unix.Open(b.dirs[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", b.dirs[0], err)
		}
		b.fd = fd
	}
	return nil
}

// apply1 writes the v1 limit files.
func (b *Box) apply1(lim Limits) error {
	if lim.MemoryBytes > 0 {
		d := b.ctl["memory"]
		v := strconv.FormatInt(lim.MemoryBytes, 10)
		if err := b.ops.writeFile(d+"/memory.limit_in_bytes", v); err != nil {
			return err
		}
		// memsw (memory+swap) must be written after the memory limit:
		// the kernel keeps memsw >= limit and refuses the reverse order.
		// The file exists only with swap accounting enabled.
		if err := b.ops.writeFile(d+"/memory.memsw.limit_in_bytes", v); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		b.controllers = append(b.controllers, "memory")
	}
	if lim.Pids > 0 {
		if err := b.ops.writeFile(b.ctl["pids"]+"/pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
		b.controllers = append(b.controllers, "pids")
	}
	if d := b.ctl["cpu"]; lim.CPUs > 0 && d != "" {
		if err := b.ops.writeFile(d+"/cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
			return err
		}
		if err := b.ops.writeFile(d+"/cpu.cfs_quota_us", strconv.FormatInt(lim.quota(), 10)); err != nil {
			return err
		}
		b.controllers = append(b.controllers, "cpu")
	}
	return nil
}

// apply2 writes the v2 limit files.
func (b *Box) apply2(lim Limits, enabled []string) error {
	d := b.dirs[0]
	if lim.MemoryBytes > 0 {
		if err := b.ops.writeFile(d+"/memory.max", strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
			return err
		}
		// memory.swap.max exists only with swap accounting enabled.
		if err := b.ops.writeFile(d+"/memory.swap.max", "0"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		b.controllers = append(b.controllers, "memory")
	}
	if lim.Pids > 0 {
		if err := b.ops.writeFile(d+"/pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
		b.controllers = append(b.controllers, "pids")
	}
	if lim.CPUs > 0 && slices.Contains(enabled, "cpu") {
		v := strconv.FormatInt(lim.quota(), 10) + " " + strconv.Itoa(cpuPeriod)
		if err := b.ops.writeFile(d+"/cpu.max", v); err != nil {
			return err
		}
		b.controllers = append(b.controllers, "cpu")
	}
	return nil
}

// Version returns V1 or V2.
func (b *Box) Version() Version { return b.version }

// Controllers returns, sorted, the controllers that actually limit the
// box, e.g. ["cpu" "memory" "pids"]. A zero limit, or a CPU limit on a
// host without a usable cpu controller, leaves its controller out;
// callers that require a limit must check for it here.
func (b *Box) Controllers() []string { return slices.Clone(b.controllers) }

// AddProc moves the process pid (all its threads) into the box by
// writing it to cgroup.procs in every directory of the box. If a write
// fails the process may be in some hierarchies only; Kill and Destroy
// still find it there. Prefer starting the process directly in the box
// with FD on v2.
func (b *Box) AddProc(pid int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return fmt.Errorf("add process %d to %s: %w", pid, b.name, ErrDestroyed)
	}
	s := strconv.Itoa(pid)
	for _, d := range b.dirs {
		if err := b.ops.writeFile(d+"/cgroup.procs", s); err != nil {
			return err
		}
	}
	return nil
}

// EnterThread moves the calling thread, and only it, into the box on v1, and
// returns leave, which moves it back to the cgroup the box was made under (moat's
// own). A process the thread forks in between is born in the box, with no window in
// which it runs outside: v1's answer to v2's CLONE_INTO_CGROUP (see FD).
//
// It is also what makes a v1 box quick to start. AddProc moves another process,
// for which the kernel takes its global threadgroup lock, whose write side waits for
// an RCU grace period: about 9 ms per box on a 250 Hz kernel, however little else
// the host does. A thread that moves itself (it writes "0" to a hierarchy's tasks
// file) needs no such lock.
//
// The caller must have locked its goroutine to its thread (runtime.LockOSThread)
// before EnterThread, and keep it locked until leave returns nil. If EnterThread or
// leave fails, the thread may be left in the box: the caller must not unlock it, so
// that Go ends the thread with its goroutine. On v2, and after Destroy, EnterThread
// fails and moves nothing.
func (b *Box) EnterThread() (leave func() error, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.liveV1("enter"); err != nil {
		return nil, err
	}
	leave = func() error {
		for _, d := range b.dirs {
			// d is <moat's own cgroup>/moat/<name> (layout).
			if err := b.ops.writeFile(path.Dir(path.Dir(d))+"/tasks", "0"); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range b.dirs {
		if err := b.ops.writeFile(d+"/tasks", "0"); err != nil {
			if lerr := leave(); lerr != nil {
				return nil, errors.Join(err, lerr)
			}
			return nil, err
		}
	}
	return leave, nil
}

// TaskFDs returns, on v1, descriptors of the tasks file of every directory of the
// box, open for writing, for a process of ours that moves itself in: writing "0" to
// each moves the writing thread (the whole process, if it has one thread) without
// AddProc's grace period (see EnterThread). The descriptors carry our credentials:
// whoever holds them can move any process into the box, so they must go only to code
// we trust, which closes them before anything untrusted runs. The Box owns them: it
// opens them at the first call, keeps them through a spare's renames (so that a kept
// box's next holder opens none) and closes them in Destroy; the caller passes them on
// (SCM_RIGHTS gives the receiver its own) and never closes them. On v2, and after
// Destroy, TaskFDs fails.
func (b *Box) TaskFDs() ([]int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.liveV1("open the tasks of"); err != nil {
		return nil, err
	}
	if b.tasks != nil {
		return slices.Clone(b.tasks), nil
	}
	fds := make([]int, 0, len(b.dirs))
	for _, d := range b.dirs {
		fd, err := openRetry(d+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("open %s/tasks: %w", d, err)
		}
		fds = append(fds, fd)
	}
	b.tasks = fds
	return slices.Clone(fds), nil
}

// liveV1 says why what (EnterThread, TaskFDs) cannot be done with b, with b.mu
// held: b is destroyed, or not v1, where a process of ours moves itself in through
// the tasks files; on v2 a child is started in the box with FD.
func (b *Box) liveV1(what string) error {
	if b.destroyed {
		return fmt.Errorf("%s %s: %w", what, b.name, ErrDestroyed)
	}
	if b.version != V1 {
		return fmt.Errorf("%s %s: v1 only (on v2, start the child with FD): %w", what, b.name, errors.ErrUnsupported)
	}
	return nil
}

// FD returns, on v2, an O_PATH|O_DIRECTORY descriptor of the box's
// directory for syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
// (CLONE_INTO_CGROUP, Linux 5.7), which starts a child inside the box
// with no window in which it runs unconfined. It returns false on v1 and
// after Destroy. The Box owns the descriptor: do not close it, and do
// not use it after Destroy.
func (b *Box) FD() (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fd, b.fd >= 0
}

// Stats reads the box's counters; see [Stats] for which are -1 when the
// kernel lacks them. It works until Destroy, including after Kill.
func (b *Box) Stats() (Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return unknownStats, fmt.Errorf("stats of %s: %w", b.name, ErrDestroyed)
	}
	if err := b.openCounters(); err != nil {
		return unknownStats, err
	}
	s, err := b.counters.stats()
	if err == nil && s.OOMKills >= 0 {
		s.OOMKills = max(s.OOMKills-b.oomBase, 0)
	}
	return s, err
}

// readStat reads key from a flat-keyed file, or the whole file as one
// integer when key is empty. A missing file or key yields -1.
func readStat(path, key string) (int64, error) {
	var v int64
	var err error
	ok := true
	if key == "" {
		v, err = readInt(path)
	} else {
		v, ok, err = readKey(path, key)
	}
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !ok) {
		return -1, nil
	}
	return v, err
}

// Dirs returns the box's cgroup directories (one on v2, one per hierarchy on v1).
func (b *Box) Dirs() []string { return slices.Clone(b.dirs) }

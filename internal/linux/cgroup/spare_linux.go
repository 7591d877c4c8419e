package cgroup

import (
	"errors"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"
)

// Spares: on cgroup v1 a box's cgroup is a directory in each of up to five
// hierarchies, and making and removing them (mkdir, the limit files, rmdir, and
// the kernel's freeing of each controller's state afterwards) was about a quarter
// of the server's CPU per pooled execution. Recycle keeps an emptied box's
// directories, reset, for the next box with the same limits instead. A kept
// box's directories are renamed SparePrefix+its name, so that what counts a
// server's boxes does not count them, and back to the next box's name when New
// hands them out (renaming a v1 cgroup is cheap: no controller state changes).
const (
	// maxSpares bounds the directories kept: a server's boxes end and start at
	// about the same rate, so a few cover the gap.
	maxSpares = 8
	// maxSpareResidue is the most memory a box's cgroup may still hold once its
	// processes are gone (kernel objects freed later; 120-500 KB were measured)
	// for it to be kept: the next box starts charged with it.
	maxSpareResidue = 1 << 20
)

// Recycle ends b's use as Destroy does, but on cgroup v1 keeps its directories,
// reset and renamed (SparePrefix), as a spare that New hands to a later box with
// the same limits, under that box's name: when b holds no process (pids.current
// is 0), used no freezer and holds at most maxSpareResidue of memory, and fewer
// than maxSpares are kept. Reset means its
// CPU and peak memory counters start again (cpuacct.usage and
// memory.max_usage_in_bytes, written 0: the peak restarts from what the box still
// holds) and Stats counts OOM kills from the count it had. Otherwise, and on v2
// (where memory.peak cannot be reset before Linux 6.12), it destroys b.
//
// After Recycle, b is destroyed for its holder: its methods act on nothing
// (Kill and Destroy do nothing, Stats fails), whoever gets the directories next.
// DestroySpares removes the kept ones; a process that ends without it leaves
// them to the next Sweep, as it would leave its boxes.
func (b *Box) Recycle() error {
	h, err := current()
	if err != nil {
		return b.Destroy()
	}
	spare := b.spare()
	if spare == nil {
		return b.Destroy()
	}
	if !h.keepSpare(spare) {
		return spare.Destroy()
	}
	return nil
}

// spare resets b's directories for another box, renames them and returns a new
// Box for them, marking b destroyed; nil when they cannot be kept (b is then as
// it was but for counters reset, where its directories are now: the caller
// destroys it).
func (b *Box) spare() *Box {
	b.mu.Lock()
	defer b.mu.Unlock()
	mem, pids := b.ctl["memory"], b.ctl["pids"]
	if b.destroyed || b.version != V1 || b.froze || mem == "" || pids == "" {
		return nil
	}
	if n, err := readInt(pids + "/pids.current"); err != nil || n != 0 {
		return nil
	}
	if n, err := readInt(mem + "/memory.usage_in_bytes"); err != nil || n > maxSpareResidue {
		return nil
	}
	// Through the counter files, which go with the directories to the next box.
	if err := b.openCounters(); err != nil {
		return nil
	}
	oom, err := b.counters.oom.read()
	if err != nil {
		return nil
	}
	resets := []string{mem + "/memory.max_usage_in_bytes", mem + "/memory.memsw.max_usage_in_bytes"}
	if d := b.ctl["cpuacct"]; d != "" {
		resets = append(resets, d+"/cpuacct.usage")
	}
	for _, f := range resets {
		if err := b.ops.writeFile(f, "0"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	name := SparePrefix + b.name
	dirs, ctl, err := renameDirs(b.dirs, b.ctl, name)
	if err != nil {
		b.dirs, b.ctl = dirs, ctl // where they are now, for Destroy
		return nil
	}
	b.destroyed = true
	// The counter and tasks files go with the directories (a descriptor follows a
	// rename).
	c, tasks := b.counters, b.tasks
	b.counters, b.tasks = nil, nil
	return &Box{name: name, version: b.version, dirs: dirs, ctl: ctl, controllers: b.controllers,
		ops: b.ops, lim: b.lim, oomBase: max(oom, 0), fd: -1, counters: c, tasks: tasks}
}

// renameDirs renames each of dirs to name in its own parent and returns the
// directories and the controller map as they are after it: when a rename
// fails, those before it are renamed and the rest are not.
func renameDirs(dirs []string, ctl map[string]string, name string) ([]string, map[string]string, error) {
	moved := make(map[string]string, len(dirs))
	out := make([]string, len(dirs))
	var err error
	for i, d := range dirs {
		out[i] = d
		if err == nil {
			nd := path.Join(path.Dir(d), name)
			if err = unix.Rename(d, nd); err == nil {
				out[i], moved[d] = nd, nd
			}
		}
	}
	newCtl := make(map[string]string, len(ctl))
	for c, d := range ctl {
		if nd, ok := moved[d]; ok {
			d = nd
		}
		newCtl[c] = d
	}
	return out, newCtl, err
}

// keepSpare adds b to the spares unless maxSpares are kept.
func (h *host) keepSpare(b *Box) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nspares >= maxSpares {
		return false
	}
	if h.spares == nil {
		h.spares = map[Limits][]*Box{}
	}
	h.spares[b.lim] = append(h.spares[b.lim], b)
	h.nspares++
	return true
}

// takeSpare returns a kept box with limits lim, its directories renamed name,
// or nil. One whose directories cannot be renamed (removed behind our back) is
// destroyed.
func (h *host) takeSpare(lim Limits, name string) *Box {
	for {
		h.mu.Lock()
		list := h.spares[lim]
		if len(list) == 0 {
			h.mu.Unlock()
			return nil
		}
		b := list[len(list)-1]
		h.spares[lim] = list[:len(list)-1]
		h.nspares--
		h.mu.Unlock()
		dirs, ctl, err := renameDirs(b.dirs, b.ctl, name)
		b.dirs, b.ctl = dirs, ctl
		if err == nil {
			b.name = name
			return b
		}
		_ = b.Destroy() // what is left of it
	}
}

// DestroySpares removes every spare Recycle kept; a server calls it as it ends.
func DestroySpares() error {
	h, err := current()
	if err != nil {
		return nil
	}
	h.mu.Lock()
	var all []*Box
	for _, list := range h.spares {
		all = append(all, list...)
	}
	h.spares, h.nspares = nil, 0
	h.mu.Unlock()
	var errs []error
	for _, b := range all {
		errs = append(errs, b.Destroy())
	}
	return errors.Join(errs...)
}

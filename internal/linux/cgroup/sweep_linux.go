package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Sweep removes leftover boxes of crashed earlier runs: every directory
// under the moat parent named "box-<pid>-..." (or "spare-box-<pid>-...",
// a kept box: Recycle) whose <pid> is not a
// running process in our pid namespace. It kills what still runs there
// first (a crash can leave untrusted processes behind) and removes the
// box in every hierarchy it is found in, so half-created v1 boxes go
// too. Boxes of live owners, including ours, and other names are left
// alone; a recycled owner pid only delays a sweep. It returns how many
// boxes it removed; failures are joined into the error and do not stop
// the sweep. Sweep does not create the moat parent.
func Sweep() (int, error) {
	h, err := current()
	if err != nil {
		return 0, err
	}
	return h.sweep()
}

func (h *host) sweep() (int, error) {
	// found maps each stale box name to the directories it has.
	found := map[string][]string{}
	var order []string
	var bases []string
	if h.version == V2 {
		bases = []string{h.base}
	} else {
		bases = h.v1Bases()
	}
	var errs []error
	for _, base := range bases {
		parent := base + "/" + parentName
		entries, err := os.ReadDir(parent)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !OwnerGone(e.Name()) {
				continue
			}
			if _, ok := found[e.Name()]; !ok {
				order = append(order, e.Name())
			}
			found[e.Name()] = append(found[e.Name()], parent+"/"+e.Name())
		}
	}
	removed := 0
	for _, name := range order {
		b := h.layout(name)
		b.dirs = found[name]
		for c, d := range b.ctl {
			if !slices.Contains(b.dirs, d) {
				delete(b.ctl, c)
			}
		}
		if err := b.Destroy(); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// Remove kills what runs in the box called name, if it exists, and removes it in
// every hierarchy it is found in (a half-created v1 box too); a box that does not
// exist is not an error. It is Sweep for one box whose name the caller knows, such as
// a gVisor sandbox of a dead owner, without touching any other box.
func Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	h, err := current()
	if err != nil {
		return err
	}
	b := h.layout(name)
	var dirs []string
	for _, d := range b.dirs {
		if isDir(d) {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	for c, d := range b.ctl {
		if !slices.Contains(dirs, d) {
			delete(b.ctl, c)
		}
	}
	b.dirs = dirs
	return b.Destroy()
}

// OwnerGone reports whether name is "box-<pid>-<suffix>" (or a kept box's,
// SparePrefix and that) and no process <pid> exists. A zombie or a process we may
// not signal counts as alive.
// Sweep uses it for cgroups; the gvisor backend for its sandboxes' state.
func OwnerGone(name string) bool {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, SparePrefix), "box-")
	if !ok {
		return false
	}
	p, suffix, ok := strings.Cut(rest, "-")
	if !ok || suffix == "" {
		return false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return false
	}
	return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

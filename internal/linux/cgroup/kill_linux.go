package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// killTimeout bounds Kill and Destroy.
	killTimeout = 2 * time.Second
	// freezeTimeout bounds one wait for a freezer to report frozen. A
	// task in uninterruptible sleep can keep a cgroup FREEZING forever;
	// after this we signal anyway and let the loop retry.
	freezeTimeout = 100 * time.Millisecond
	// maxDelay caps the polling back-off.
	maxDelay = 10 * time.Millisecond
)

// Kill sends SIGKILL to every process in the box and returns once none
// is left, or an error wrapping ErrNotEmpty after 2 s. On v2 it writes
// cgroup.kill (Linux 5.14), which kills the whole subtree atomically,
// forks in flight included. Otherwise it loops: freeze (v1 freezer or v2
// cgroup.freeze, when available), SIGKILL every pid in cgroup.procs,
// thaw, until cgroup.procs is empty. The box stays usable (Stats,
// AddProc) until Destroy.
func (b *Box) Kill() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil
	}
	return b.kill(time.Now().Add(killTimeout))
}

// KillExcept is Kill for every process in the box but pid, which it leaves running
// (and returns once it alone is left). A supervisor in the box that is the others'
// subreaper can then reap them all, so none ends a zombie for the host's init to
// reap. It always loops with the freezer; cgroup.kill cannot spare one process.
func (b *Box) KillExcept(pid int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil
	}
	others := func() ([]int, error) {
		pids, err := b.procs()
		return slices.DeleteFunc(pids, func(p int) bool { return p == pid }), err
	}
	return b.killLoop(time.Now().Add(killTimeout), others)
}

// Destroy kills every process in the box, waits until it is empty (at
// most 2 s), removes its directory in every hierarchy (at most 2 s each
// while rmdir says EBUSY) and closes FD's
// descriptor. Calling it again after success does nothing and returns
// nil; after a failure (ErrNotEmpty, EBUSY) it may be retried.
func (b *Box) Destroy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil
	}
	if b.removeEmpty() {
		b.markDestroyed()
		return nil
	}
	if err := b.kill(time.Now().Add(killTimeout)); err != nil {
		return err
	}
	// Each directory gets its own grace period: on a loaded host the killed tasks
	// of a v1 box can keep the first hierarchies busy long enough that a shared
	// deadline would leave the last one (memory) no time at all. (A CI run once
	// found eight memory directories of one owner left behind and nothing else of
	// them; this is the likeliest cause we found, not a proven one.)
	for _, d := range slices.Backward(b.dirs) {
		if err := b.remove(d, time.Now().Add(killTimeout)); err != nil {
			return err
		}
	}
	b.markDestroyed()
	return nil
}

// removeEmpty is Destroy's fast path for a box whose processes are all gone
// already (the usual end: its init died and took the rest along): it removes
// every directory, and reports whether it could. rmdir refuses (EBUSY) a cgroup
// that still holds a process, and every process of the box is in each of its
// directories, so the first refusal comes before anything is removed, and the
// caller kills and removes as ever. This saves a box's end reading cgroup.procs
// in each hierarchy (on v1 each read also leaves the kernel a list to free).
func (b *Box) removeEmpty() bool {
	for _, d := range slices.Backward(b.dirs) {
		if err := b.ops.removeDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// markDestroyed closes FD's descriptor, the counter files and the tasks files and
// marks b destroyed.
func (b *Box) markDestroyed() {
	if b.fd >= 0 {
		unix.Close(b.fd)
		b.fd = -1
	}
	if b.counters != nil {
		b.counters.close()
		b.counters = nil
	}
	for _, fd := range b.tasks {
		unix.Close(fd)
	}
	b.tasks = nil
	b.destroyed = true
}

// remove rmdirs d, which must be empty of processes. rmdir can still
// fail with EBUSY for a moment while killed tasks finish exiting, so it
// retries (re-killing, in case something was added) until deadline. A
// directory that is already gone counts as removed.
func (b *Box) remove(d string, deadline time.Time) error {
	delay := 50 * time.Microsecond
	for {
		err := b.ops.removeDir(d)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		if err := b.kill(deadline); err != nil {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, maxDelay)
	}
}

// kill is Kill without the lock.
func (b *Box) kill(deadline time.Time) error {
	pids, err := b.procs()
	if err != nil || len(pids) == 0 {
		return err
	}
	if b.version == V2 {
		err := b.ops.writeFile(b.dirs[0]+"/cgroup.kill", "1")
		if err == nil {
			return b.waitEmpty(deadline)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return b.killLoop(deadline, b.procs)
}

// killLoop freezes the box, SIGKILLs the processes targets lists, thaws, and
// repeats until targets lists none or deadline passes.
func (b *Box) killLoop(deadline time.Time, targets func() ([]int, error)) error {
	delay := 50 * time.Microsecond
	for {
		pids, err := targets()
		if err != nil || len(pids) == 0 {
			return err
		}
		if slices.Contains(pids, os.Getpid()) {
			// A thread of this process is in the box: an EnterThread whose
			// thread could not leave, and has not ended yet. Freezing the box
			// would freeze it, and a signal would kill us; a later try finds it
			// gone.
			return fmt.Errorf("kill %s: a thread of this process is in it: %w", b.name, ErrNotEmpty)
		}
		b.freeze()
		if pids, err = targets(); err == nil {
			err = signalAll(pids, targets)
		}
		if terr := b.thaw(); err == nil {
			err = terr
		}
		if err != nil {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, maxDelay)
		if pids, err = targets(); err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill %s: %d processes left: %w", b.name, len(pids), ErrNotEmpty)
		}
	}
}

// waitEmpty polls cgroup.procs until it is empty or deadline passes.
func (b *Box) waitEmpty(deadline time.Time) error {
	delay := 20 * time.Microsecond
	for {
		pids, err := b.procs()
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill %s: %d processes left: %w", b.name, len(pids), ErrNotEmpty)
		}
		time.Sleep(delay)
		delay = min(2*delay, maxDelay)
	}
}

// procs returns the sorted union of cgroup.procs over the box's
// directories. A directory that no longer exists contributes nothing.
func (b *Box) procs() ([]int, error) {
	var all []int
	for _, d := range b.dirs {
		pids, err := readPids(d + "/cgroup.procs")
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		all = append(all, pids...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// freeze stops every task in the box so none can fork or exit while it
// is being signalled, and waits up to freezeTimeout for the freezer to
// settle. It does nothing without a freezer (v1 without the freezer
// hierarchy, v2 before Linux 5.2). Errors are ignored: freezing only
// narrows races that signalAll and the retry loop already handle.
func (b *Box) freeze() {
	var file, on, state, key string
	var want int64
	if b.version == V2 {
		file, on = b.dirs[0]+"/cgroup.freeze", "1"
		state, key, want = b.dirs[0]+"/cgroup.events", "frozen", 1
	} else {
		d := b.ctl["freezer"]
		if d == "" {
			return
		}
		file, on, state = d+"/freezer.state", "FROZEN", d+"/freezer.state"
	}
	b.froze = true
	if b.ops.writeFile(file, on) != nil {
		return
	}
	deadline := time.Now().Add(freezeTimeout)
	delay := 10 * time.Microsecond
	for time.Now().Before(deadline) {
		if key != "" {
			if v, ok, err := readKey(state, key); err != nil || (ok && v == want) {
				return
			}
		} else {
			s, err := readFile(state)
			if err != nil || strings.TrimSpace(string(s)) == "FROZEN" {
				return
			}
		}
		time.Sleep(delay)
		delay = min(2*delay, maxDelay)
	}
}

// thaw undoes freeze. On v1, frozen tasks act on SIGKILL only once
// thawed; on v2 they die while frozen, but thawing is harmless.
func (b *Box) thaw() error {
	var file, off string
	if b.version == V2 {
		file, off = b.dirs[0]+"/cgroup.freeze", "0"
	} else {
		d := b.ctl["freezer"]
		if d == "" {
			return nil
		}
		file, off = d+"/freezer.state", "THAWED"
	}
	if err := b.ops.writeFile(file, off); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// signalAll sends SIGKILL to the processes pids, read from cgroup.procs,
// without risking a recycled pid: it first opens a pidfd for each pid,
// then re-reads cgroup.procs (reread) and signals only the pidfds whose
// pid is still listed. A pid listed after its pidfd was opened belongs
// to the same process (a pid is not reused while its process lives), so
// a process that died and whose pid went to an unrelated host process
// in between is never signalled. If pidfd_open is missing (Linux < 5.3)
// it falls back to kill(2) for pids still listed, a much narrower race
// than killing straight from the first read.
func signalAll(pids []int, reread func() ([]int, error)) error {
	type target struct{ pid, fd int }
	targets := make([]target, 0, len(pids))
	defer func() {
		for _, t := range targets {
			if t.fd >= 0 {
				unix.Close(t.fd)
			}
		}
	}()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			fd = -1
		}
		targets = append(targets, target{pid, fd})
	}
	listed, err := reread()
	if err != nil {
		return err
	}
	for _, t := range targets {
		if _, ok := slices.BinarySearch(listed, t.pid); !ok {
			continue
		}
		if t.fd >= 0 {
			err = unix.PidfdSendSignal(t.fd, unix.SIGKILL, nil, 0)
			if err != nil {
				err = os.NewSyscallError("pidfd_send_signal", err)
			}
		} else {
			err = unix.Kill(t.pid, unix.SIGKILL)
			if err != nil {
				err = os.NewSyscallError("kill", err)
			}
		}
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill process %d: %w", t.pid, err)
		}
	}
	return nil
}

// Package cgroup puts each box (one short-lived, isolated process tree)
// in its own cgroup, limits its memory, tasks and CPU, reads its usage,
// and kills and removes it completely afterwards.
//
// It is a deliberately thin wrapper: a box is created and destroyed per
// execution, so New+Destroy must stay well under a millisecond (about
// 0.4 ms on cgroup v1 with five hierarchies). It uses raw
// open/write/mkdir/rmdir on cgroupfs and nothing beyond the standard
// library and golang.org/x/sys/unix.
//
//	b, err := cgroup.New(fmt.Sprintf("box-%d-%s", os.Getpid(), random),
//		cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1})
//	if err != nil { ... }
//	defer b.Destroy()
//	cmd := exec.Command(...)
//	if fd, ok := b.FD(); ok { // v2: the child starts inside the box
//		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
//	}
//	// On v1, start cmd from a locked thread that has entered the box
//	// (b.EnterThread, then leave()), so that the child is born inside;
//	// or start it anywhere and call b.AddProc(cmd.Process.Pid) before
//	// letting it run untrusted code (e.g. it blocks on a sync pipe),
//	// which costs an RCU grace period (several ms) per call.
//	...
//	st, err := b.Stats() // before Destroy
//
// # Choosing a version
//
// [Detect] reads /proc/self/mountinfo and /proc/self/cgroup. It prefers
// cgroup v2 when a cgroup2 mount contains our own cgroup and that
// cgroup's cgroup.controllers offers memory and pids (cpu is used when
// offered). Otherwise it uses cgroup v1 when memory and pids
// hierarchies are mounted; cpu, cpuacct and freezer are used when
// mounted too, whether separately or co-mounted ("cpu,cpuacct").
// Otherwise cgroups are unavailable and New returns [ErrUnavailable].
// Hybrid hosts (v1 hierarchies plus a cgroup2 mount at
// /sys/fs/cgroup/unified with no controllers) therefore use v1.
//
// Boxes are always created below our own cgroup, never at the root of a
// hierarchy, so they are accounted to (and capped by) whatever limits
// the service itself runs under, and a delegated or namespaced cgroup
// is enough:
//
//	v1, in each hierarchy used:   <self>/moat/box-<pid>-<random>/
//	v2:                           <self>/moat/box-<pid>-<random>/
//	                              <self>/moat-supervisor/   (see below)
//
// The "moat" parent is created on first use and kept.
//
// # The no-internal-process rule (v2)
//
// On v2 a controller can limit a cgroup's children only if it is
// enabled in the parent's cgroup.subtree_control, and the kernel refuses
// to enable one (EBUSY) in a cgroup that has member processes, except
// in the root cgroup. Our own cgroup <self> always has at least one
// member: us. So New first writes "+memory +pids" to
// <self>/cgroup.subtree_control, and if that fails with EBUSY it
// creates <self>/moat-supervisor, moves every process of <self> into it
// (writing each pid of <self>/cgroup.procs to its cgroup.procs) and
// retries, a few times, since a process may fork into <self>
// meanwhile. Then it enables the same controllers in
// <self>/moat/cgroup.subtree_control; <self>/moat never has processes
// of its own. cpu is enabled the same way but best effort.
//
// This is the layout systemd asks of services with Delegate=yes (move
// the main process into a sub-cgroup) and what container runtimes do
// for nested cgroups. Moving the processes changes nothing about their
// limits: <self>'s limits still apply to the whole subtree. It only
// renames their cgroup, and it is done once per process. A process
// that later starts in moat-supervisor (a restart from a shell inside
// it) detects <self> as its base again, because a cgroup named
// moat-supervisor is treated as its parent. Placing the boxes in a
// sibling of <self> instead would need write access to <self>'s
// parent, which a delegated service or a cgroup namespace does not
// have, and would step into cgroups owned by the service manager.
//
// Cgroup v1 has no such rule: boxes go directly below <self>/moat.
//
// # Limits
//
// Values are written exactly as the kernel expects, to files that
// already exist (nothing is created with O_CREAT):
//
//	          v1                                        v2
//	memory    memory.limit_in_bytes = N, then           memory.max = N
//	          memory.memsw.limit_in_bytes = N (if       memory.swap.max = 0 (if present)
//	          present; the kernel keeps memsw >= limit,
//	          so this order is required)
//	pids      pids.max = N                              pids.max = N
//	cpu       cpu.cfs_period_us = 100000,               cpu.max = "Q 100000"
//	          cpu.cfs_quota_us = Q
//
// where Q = CPUs*100000 microseconds. A zero limit writes nothing.
// [Box.Controllers] lists what actually limits the box, so a caller
// can refuse to run when, say, cpu is missing.
//
// # Killing, and why cleanup is complete
//
// Every process in a box is listed in the box's cgroup.procs: children
// inherit their parent's cgroup at fork, and only a writer to cgroupfs
// can move a process out. [Box.Kill] kills until that list is empty:
//
//   - v2 with cgroup.kill (Linux 5.14): one write kills the whole
//     cgroup, including children of forks in progress; then it waits
//     until cgroup.procs is empty.
//   - otherwise it loops: freeze (v1 freezer.state = FROZEN, or v2
//     cgroup.freeze = 1, waiting up to 100 ms for the freezer to
//     settle), SIGKILL every pid in cgroup.procs, thaw, re-read. Frozen
//     tasks cannot fork, so a fork bomb cannot outrun the loop; without
//     a freezer the pids limit bounds it and the loop repeats. On v1 a
//     frozen task acts on SIGKILL only when thawed, hence the thaw.
//
// Signals never go to a recycled pid: each pid gets a pidfd first
// (pidfd_open, Linux 5.3) and is signalled only if it is still listed in
// cgroup.procs after the pidfd was opened; see signalAll.
//
// [Box.Destroy] kills, then rmdirs the box in every hierarchy, retrying
// EBUSY while killed tasks finish exiting, all within 2 s. An empty
// cgroup with no children can always be removed, so when Destroy
// returns nil nothing of the box remains: no process and no
// directory. Zombies do not block it: an exited task leaves
// cgroup.procs before it is reaped. On failure (a task stuck in
// uninterruptible sleep) it returns [ErrNotEmpty] or the rmdir error
// and can be called again. [Box.FD]'s descriptor is closed with the
// box.
//
// If the service itself dies, its boxes stay. Box names carry the
// owner's pid ("box-<pid>-..."), and [Sweep], run at startup, kills
// and removes every box whose owner pid is not running, in every
// hierarchy it is found in (a crash between the mkdirs of New leaves a
// v1 box in some hierarchies only). New removes what it created when
// it fails.
//
// Precondition: the processes in a box must not be able to write to
// cgroupfs (the sandbox does not give them a writable cgroup mount or
// CAP_SYS_ADMIN over it). Otherwise they could move themselves out of
// the box or create child cgroups that Destroy does not remove.
//
// # Testing
//
// All file-system access goes through a host built from the text of
// mountinfo and /proc/self/cgroup plus an fsOps value. The fake-fs tests
// point a host at a temp dir laid out like v1 or v2 and inject mkdir,
// rmdir and write functions that act as the kernel would (populate
// control files, delete them before rmdir, move pids, refuse
// subtree_control with EBUSY). The kernel tests (*_linux_test.go) run
// on the real host as root; with CI=true they fail instead of skipping.
//
// # Kernel minimums
//
//   - v1: Linux 4.3 (pids controller); "oom_kill" in memory.oom_control
//     since 4.13, reported as -1 before.
//   - v2: Linux 4.5 with memory and pids; cpu controller 4.15;
//     cgroup.freeze 5.2; pidfd_open 5.3 (kill(2) fallback before);
//     CLONE_INTO_CGROUP (FD) 5.7; cgroup.kill 5.14; memory.peak 5.19
//     (PeakMemoryBytes is -1 before: the maximum of memory.current
//     cannot be reconstructed afterwards).
package cgroup

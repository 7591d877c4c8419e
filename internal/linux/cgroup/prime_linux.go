package cgroup

import (
	"os"
	"strconv"
)

// PrimeMigration prepares a v1 host for a migration that is about to happen (AddProc).
//
// # Why
//
// On cgroup v1 a new process can only be moved into its box after clone (there is no
// CLONE_INTO_CGROUP), and a move takes cgroup_threadgroup_rwsem for writing. The first
// writer after a quiet period waits for an RCU grace period (rcu_sync_enter); writers
// that follow while the rwsem is still in its slow mode do not. On this kind of host the
// wait is 5–15 ms, most of a box's start-up. PrimeMigration rewrites our own pid into the
// cgroup.procs of the cgroup we are already in (a move that changes nothing) so that the
// grace period runs while the caller creates the box cgroup and starts init; call it in
// a goroutine at the start. It does nothing on v2 or without cgroups, and its errors do
// not matter: AddProc then simply waits as it would have.
func PrimeMigration() {
	h, err := current()
	if err != nil || h.version != V1 {
		return
	}
	dir, ok := h.v1["pids"]
	if !ok {
		return
	}
	_ = h.ops.writeFile(dir+"/cgroup.procs", strconv.Itoa(os.Getpid()))
}

// Package native is the default backend: a box made of Linux namespaces, a fresh
// read-only root, cgroups, rlimits, Landlock and seccomp, with no daemon.
//
// # Processes
//
// The parent (moat run, or the server) re-executes the moat binary as the box's init
// ("__moat-init"), through an fd of its own binary so that no host path needs to be
// searchable by the box's unprivileged host uid. Init is created by clone(2) with new
// user, mount, PID, network, IPC and UTS namespaces; it is PID 1 of the box and uid 0 of
// the box's user namespace, mapped to an unprivileged host uid (HostRootUID). It builds
// the root, confines itself and forks the code as uid/gid 65534 (mapped to HostBoxUID).
// When the code exits, init exits, and the kernel kills every other process in the PID
// namespace: double forks and setsid cannot outlive the box.
//
// # Handshake
//
//	parent                                   init (PID 1, new namespaces)
//	------                                   ----------------------------
//	cgroup.New
//	clone+exec /proc/self/fd/4 ---------->   starts; blocks reading fd 3
//	  (born in the box's cgroup: v2 CLONE_INTO_CGROUP, v1 from a thread
//	  that entered it, cgroup.EnterThread)
//	spec frame (code, limits, files) --->    reads spec: now inside the box cgroup
//	                                         mounts root, pivot_root, hostname, lo up
//	                                         unshare(CLONE_NEWCGROUP)
//	                                         rlimits, drop bounding caps, no_new_privs,
//	                                         Landlock, seccomp (all threads)
//	                                         fork+exec code as 65534 (no capabilities)
//	read stdout/stderr pipes (capped)  <--   code writes to fds 1 and 2
//	                                   <---  {"kind":"exit",...} or {"kind":"error",step}
//	wait init; cgroup stats; destroy
//
// A timeout, an output flood or a cancelled context kills init with SIGKILL (and every
// process of the cgroup); the PID namespace guarantees nothing survives it.
//
// # Why it is safe
//
// The code runs with no capabilities in any namespace, no_new_privs, a seccomp filter
// that denies mount, ptrace, unshare, setns, bpf, keyctl, module loading and friends
// (see internal/linux/seccomp), Landlock allowing writes only to /tmp, /workspace and
// /dev/shm, in an empty network namespace. Its root is a tmpfs holding read-only bind
// mounts of /usr and the loader's files: nothing of /root, /home, /var or the host's /etc
// beyond ld.so's cache, a generated passwd, group and hosts. The moat binary is not in
// the box's root (and masked if a bound tree holds it); init is not dumpable and runs as
// another uid, so /proc/1/exe cannot be opened by the code (CVE-2019-5736).
package native

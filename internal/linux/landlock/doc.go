// Package landlock confines a sandboxed process with the Linux Landlock
// LSM: the whole filesystem becomes read-only except a few writable
// directories and device files, TCP bind and connect are denied, and
// signals and abstract UNIX sockets cannot reach outside the sandbox.
//
// It builds the ruleset with the system call wrappers of
// github.com/landlock-lsm/go-landlock, always in best-effort mode (as
// go-landlock's BestEffort): a kernel without some feature enforces the
// rest, and a kernel without Landlock restricts nothing (Restrict then
// returns ABI 0 and the caller decides whether that is acceptable).
//
// # Example
//
//	// In the sandbox's init, after dropping privileges and closing
//	// file descriptors the untrusted code must not use:
//	abi, err := landlock.Restrict(
//	    []string{"/tmp", "/workspace", "/dev/shm"},
//	    []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"},
//	)
//	if err != nil {
//	    return fmt.Errorf("landlock: %w", err)
//	}
//	if abi < 4 {
//	    // No Landlock network rules: rely on the network namespace.
//	}
//
// # Building the ruleset for another process
//
// Ruleset builds the same ruleset without restricting anyone, resolving
// the paths beneath a directory fd that stands for the sandbox's "/". A
// privileged parent uses it for a box it reaches through /proc/PID/root,
// and the process inside only enforces it:
//
//	parent (host root)                      process in the box
//	------------------                      ------------------
//	root := open(/proc/PID/root, O_PATH)
//	fd, abi, err := Ruleset(root, rw, devRW)
//	sendmsg(SCM_RIGHTS fd)  ------------->  recvmsg: fd
//	close(fd)                               prctl(PR_SET_NO_NEW_PRIVS, 1)
//	                                        landlock_restrict_self(fd, 0)
//	                                        close(fd)
//
// landlock_restrict_self confines the calling thread only, so the box
// process must call it before it starts other threads. With abi == 0
// there is no fd to send.
//
// # The ruleset
//
// Restrict and Ruleset handle every right Landlock V1 to V7 knows (see
// policyFor, the one place that decides them), so anything not granted
// below is denied:
//
//   - "/" (and so every path) gets execute, read_file and read_dir:
//     programs can list, read and run anything they can reach with
//     ordinary permissions, but cannot change it.
//   - Each rw directory additionally gets write_file, truncate,
//     remove_file, remove_dir, make_reg, make_dir, make_sym, make_sock
//     and make_fifo, and refer where the kernel has it (V2+). These apply
//     to the whole tree beneath the directory.
//   - Each devRW file gets write_file and truncate (read and execute it
//     has from "/"): it can be opened for writing, nothing else.
//   - Network (V4+): bind_tcp and connect_tcp are handled with no bind
//     rule, so every TCP bind(2) fails with EACCES, and connect(2) too but
//     to the ports the caller names (a box's egress proxy on its own
//     loopback: the network namespace decides which addresses exist).
//   - Scopes (V6+): signals (kill, tgkill, fcntl F_SETOWN) to processes
//     outside the domain fail with EPERM, as does connecting or sending
//     to an abstract UNIX socket bound outside the domain. Processes
//     inside the sandbox can still signal and talk to each other.
//
// # Why it is safe
//
// Landlock only removes rights: a ruleset never lets a process do what
// its credentials forbid, and it is inherited across fork and execve and
// cannot be lifted. Writes outside rw fail with EACCES before anything is
// modified, whether by open(O_WRONLY|O_CREAT), truncate(2), unlink(2),
// mkdir(2), rename(2) or link(2); reaching a file through a symlink or
// /proc/self/fd does not help, because the kernel checks the resolved
// file's position in the hierarchy.
//
// Rights deliberately withheld:
//
//   - make_char and make_block, even in rw directories. A grant on a
//     directory covers every file beneath it regardless of type, so a
//     process holding CAP_MKNOD could otherwise mknod a node for the
//     host disk or /dev/mem in /tmp and open it read-write.
//   - devRW must name character devices, not directories: granting
//     write on "/dev" would make raw disks writable. Restrict rejects
//     anything else with [ErrInvalidPath].
//   - ioctl_dev (V5+): ioctl(2) on device files opened inside the
//     sandbox is limited to the kernel's small always-allowed set.
//   - refer is granted only on rw directories. The kernel only allows a
//     rename or link when both directories grant refer and the
//     destination grants no more rights than the source, so files move
//     freely between rw directories, but nothing can be linked or moved
//     in from a read-only tree to gain write access (EXDEV or EACCES).
//
// Landlock also always denies mount(2), umount(2) and pivot_root(2) to a
// restricted process, and ptrace(2) of processes outside its domain.
//
// Ruleset runs with the host's privileges on a tree the sandbox may
// control, so it resolves every path with openat2(2) RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS: symbolic links and ".." resolve as if root were
// "/", and /proc magic links are refused, so a link planted in the box
// ("/tmp" -> "/proc/1/root/etc", or "../../../etc") names a file of the
// box or nothing, never one of the host. It opens with O_PATH, which
// reads nothing and does not run a device's open, and only builds a
// ruleset: a wrong rule could only confine the process that enforces it
// less than intended, never grant it anything its credentials forbid.
//
// # Kernel minimums
//
//	ABI  Linux  What Restrict (and a Ruleset fd) enforces with it
//	V1   5.13   read-only "/", writable rw dirs and devRW files
//	V2   5.19   rename and link between rw directories allowed (refer)
//	V3   6.2    truncate(2) outside rw denied
//	V4   6.7    TCP bind and connect denied
//	V5   6.10   ioctl on device files opened in the sandbox denied
//	V6   6.12   signals and abstract UNIX sockets scoped to the sandbox
//	V7   6.15   nothing more (audit logging flags, left at defaults)
//
// Below V3, truncate(2) and O_TRUNC on files outside rw are not
// restricted. A kernel reporting V6+ without the fix for the
// signal-scoping erratum is treated as V5. Restrict and Ruleset handle
// at most V7 (pinnedABI): V9 (connecting to pathname UNIX sockets made
// outside the sandbox) and V10 (UDP) would change what sandboxed
// programs can do and are a deliberate later upgrade.
//
// # Limitations
//
// Landlock is one layer; moat must not rely on it alone.
//
//   - File descriptors opened before Restrict keep their access: close
//     or mark close-on-exec everything the sandbox must not use.
//   - Metadata is not restricted: with the right capabilities a process
//     can still chmod(2), chown(2), utime(2) or setxattr(2) files outside
//     rw. Drop CAP_CHOWN, CAP_FOWNER and CAP_FSETID or use read-only
//     mounts.
//   - Files written in rw can be executed (execute comes from "/"):
//     mount rw directories noexec if that matters.
//   - Only TCP is restricted. UDP, raw and SCTP sockets are not, and
//     neither is Multipath TCP: a socket(AF_INET, SOCK_STREAM,
//     IPPROTO_MPTCP) connects despite the TCP rule (seen on Linux 6.18,
//     ABI 7; https://github.com/landlock-lsm/linux/issues/54). Use a
//     network namespace, or seccomp to refuse IPPROTO_MPTCP.
//   - Below V9, connect(2) to existing pathname UNIX sockets (for
//     example a container runtime's socket) is not restricted: keep
//     them out of the sandbox's mount namespace.
//   - Restrict sets no_new_privs on every thread (landlock_restrict_self
//     requires it without CAP_SYS_ADMIN), so set-user-ID programs lose
//     their privileges.
//
// Tests run Restrict, and landlock_restrict_self on a Ruleset fd, in a
// re-executed child of the test binary, because neither can be undone;
// see landlock_linux_test.go.
package landlock

// Package seccomp loads the box's seccomp-bpf syscall filter.
//
// The box runs untrusted code as an unprivileged user inside namespaces,
// Landlock and cgroups. This filter shrinks the kernel interface that code can
// reach, so that a bug in a rarely used syscall, or a namespace or mount
// trick, cannot be used to leave the box.
//
//	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
//		return err
//	}
//	if err := seccomp.Install(); err != nil {
//		return err // fatal: the process may hold part of the filter
//	}
//	// exec the untrusted program; the filter is inherited across fork and execve
//
// # Policy
//
// The allowlist is the Docker (moby) default profile,
// github.com/moby/profiles/seccomp at the version in go.mod, evaluated for an
// unprivileged container on the running architecture: a moby rule is used
// when it needs no capability, is not limited to another architecture and has
// no kernel-version gate (the only such rule, for ptrace and process_vm_*,
// is denied here anyway). Rules with argument conditions are translated too, so socket(2) is
// allowed for moby's address families (not AF_VSOCK, AF_ALG or unknown ones),
// personality(2) only for moby's five values, and clone(2) only without
// namespace flags. The result is about 300 syscalls on amd64.
//
// On top of that, and ahead of it:
//
//   - DeniedSyscalls lists the syscalls refused with EPERM whatever moby
//     says: mount and the new mount API, pivot_root, chroot, unshare,
//     setns, ptrace, process_vm_*, kcmp, pidfd_getfd, module and kexec
//     loading, bpf, perf_event_open, userfaultfd, io_uring, modify_ldt,
//     memfd_secret, keyrings, open_by_handle_at, clock and time setting,
//     swap, reboot, acct, quotas, syslog, iopl and ioperm, and a few obsolete
//     ones.
//   - clone(2) with any of CLONE_NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID,
//     NEWNET or NEWCGROUP (mask 0x7E020000) fails with EPERM.
//   - clone3(2) fails with ENOSYS, so glibc falls back to clone(2).
//   - ioctl(2) TIOCSTI and TIOCLINUX fail with EPERM.
//   - mknod(2) and mknodat(2) of a block or character device fail with EPERM
//     (FIFOs, sockets and regular files are allowed).
//   - setpriority(2) with a negative nice value fails with EPERM.
//   - socket(2) of AF_NETLINK with protocol NETLINK_KOBJECT_UEVENT (the host's
//     device events, which a docker box's network namespace receives) fails with
//     EPERM; other netlink protocols (route, sock_diag) stay allowed.
//
// Everything else, including syscalls newer than the tables, fails with
// EPERM. Go's os/exec (clone with CLONE_VFORK|CLONE_VM, setgroups, setgid,
// setuid, setsid, dup3, execve, wait4, pidfd_open), glibc, Python and bash
// keep working.
//
// # Why it is safe
//
// clone3(2) passes its flags in memory, which seccomp cannot read; answering
// ENOSYS makes callers use clone(2), whose flags arrive in a register the
// filter checks. Namespace creation is closed on all three paths (clone,
// clone3, unshare), so the box cannot get CAP_SYS_ADMIN over a fresh user
// namespace, the entry point of many kernel privilege escalations (for example
// CVE-2022-0185). open_by_handle_at is denied because it reaches files outside
// the mount namespace (CVE-2014-3519, "shocker"). TIOCSTI is denied because it
// injects input into a shared terminal (CVE-2017-5226).
//
// Deny rules on int-typed arguments compare only the low 32 bits, which is
// all the kernel reads, so setting high bits cannot slip past them
// (CVE-2019-10063). Allow rules compare all 64 bits and so fail closed.
//
// Each program checks the audit architecture first: a syscall through another
// ABI (int 0x80 on x86_64, AArch32 on arm64) fails with EPERM, and an x32
// syscall with ENOSYS, so a rule cannot be bypassed by switching ABI.
//
// Install sets SECCOMP_FILTER_FLAG_TSYNC, so every thread of the Go process
// gets the filter, and checks the return value that reports a thread TSYNC
// could not reach. no_new_privs (required for an unprivileged process to load
// a filter) also keeps setuid binaries from gaining privileges afterwards.
// Filters are inherited across fork and execve and cannot be removed.
//
// # Filter layout
//
// The policy is loaded as one program, a binary search over the syscall
// number (searchProgram, about seven comparisons) that returns each syscall's
// action, or, for the argument-conditioned syscalls (clone, ioctl, mknod,
// mknodat, personality, setpriority, socket), goes on to that syscall's own program,
// appended whole. The per-syscall programs are assembled by
// github.com/elastic/go-seccomp-bpf, each alone: its v1.6.0 assembler loads a
// syscall argument into the accumulator and never reloads the syscall number,
// so a rule placed after an argument-conditioned rule in the same program
// would compare the wrong value. The search replaced a stack of eight
// programs, the first a chain of one comparison per named syscall (up to 370
// for every syscall the box made, and for each number when the kernel loads
// the filter: ~0.4 ms per box). The unit tests run every syscall of the
// architecture's table through the program in a BPF interpreter and compare
// the result with the policy's meaning, and every syscall number through the
// search and the library's chain for the same policy.
//
// # Kernel minimums
//
// seccomp filter mode needs Linux 3.5 and TSYNC 3.17; Supported probes both.
// clone3 exists from 5.3. Only linux/amd64 and linux/arm64 have a policy; on
// other platforms Install and Supported return an error wrapping
// ErrNotSupported.
package seccomp

//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"testing"

	bpfseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	moby "github.com/moby/profiles/seccomp"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Personality flags from <linux/personality.h>; x/sys/unix lacks them.
const (
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
	sigchld         = uint64(unix.SIGCHLD)
)

const (
	retAllow  = uint32(unix.SECCOMP_RET_ALLOW)
	retEPERM  = uint32(actionEPERM)
	retENOSYS = uint32(actionENOSYS)
)

// requiredDenied are the syscalls the box must refuse unconditionally.
var requiredDenied = []string{
	"mount", "umount2", "pivot_root", "chroot", "ptrace", "process_vm_readv",
	"process_vm_writev", "kexec_load", "kexec_file_load", "init_module",
	"finit_module", "delete_module", "bpf", "perf_event_open", "keyctl", "add_key",
	"request_key", "userfaultfd", "unshare", "setns", "reboot", "swapon", "swapoff",
	"acct", "clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "stime",
	"open_by_handle_at", "name_to_handle_at", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "fanotify_init", "lookup_dcookie", "move_mount",
	"open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"quotactl", "nfsservctl", "vhangup", "syslog", "iopl", "ioperm",
	"create_module", "get_kernel_syms", "query_module", "uselib", "ustat", "sysfs",
	"_sysctl", "kcmp", "pidfd_getfd", "clone3", "modify_ldt", "memfd_secret",
}

// essentialAllowed are syscalls that Go's runtime and ForkExec, glibc,
// Python and bash need on every architecture; they must be allowed with
// ordinary arguments.
var essentialAllowed = []string{
	"read", "write", "openat", "close", "mmap", "execve", "clone", "wait4",
	"exit_group", "futex", "rt_sigaction", "getdents64", "fstat", "newfstatat",
	"setuid", "setgid", "setgroups", "prctl", "kill", "setsid", "dup3", "fcntl",
	"close_range", "pidfd_open", "pidfd_send_signal", "waitid", "socket", "ioctl",
	"personality", "sched_getaffinity", "rseq", "set_robust_list", "execveat",
}

// alsoAllowed are needed where they exist; some architectures lack them.
var alsoAllowed = []string{"vfork", "fork", "open", "stat", "arch_prctl", "dup2", "pipe"}

func TestPolicyAssembles(t *testing.T) {
	c, err := compile()
	if err != nil {
		t.Fatalf("compile policy: %v", err)
	}
	var sizes []int
	for _, f := range c.filters {
		if n := len(f); n == 0 || n > bpfMaxInsns {
			t.Fatalf("program has %d instructions, want 1 to %d", n, bpfMaxInsns)
		}
		sizes = append(sizes, len(f))
	}
	t.Logf("programs of %v instructions; %d denied, %d allowed, %d conditional; not in %s table: %v",
		sizes, len(c.spec.deny), len(c.spec.allow),
		len(c.spec.denyIf)+len(c.spec.allowIf), runtime.GOARCH, c.spec.unknown)
}

func TestDeniedSyscalls(t *testing.T) {
	denied := DeniedSyscalls()
	if !sort.StringsAreSorted(denied) {
		t.Errorf("DeniedSyscalls() is not sorted: %v", denied)
	}
	info := archInfo(t)
	for _, name := range requiredDenied {
		t.Run(name, func(t *testing.T) {
			if _, ok := info.SyscallNames[name]; !ok {
				if !existsOnSomeArch(name) {
					t.Fatalf("%s is in no syscall table: typo?", name)
				}
				t.Logf("%s does not exist on %s: nothing to deny", name, info.Name)
				return
			}
			if !slices.Contains(denied, name) {
				t.Errorf("DeniedSyscalls() lacks %s", name)
			}
			want := retEPERM
			if name == "clone3" {
				want = retENOSYS
			}
			if got := evalBPF(t, info.ID, name); got != want {
				t.Errorf("filter returns %#x for %s, want %#x", got, name, want)
			}
		})
	}
}

func TestEssentialSyscallsAllowed(t *testing.T) {
	denied := DeniedSyscalls()
	info := archInfo(t)
	for _, name := range slices.Concat(essentialAllowed, alsoAllowed) {
		t.Run(name, func(t *testing.T) {
			if _, ok := tableName(info, name); !ok {
				if slices.Contains(essentialAllowed, name) || !existsOnSomeArch(name) {
					t.Fatalf("%s is not in the %s table", name, info.Name)
				}
				t.Logf("%s does not exist on %s", name, info.Name)
				return
			}
			if slices.Contains(denied, name) {
				t.Errorf("DeniedSyscalls() contains %s", name)
			}
			if got := evalBPF(t, info.ID, name); got != retAllow {
				t.Errorf("filter returns %#x for %s with zero arguments, want allow", got, name)
			}
		})
	}
}

// TestSpecPerArch builds the policy for each supported architecture, so that
// an amd64 test run also checks the arm64 policy (whose BPF can only be
// assembled on arm64).
func TestSpecPerArch(t *testing.T) {
	for _, tt := range []struct {
		goarch string
		info   *arch.Info
	}{
		{"amd64", arch.X86_64},
		{"arm64", arch.AARCH64},
	} {
		t.Run(tt.goarch, func(t *testing.T) {
			s, err := buildSpec(moby.DefaultProfile(), tt.info, tt.goarch)
			if err != nil {
				t.Fatalf("build spec: %v", err)
			}
			if _, err := s.policies(); err != nil {
				t.Fatalf("split spec: %v", err)
			}
			for _, name := range requiredDenied {
				if _, ok := tt.info.SyscallNames[name]; !ok {
					continue
				}
				if got := s.eval(name, nil); got == retAllow {
					t.Errorf("%s is allowed", name)
				}
			}
			for _, name := range slices.Concat(essentialAllowed, alsoAllowed) {
				table, ok := tableName(tt.info, name)
				if !ok {
					if slices.Contains(essentialAllowed, name) {
						t.Errorf("%s is not in the %s table", name, tt.info.Name)
					}
					continue
				}
				if got := s.eval(table, nil); got != retAllow {
					t.Errorf("%s with zero arguments: got %#x, want allow", name, got)
				}
			}
			t.Logf("%d denied, %d allowed; not in %s table: %v", len(s.deny), len(s.allow), tt.info.Name, s.unknown)
		})
	}
}

func TestFilterDecisions(t *testing.T) {
	const (
		forkFlags   = sigchld
		vforkFlags  = unix.CLONE_VM | unix.CLONE_VFORK | sigchld
		threadFlags = uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
			unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS |
			unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
		hiBits = uint64(0xffffffff) << 32
	)
	info := archInfo(t)
	tests := []struct {
		name    string
		syscall string
		args    []uint64
		want    uint32
	}{
		{"clone fork", "clone", []uint64{forkFlags}, retAllow},
		{"clone vfork as used by os/exec", "clone", []uint64{vforkFlags}, retAllow},
		{"clone pidfd", "clone", []uint64{vforkFlags | unix.CLONE_PIDFD}, retAllow},
		{"clone thread", "clone", []uint64{threadFlags}, retAllow},
		{"clone newns", "clone", []uint64{unix.CLONE_NEWNS | forkFlags}, retEPERM},
		{"clone newuser", "clone", []uint64{unix.CLONE_NEWUSER | forkFlags}, retEPERM},
		{"clone newpid", "clone", []uint64{unix.CLONE_NEWPID}, retEPERM},
		{"clone newnet", "clone", []uint64{unix.CLONE_NEWNET}, retEPERM},
		{"clone newcgroup", "clone", []uint64{unix.CLONE_NEWCGROUP}, retEPERM},
		{"clone newipc", "clone", []uint64{unix.CLONE_NEWIPC}, retEPERM},
		{"clone newuts", "clone", []uint64{unix.CLONE_NEWUTS}, retEPERM},
		{"clone thread with high bits", "clone", []uint64{threadFlags | hiBits}, retAllow},
		{"clone newns with high bits", "clone", []uint64{unix.CLONE_NEWNS | hiBits}, retEPERM},
		{"clone3", "clone3", nil, retENOSYS},
		{"personality linux", "personality", []uint64{0}, retAllow},
		{"personality query", "personality", []uint64{0xffffffff}, retAllow},
		{"personality linux32", "personality", []uint64{8}, retAllow},
		{"personality addr_no_randomize", "personality", []uint64{addrNoRandomize}, retEPERM},
		{"personality read_implies_exec", "personality", []uint64{readImpliesExec}, retEPERM},
		{"socket unix", "socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socket inet", "socket", []uint64{unix.AF_INET, unix.SOCK_DGRAM}, retAllow},
		{"socket inet6", "socket", []uint64{unix.AF_INET6, unix.SOCK_STREAM}, retAllow},
		{"socket netlink", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, retAllow},
		{"socket netlink route", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE}, retAllow},
		{"socket netlink sock_diag", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_SOCK_DIAG}, retAllow},
		{"socket netlink uevent", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT}, retEPERM},
		{"socket netlink uevent with high bits", "socket", []uint64{unix.AF_NETLINK | hiBits, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT | hiBits}, retEPERM},
		{"socket netlink protocol 15 plus a bit", "socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT | 16}, retAllow},
		{"socket vsock", "socket", []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retEPERM},
		{"socket alg", "socket", []uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}, retEPERM},
		{"socket unknown domain", "socket", []uint64{200}, retEPERM},
		{"socket inet with high bits", "socket", []uint64{unix.AF_INET | hiBits}, retEPERM},
		{"ioctl tcgets", "ioctl", []uint64{0, unix.TCGETS}, retAllow},
		{"ioctl fionread", "ioctl", []uint64{0, unix.TIOCINQ}, retAllow},
		{"ioctl tiocsti", "ioctl", []uint64{0, unix.TIOCSTI}, retEPERM},
		{"ioctl tiocsti with high bits", "ioctl", []uint64{0, unix.TIOCSTI | hiBits}, retEPERM},
		{"ioctl tiocsti plus a bit", "ioctl", []uint64{0, unix.TIOCSTI | 1}, retAllow},
		{"ioctl tioclinux", "ioctl", []uint64{0, unix.TIOCLINUX}, retEPERM},
		{"mknod fifo", "mknodat", []uint64{0, 0, unix.S_IFIFO | 0o600}, retAllow},
		{"mknod regular file", "mknodat", []uint64{0, 0, unix.S_IFREG | 0o600}, retAllow},
		{"mknod socket", "mknod", []uint64{0, unix.S_IFSOCK | 0o600}, retAllow},
		{"mknodat char device", "mknodat", []uint64{0, 0, unix.S_IFCHR | 0o600, 0x101}, retEPERM},
		{"mknodat block device", "mknodat", []uint64{0, 0, unix.S_IFBLK | 0o600, 0x800}, retEPERM},
		{"mknod block device", "mknod", []uint64{0, unix.S_IFBLK | 0o600, 0x800}, retEPERM},
		{"mknod char device with high bits", "mknod", []uint64{0, unix.S_IFCHR | hiBits}, retEPERM},
		{"setpriority nice 10", "setpriority", []uint64{0, 0, 10}, retAllow},
		{"setpriority nice 0 with high bits", "setpriority", []uint64{0, 0, hiBits}, retAllow},
		{"setpriority nice -5", "setpriority", []uint64{0, 0, 0xfffffffb}, retEPERM},
		{"setpriority nice -5 sign-extended", "setpriority", []uint64{0, 0, 0xfffffffffffffffb}, retEPERM},
		{"mount", "mount", nil, retEPERM},
		{"unshare", "unshare", []uint64{unix.CLONE_NEWUSER}, retEPERM},
		{"execve", "execve", nil, retAllow},
		{"setgroups", "setgroups", nil, retAllow},
		{"landlock_restrict_self", "landlock_restrict_self", nil, retAllow},
		{"seccomp", "seccomp", nil, retAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := evalBPF(t, info.ID, tt.syscall, tt.args...); got != tt.want {
				t.Errorf("%s(%#x) = %#x, want %#x", tt.syscall, tt.args, got, tt.want)
			}
		})
	}
}

func TestFilterOtherABIs(t *testing.T) {
	info := archInfo(t)
	vm := filterVM(t)
	read := uint32(info.SyscallNames["read"])
	tests := []struct {
		name      string
		auditArch arch.AuditArch
		nr        uint32
		want      uint32
	}{
		{"native read", info.ID, read, retAllow},
		{"unknown syscall number", info.ID, 4000, retEPERM},
		{"foreign architecture", foreignArch(), read, retEPERM},
	}
	if runtime.GOARCH == "amd64" {
		tests = append(tests, struct {
			name      string
			auditArch arch.AuditArch
			nr        uint32
			want      uint32
		}{"x32 abi", info.ID, 0x40000000 | 0, retENOSYS})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := runVM(t, vm, tt.auditArch, tt.nr, nil); got != tt.want {
				t.Errorf("got %#x, want %#x", got, tt.want)
			}
		})
	}
}

// TestFilterMatchesSpec runs every syscall of the architecture's table,
// with several argument vectors, through both the assembled BPF and a plain
// Go reading of the spec. A difference means the assembler or the group
// ordering changed the policy's meaning.
func TestFilterMatchesSpec(t *testing.T) {
	c, err := compile()
	if err != nil {
		t.Fatal(err)
	}
	info := archInfo(t)
	vm := filterVM(t)
	argSets := [][]uint64{
		nil,
		{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)},
		{sigchld},
		{unix.CLONE_VM | unix.CLONE_VFORK | sigchld},
		{nsCloneFlags},
		{unix.AF_INET, unix.TIOCSTI},
		{unix.AF_VSOCK, unix.TIOCSTI | 1<<40},
		{8, unix.TIOCLINUX},
		{0xffffffff, unix.TCGETS},
		{addrNoRandomize},
		{unix.AF_ALG},
		{38},
		{39},
		{unix.AF_VSOCK | 1<<32},
	}
	names := make([]string, 0, len(info.SyscallNames))
	for name := range info.SyscallNames {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		nr := uint32(info.SyscallNames[name])
		for _, args := range argSets {
			want := c.spec.eval(name, args)
			if got := runVM(t, vm, info.ID, nr, args); got != want {
				t.Errorf("%s(%#x): bpf returns %#x, spec says %#x", name, args, got, want)
			}
		}
	}
}

// TestPoliciesAvoidReloadBug checks the invariant spec.policies relies on:
// argument conditions appear only in a policy whose single group holds a
// single syscall name, so no syscall number check follows an argument load.
func TestPoliciesAvoidReloadBug(t *testing.T) {
	policies := compiledPolicies(t)
	for i, p := range policies {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			names := map[string]bool{}
			conditional := false
			for _, g := range p.Syscalls {
				for _, r := range g.NamesWithCondtions {
					conditional = true
					names[r.Name] = true
				}
			}
			if !conditional {
				return
			}
			if len(p.Syscalls) != 1 || len(p.Syscalls[0].Names) != 0 || len(names) != 1 {
				t.Errorf("policy mixes argument conditions with other rules: %+v", p.Syscalls)
			}
		})
	}
}

func TestLow32Equal(t *testing.T) {
	tests := []struct {
		arg  uint64
		want bool
	}{
		{unix.TIOCSTI, true},
		{unix.TIOCSTI | 0xdead<<32, true},
		{unix.TIOCSTI | 1, false},
		{unix.TIOCSTI &^ 2, false},
		{0, false},
		{0xffffffff, false},
	}
	conds := low32Equal(0, unix.TIOCSTI)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%#x", tt.arg), func(t *testing.T) {
			if got := matchAll(conds, []uint64{tt.arg}); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// eval is the reference meaning of s: deny, then enosys, then allow, first
// match wins, EPERM by default.
func (s spec) eval(name string, args []uint64) uint32 {
	matches := func(rules []bpfseccomp.NameWithConditions) bool {
		for _, r := range rules {
			if r.Name == name && matchAll(r.Conditions, args) {
				return true
			}
		}
		return false
	}
	switch {
	case slices.Contains(s.deny, name), matches(s.denyIf):
		return retEPERM
	case slices.Contains(s.enosys, name):
		return retENOSYS
	case slices.Contains(s.allow, name), matches(s.allowIf):
		return retAllow
	}
	return retEPERM
}

func matchAll(conds bpfseccomp.ArgumentConditions, args []uint64) bool {
	for _, c := range conds {
		var a uint64
		if int(c.Argument) < len(args) {
			a = args[c.Argument]
		}
		var ok bool
		switch c.Operation {
		case bpfseccomp.Equal:
			ok = a == c.Value
		case bpfseccomp.NotEqual:
			ok = a != c.Value
		case bpfseccomp.LessThan:
			ok = a < c.Value
		case bpfseccomp.LessOrEqual:
			ok = a <= c.Value
		case bpfseccomp.GreaterThan:
			ok = a > c.Value
		case bpfseccomp.GreaterOrEqual:
			ok = a >= c.Value
		case bpfseccomp.BitsSet:
			ok = a&c.Value != 0
		case bpfseccomp.BitsNotSet:
			ok = a&c.Value == 0
		default:
			panic("unknown operation " + c.Operation)
		}
		if !ok {
			return false
		}
	}
	return true
}

// compiledPolicies returns the box policy's go-seccomp-bpf policies, main first.
func compiledPolicies(t *testing.T) []bpfseccomp.Policy {
	t.Helper()
	c, err := compile()
	if err != nil {
		t.Fatal(err)
	}
	policies, err := c.spec.policies()
	if err != nil {
		t.Fatal(err)
	}
	return policies
}

func archInfo(t *testing.T) *arch.Info {
	t.Helper()
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatalf("look up syscall table: %v", err)
	}
	return info
}

func existsOnSomeArch(name string) bool {
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64, arch.I386, arch.ARM} {
		if _, ok := info.SyscallNames[name]; ok {
			return true
		}
	}
	return false
}

func foreignArch() arch.AuditArch {
	if runtime.GOARCH == "amd64" {
		return arch.I386.ID
	}
	return arch.ARM.ID
}

// filterStack is the assembled stack as x/net/bpf programs, in load order.
type filterStack []*bpf.VM

func filterVM(t *testing.T) filterStack {
	t.Helper()
	c, err := compile()
	if err != nil {
		t.Fatalf("compile policy: %v", err)
	}
	progs, err := c.spec.programs()
	if err != nil {
		t.Fatal(err)
	}
	var stack filterStack
	for i, insts := range progs {
		vm, err := bpf.NewVM(insts)
		if err != nil {
			t.Fatalf("load program %d into bpf vm: %v", i, err)
		}
		stack = append(stack, vm)
	}
	return stack
}

// evalBPF runs syscall name with args through the assembled filter stack.
func evalBPF(t *testing.T, auditArch arch.AuditArch, name string, args ...uint64) uint32 {
	t.Helper()
	info := archInfo(t)
	table, ok := tableName(info, name)
	if !ok {
		t.Fatalf("%s does not exist on %s", name, info.Name)
	}
	nr := info.SyscallNames[table]
	return runVM(t, filterVM(t), auditArch, uint32(nr), args)
}

// runVM builds a struct seccomp_data and runs every program of the stack on
// it, combining the results as the kernel's seccomp_run_filters does: newest
// program first, and a result replaces the current one only if its action is
// strictly more severe (smaller as a signed value).
//
// The kernel loads 32-bit words in host order (little-endian on amd64 and
// arm64), while x/net/bpf loads them big-endian; so each word is stored
// big-endian at the offset where the kernel has it: the low half of a 64-bit
// argument first.
func runVM(t *testing.T, stack filterStack, auditArch arch.AuditArch, nr uint32, args []uint64) uint32 {
	t.Helper()
	var data [64]byte
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], uint32(auditArch))
	for i, a := range args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(data[off:], uint32(a))
		binary.BigEndian.PutUint32(data[off+4:], uint32(a>>32))
	}
	actionOnly := func(ret uint32) int32 { return int32(ret & unix.SECCOMP_RET_ACTION_FULL) }
	result := retAllow
	for i := len(stack) - 1; i >= 0; i-- {
		ret, err := stack[i].Run(data[:])
		if err != nil {
			t.Fatalf("run program %d: %v", i, err)
		}
		if actionOnly(uint32(ret)) < actionOnly(result) {
			result = uint32(ret)
		}
	}
	return result
}

// TestSearchProgramMatchesChain runs every syscall number (and numbers past the
// table, x32 numbers and the extremes), through the native and a foreign
// architecture, through both the main program as installed (searchProgram) and
// the main policy as go-seccomp-bpf assembles it (a chain of comparisons):
// they must agree on every one. The search must also be much shorter.
func TestSearchProgramMatchesChain(t *testing.T) {
	policies := compiledPolicies(t)
	chainInsts, err := policies[0].Assemble()
	if err != nil {
		t.Fatal(err)
	}
	searchInsts, err := searchProgram(policies[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := bpf.NewVM(chainInsts)
	if err != nil {
		t.Fatal(err)
	}
	search, err := bpf.NewVM(searchInsts)
	if err != nil {
		t.Fatal(err)
	}
	var nrs []uint32
	for nr := uint32(0); nr < 2048; nr++ {
		nrs = append(nrs, nr, 0x40000000|nr)
	}
	nrs = append(nrs, 0x3fffffff, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff)
	allowed := 0
	for _, a := range []arch.AuditArch{archInfo(t).ID, foreignArch(), 0} {
		for _, nr := range nrs {
			want := runVM(t, filterStack{chain}, a, nr, nil)
			if got := runVM(t, filterStack{search}, a, nr, nil); got != want {
				t.Errorf("arch %#x, syscall %#x: search returns %#x, chain %#x", a, nr, got, want)
			}
			if want == retAllow {
				allowed++
			}
		}
	}
	if allowed < 250 {
		t.Errorf("only %d numbers allowed: the comparison exercised little", allowed)
	}
	if len(searchInsts) >= len(chainInsts) {
		t.Errorf("search program of %d instructions, chain %d", len(searchInsts), len(chainInsts))
	}
	t.Logf("chain %d instructions, search %d", len(chainInsts), len(searchInsts))
}

// TestSearchRunsLongJumps checks the search over many runs, where the first
// comparisons must jump further than a conditional jump reaches: every number
// gets its run's action.
func TestSearchRunsLongJumps(t *testing.T) {
	var runs []actionRun
	actions := []bpfseccomp.Action{bpfseccomp.ActionAllow, actionEPERM, actionENOSYS}
	for i := range 1000 {
		runs = append(runs, actionRun{lo: uint32(3 * i), action: actions[i%3], block: -1})
	}
	insts := append([]bpf.Instruction{bpf.LoadAbsolute{Off: dataNr, Size: 4}}, searchRuns(runs)...)
	if len(insts) < 600 {
		t.Fatalf("%d instructions: no long jump needed", len(insts))
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	for nr := uint32(0); nr < 3100; nr++ {
		run := min(int(nr/3), len(runs)-1)
		want := uint32(runs[run].action)
		if got := runVM(t, filterStack{vm}, 0, nr, nil); got != want {
			t.Fatalf("syscall %d: %#x, want %#x (run %d)", nr, got, want, run)
		}
	}
}

//go:build linux && (amd64 || arm64)

package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"

	bpfseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// nsCloneFlags are the clone(2) flags that create a namespace
// (0x7E020000). CLONE_NEWTIME is absent on purpose: its value overlaps the
// exit-signal byte of legacy clone(2), so it can only be requested through
// clone3(2) or unshare(2), and both are refused.
const nsCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// actionEPERM and actionENOSYS are SECCOMP_RET_ERRNO with the errno in the
// low 16 bits. go-seccomp-bpf turns a bare ActionErrno into EPERM itself, but
// spelling the errno out keeps the filter independent of that convention.
const (
	actionEPERM  = bpfseccomp.ActionErrno | bpfseccomp.Action(unix.EPERM)
	actionENOSYS = bpfseccomp.ActionErrno | bpfseccomp.Action(unix.ENOSYS)
)

// explicitDeny lists the syscalls that fail with EPERM whatever the moby
// profile says. Most are already outside moby's unprivileged allowlist; naming
// them here keeps them denied if a future profile starts to allow them, and
// gives doctor and the tests a list to check. Names that do not exist on the
// running architecture are dropped.
var explicitDeny = []string{
	// Changing the mount table or the root directory would let the box undo
	// the filesystem view it was given.
	"mount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",

	// Namespaces: a new user namespace hands the box CAP_SYS_ADMIN over code
	// that is otherwise root-only, the source of many local privilege
	// escalations (for example CVE-2022-0185, CVE-2023-32233). clone(2) with
	// namespace flags is refused by an argument rule, clone3(2) by ENOSYS.
	"unshare", "setns",

	// Looking into or controlling other processes.
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",

	// Loading, replacing or introspecting kernel code.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "get_kernel_syms", "query_module", "lookup_dcookie",

	// Large kernel attack surface that untrusted code has no need for.
	"bpf", "perf_event_open", "userfaultfd", "fanotify_init",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Moby allows these; Python and bash never use them. modify_ldt (16-bit
	// segments, for Wine) has had its own privilege escalations
	// (CVE-2015-5157, CVE-2017-17053); memfd_secret takes pages out of the
	// kernel's direct map.
	"modify_ldt", "memfd_secret",

	// Kernel keyrings are not isolated per box.
	"keyctl", "add_key", "request_key",

	// Host-global state: power, swap, accounting, clocks, quotas, consoles.
	"reboot", "swapon", "swapoff", "acct",
	"clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "stime",
	"quotactl", "quotactl_fd", "nfsservctl", "vhangup", "syslog",
	"sysfs", "_sysctl", "ustat", "uselib",

	// File handles bypass the mount namespace: CVE-2014-3519 ("shocker")
	// read host files through open_by_handle_at(2).
	"open_by_handle_at", "name_to_handle_at",

	// Raw I/O port access.
	"iopl", "ioperm",
}

// explicitENOSYS lists the syscalls that fail with ENOSYS. clone3(2) passes
// its flags through a pointer that seccomp cannot inspect, so it is made to
// look absent: glibc then falls back to clone(2), whose flags the filter sees.
var explicitENOSYS = []string{"clone3"}

// explicitDenyIf lists argument-dependent EPERM rules that take precedence over
// the allowlist.
var explicitDenyIf = []bpfseccomp.NameWithConditions{
	// clone(2) creating any namespace. The kernel reads only the low 32 bits
	// of the legacy clone flags, and every namespace flag lives there.
	{Name: "clone", Conditions: bpfseccomp.ArgumentConditions{
		{Argument: 0, Operation: bpfseccomp.BitsSet, Value: nsCloneFlags},
	}},
	// TIOCSTI pushes bytes into a terminal's input queue, so a box that
	// shares a terminal could type commands into the shell outside it
	// (CVE-2017-5226 in bubblewrap). TIOCLINUX can do the same on virtual
	// consoles.
	{Name: "ioctl", Conditions: low32Equal(1, unix.TIOCSTI)},
	{Name: "ioctl", Conditions: low32Equal(1, unix.TIOCLINUX)},
	// Device nodes. The host kernel refuses them without CAP_MKNOD, but a
	// runtime with a kernel of its own need not: gVisor's lets the box's user
	// make block and character devices in its tmpfs (inert there, ENXIO on
	// open). Both types, and only they, have the S_IFCHR bit (0o020000) of the
	// mode set (S_IFBLK is 0o060000); FIFOs, sockets and regular files do not,
	// and stay allowed. The mode is a 16-bit umode_t, so its high bits are
	// no way around the rule.
	{Name: "mknod", Conditions: bpfseccomp.ArgumentConditions{
		{Argument: 1, Operation: bpfseccomp.BitsSet, Value: unix.S_IFCHR},
	}},
	{Name: "mknodat", Conditions: bpfseccomp.ArgumentConditions{
		{Argument: 2, Operation: bpfseccomp.BitsSet, Value: unix.S_IFCHR},
	}},
	// A negative nice value (a higher priority than the host gave). The host
	// kernel refuses it without CAP_SYS_NICE (the box's RLIMIT_NICE is 0);
	// gVisor's kernel allowed it. The value is an int: its sign is bit 31,
	// whatever the register's high 32 bits hold.
	{Name: "setpriority", Conditions: bpfseccomp.ArgumentConditions{
		{Argument: 2, Operation: bpfseccomp.BitsSet, Value: 1 << 31},
	}},
	// The kernel's device events (a netlink socket of protocol
	// NETLINK_KOBJECT_UEVENT): a box whose network namespace belongs to the
	// host's user namespace (docker's) receives the host's, which tell of its
	// disks, USB devices and network interfaces. A native box's namespace gets
	// none, and nothing in a box has a use for them.
	{Name: "socket", Conditions: append(low32Equal(0, unix.AF_NETLINK), low32Equal(2, unix.NETLINK_KOBJECT_UEVENT)...)},
}

// low32Equal matches when the low 32 bits of argument arg equal v, whatever
// the high 32 bits hold. Deny rules on int-typed arguments need this: the
// kernel truncates such an argument to 32 bits, so a plain 64-bit Equal could
// be bypassed by setting high bits (CVE-2019-10063 in flatpak). The match is
// built as "no bit outside v is set" plus "each bit of v is set", since
// go-seccomp-bpf has no masked comparison.
func low32Equal(arg uint32, v uint32) bpfseccomp.ArgumentConditions {
	conds := bpfseccomp.ArgumentConditions{
		{Argument: arg, Operation: bpfseccomp.BitsNotSet, Value: uint64(^v)},
	}
	for bit := uint32(1); bit != 0; bit <<= 1 {
		if v&bit != 0 {
			conds = append(conds, bpfseccomp.Condition{Argument: arg, Operation: bpfseccomp.BitsSet, Value: uint64(bit)})
		}
	}
	return conds
}

// spec is the box's policy before assembly. The first matching tier decides:
// deny and denyIf (EPERM), enosys (ENOSYS), allow and allowIf (allowed); a
// syscall that matches none fails with EPERM. spec.policies explains how this
// becomes BPF.
type spec struct {
	deny    []string                        // EPERM unconditionally.
	denyIf  []bpfseccomp.NameWithConditions // EPERM when the arguments match.
	enosys  []string                        // ENOSYS unconditionally.
	allow   []string                        // Allowed unconditionally.
	allowIf []bpfseccomp.NameWithConditions // Allowed when the arguments match.

	// unknown holds names from the inputs that the running architecture's
	// syscall table does not have (32-bit variants, other architectures,
	// syscalls newer than go-seccomp-bpf's table). They stay denied.
	unknown []string
}

// compiled is the assembled filter stack, built once per process.
type compiled struct {
	spec    spec
	filters [][]unix.SockFilter // In load order.
}

var compile = sync.OnceValues(func() (*compiled, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("look up syscall table: %w", err)
	}
	s, err := buildSpec(moby.DefaultProfile(), info, runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	filters, err := assemble(s)
	if err != nil {
		return nil, err
	}
	return &compiled{spec: s, filters: filters}, nil
})

// DeniedSyscalls returns, sorted, the syscalls the filter refuses whatever
// their arguments: clone3 with ENOSYS, the rest with EPERM. It leaves out the
// argument-dependent rules (clone with namespace flags, ioctl TIOCSTI and
// TIOCLINUX, personality and socket outside moby's allowed values) and the
// syscalls that are denied only by default. It returns nil if the policy
// cannot be built; Install reports that error. The caller may modify the
// returned slice.
func DeniedSyscalls() []string {
	c, err := compile()
	if err != nil {
		return nil
	}
	names := slices.Concat(c.spec.deny, c.spec.enosys)
	sort.Strings(names)
	return names
}

// buildSpec combines the explicit rules above with the rules of the moby
// default profile that apply to an unprivileged container on goarch, keeping
// only names in info's syscall table.
func buildSpec(profile *moby.Seccomp, info *arch.Info, goarch string) (spec, error) {
	var s spec
	resolve := func(name string) (string, bool) {
		if table, ok := tableName(info, name); ok {
			return table, true
		}
		s.unknown = append(s.unknown, name)
		return "", false
	}

	var (
		deny, enosys, allow []string
		denyIf, allowIf     []bpfseccomp.NameWithConditions
	)
	deny = append(deny, explicitDeny...)
	enosys = append(enosys, explicitENOSYS...)
	denyIf = append(denyIf, explicitDenyIf...)

	if profile.DefaultAction != specs.ActErrno ||
		(profile.DefaultErrnoRet != nil && *profile.DefaultErrnoRet != uint(unix.EPERM)) {
		return spec{}, fmt.Errorf("moby default profile: default action %s is not errno EPERM", profile.DefaultAction)
	}
	for _, rule := range profile.Syscalls {
		if !mobyRuleApplies(rule, goarch) {
			continue
		}
		names := slices.Clone(rule.Names)
		if rule.Name != "" {
			names = append(names, rule.Name)
		}
		conds, err := translateArgs(rule.Args)
		if err != nil {
			return spec{}, fmt.Errorf("moby default profile: rule for %v: %w", names, err)
		}

		var uncond *[]string
		var cond *[]bpfseccomp.NameWithConditions
		switch {
		case rule.Action == specs.ActAllow:
			uncond, cond = &allow, &allowIf
		case rule.Action == specs.ActErrno && (rule.ErrnoRet == nil || *rule.ErrnoRet == uint(unix.EPERM)):
			uncond, cond = &deny, &denyIf
		case rule.Action == specs.ActErrno && *rule.ErrnoRet == uint(unix.ENOSYS) && conds == nil:
			uncond = &enosys
		default:
			return spec{}, fmt.Errorf("moby default profile: rule for %v: unsupported action %s", names, rule.Action)
		}
		for _, name := range names {
			if conds == nil {
				*uncond = append(*uncond, name)
			} else {
				*cond = append(*cond, bpfseccomp.NameWithConditions{Name: name, Conditions: conds})
			}
		}
	}

	// Earlier tiers win: an unconditional rule makes every later rule for the
	// same name dead, and go-seccomp-bpf rejects a group that holds both an
	// unconditional and a conditional rule for one name.
	done := map[string]bool{}
	s.deny = uniqueKnown(deny, done, resolve)
	markDone(s.deny, done)
	s.denyIf = conditionalKnown(denyIf, done, resolve)
	s.enosys = uniqueKnown(enosys, done, resolve)
	markDone(s.enosys, done)
	s.allow = uniqueKnown(allow, done, resolve)
	markDone(s.allow, done)
	s.allowIf = conditionalKnown(allowIf, done, resolve)
	sort.Strings(s.unknown)
	s.unknown = slices.Compact(s.unknown)
	return s, nil
}

// mobyRuleApplies reports whether a moby rule is in force for an
// unprivileged container (no capabilities) on goarch. Rules gated on
// a kernel version are skipped, which only makes the filter stricter: in
// moby v0.2.4 that gate guards ptrace and process_vm_*, denied here anyway.
func mobyRuleApplies(rule *moby.Syscall, goarch string) bool {
	if inc := rule.Includes; inc != nil {
		if len(inc.Caps) > 0 || inc.MinKernel != nil {
			return false
		}
		if len(inc.Arches) > 0 && !slices.Contains(inc.Arches, goarch) {
			return false
		}
	}
	if exc := rule.Excludes; exc != nil {
		// The box holds no capabilities, so exc.Caps never removes a rule.
		if exc.MinKernel != nil || slices.Contains(exc.Arches, goarch) {
			return false
		}
	}
	return true
}

// translateArgs converts moby (libseccomp) argument comparisons into
// go-seccomp-bpf conditions, all of which must match. It returns nil for a
// rule without arguments. Both sides compare all 64 bits.
func translateArgs(args []specs.LinuxSeccompArg) (bpfseccomp.ArgumentConditions, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var conds bpfseccomp.ArgumentConditions
	seen := map[uint]bool{}
	for _, a := range args {
		if a.Index > 5 {
			return nil, fmt.Errorf("argument index %d out of range", a.Index)
		}
		// runc splits repeated comparisons of one argument into separate OR
		// rules (opencontainers/runc#2735); refuse rather than guess.
		if seen[a.Index] {
			return nil, fmt.Errorf("argument %d compared twice", a.Index)
		}
		seen[a.Index] = true

		c := bpfseccomp.Condition{Argument: uint32(a.Index), Value: a.Value}
		switch a.Op {
		case specs.OpEqualTo:
			c.Operation = bpfseccomp.Equal
		case specs.OpNotEqual:
			c.Operation = bpfseccomp.NotEqual
		case specs.OpLessThan:
			c.Operation = bpfseccomp.LessThan
		case specs.OpLessEqual:
			c.Operation = bpfseccomp.LessOrEqual
		case specs.OpGreaterThan:
			c.Operation = bpfseccomp.GreaterThan
		case specs.OpGreaterEqual:
			c.Operation = bpfseccomp.GreaterOrEqual
		case specs.OpMaskedEqual:
			// (arg & Value) == ValueTwo is expressible only when it
			// tests that no masked bit is set.
			if a.ValueTwo != 0 {
				return nil, fmt.Errorf("masked comparison with non-zero value %#x", a.ValueTwo)
			}
			c.Operation = bpfseccomp.BitsNotSet
		default:
			return nil, fmt.Errorf("unsupported operator %s", a.Op)
		}
		conds = append(conds, c)
	}
	return conds, nil
}

// tableAliases maps a syscall name used by moby, libseccomp and glibc to the
// name go-seccomp-bpf's table uses where the two differ: its aarch64 table
// calls syscall 79 "fstatat", which everyone else calls newfstatat. Without
// the alias, stat(3) would fail on arm64.
var tableAliases = map[string]string{
	"newfstatat": "fstatat",
}

// tableName returns the name under which info's table holds the syscall.
func tableName(info *arch.Info, name string) (string, bool) {
	if _, ok := info.SyscallNames[name]; ok {
		return name, true
	}
	if alias, ok := tableAliases[name]; ok {
		if _, ok := info.SyscallNames[alias]; ok {
			return alias, true
		}
	}
	return "", false
}

func uniqueKnown(names []string, done map[string]bool, resolve func(string) (string, bool)) []string {
	var out []string
	for _, name := range names {
		name, ok := resolve(name)
		if !ok || done[name] || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func conditionalKnown(rules []bpfseccomp.NameWithConditions, done map[string]bool, resolve func(string) (string, bool)) []bpfseccomp.NameWithConditions {
	var out []bpfseccomp.NameWithConditions
	for _, r := range rules {
		name, ok := resolve(r.Name)
		if !ok || done[name] {
			continue
		}
		r.Name = name
		out = append(out, r)
	}
	return out
}

func markDone(names []string, done map[string]bool) {
	for _, name := range names {
		done[name] = true
	}
}

// policies splits s into go-seccomp-bpf policies, main first; programs
// makes them one program.
//
// go-seccomp-bpf v1.6.0 loads a syscall argument into the accumulator to test
// it and never reloads the syscall number afterwards, so in one policy every
// rule after an argument-conditioned rule compares the argument, not the
// syscall number (for example, a failed clone flag check made ioctl(fd,
// TCGETS) return EPERM). Each policy below is therefore a shape the library
// assembles correctly:
//
//   - The main policy has no argument conditions. It returns EPERM for deny,
//     ENOSYS for enosys, allows allow and every name that has argument rules,
//     and returns EPERM for everything else.
//   - Each name with argument rules gets its own policy holding that single
//     syscall, whose argument checks end in the policy's default action: EPERM
//     when a denyIf rule matches or no allowIf rule matches, allow otherwise.
//
// Loaded as a stack, the kernel would run every filter and keep the most
// severe action, which is exactly what spec.eval describes; programs joins
// them into one program that means the same.
func (s spec) policies() ([]bpfseccomp.Policy, error) {
	rules := map[string][]bpfseccomp.ArgumentConditions{}
	for _, r := range s.denyIf {
		rules[r.Name] = append(rules[r.Name], r.Conditions)
	}
	allowIf := map[string][]bpfseccomp.ArgumentConditions{}
	for _, r := range s.allowIf {
		allowIf[r.Name] = append(allowIf[r.Name], r.Conditions)
	}
	for name, alternatives := range allowIf {
		// Deny when no alternative matches: the conjunction of the
		// negated conditions, one per alternative.
		var none bpfseccomp.ArgumentConditions
		for _, conds := range alternatives {
			if len(conds) != 1 {
				return nil, fmt.Errorf("negate allow rule for %s: %d conditions, want 1", name, len(conds))
			}
			c := conds[0]
			op, ok := negated[c.Operation]
			if !ok {
				return nil, fmt.Errorf("negate allow rule for %s: unsupported operation %s", name, c.Operation)
			}
			none = append(none, bpfseccomp.Condition{Argument: c.Argument, Operation: op, Value: c.Value})
		}
		rules[name] = append(rules[name], none)
	}

	conditional := make([]string, 0, len(rules))
	for name := range rules {
		conditional = append(conditional, name)
	}
	sort.Strings(conditional)

	var mainAllow []string
	mainAllow = append(mainAllow, s.allow...)
	for _, name := range conditional {
		if !slices.Contains(mainAllow, name) {
			mainAllow = append(mainAllow, name)
		}
	}
	out := []bpfseccomp.Policy{{
		DefaultAction: bpfseccomp.ActionErrno, // go-seccomp-bpf emits errno EPERM (so does searchProgram).
		Syscalls: []bpfseccomp.SyscallGroup{
			{Names: s.deny, Action: actionEPERM},
			{Names: s.enosys, Action: actionENOSYS},
			{Names: mainAllow, Action: bpfseccomp.ActionAllow},
		},
	}}
	for _, name := range conditional {
		var group []bpfseccomp.NameWithConditions
		for _, conds := range rules[name] {
			group = append(group, bpfseccomp.NameWithConditions{Name: name, Conditions: conds})
		}
		out = append(out, bpfseccomp.Policy{
			DefaultAction: bpfseccomp.ActionAllow,
			Syscalls: []bpfseccomp.SyscallGroup{
				{NamesWithCondtions: group, Action: actionEPERM},
			},
		})
	}
	return out, nil
}

// negated maps each operation to its exact complement over 64-bit values.
var negated = map[bpfseccomp.Operation]bpfseccomp.Operation{
	bpfseccomp.Equal:          bpfseccomp.NotEqual,
	bpfseccomp.NotEqual:       bpfseccomp.Equal,
	bpfseccomp.LessThan:       bpfseccomp.GreaterOrEqual,
	bpfseccomp.GreaterOrEqual: bpfseccomp.LessThan,
	bpfseccomp.LessOrEqual:    bpfseccomp.GreaterThan,
	bpfseccomp.GreaterThan:    bpfseccomp.LessOrEqual,
	bpfseccomp.BitsSet:        bpfseccomp.BitsNotSet,
	bpfseccomp.BitsNotSet:     bpfseccomp.BitsSet,
}

// programs assembles s for the running architecture: one program (a list, for
// the loaders, which take a stack). It is the main policy as a search over the
// syscall number (searchProgram), in which each argument-conditioned syscall
// goes on to its own policy's program as go-seccomp-bpf assembles it. That
// means what loading them as a stack would (main program first): the main
// policy allows every conditioned syscall, and each conditioned program allows
// every other syscall, so the most severe of their results is the conditioned
// program's for its syscall and the main program's for the rest. The program
// first checks seccomp_data.arch: a syscall made through another ABI (32-bit int
// 0x80 on x86_64, AArch32 on arm64) gets the main policy's default EPERM, and on
// x86_64 an x32 syscall gets ENOSYS, so a rule cannot be bypassed by switching
// ABI.
func (s spec) programs() ([][]bpf.Instruction, error) {
	policies, err := s.policies()
	if err != nil {
		return nil, fmt.Errorf("split seccomp policy: %w", err)
	}
	blocks := map[string][]bpf.Instruction{}
	for i, p := range policies[1:] {
		insts, err := p.Assemble()
		if err != nil {
			return nil, fmt.Errorf("assemble seccomp policy %d: %w", i+1, err)
		}
		blocks[p.Syscalls[0].NamesWithCondtions[0].Name] = insts
	}
	prog, err := searchProgram(policies[0], blocks)
	if err != nil {
		return nil, fmt.Errorf("assemble the main seccomp policy: %w", err)
	}
	return [][]bpf.Instruction{prog}, nil
}

// Offsets in struct seccomp_data.
const (
	dataNr   = 0
	dataArch = 4
)

// searchProgram assembles p, a policy without argument conditions (the main
// one), as go-seccomp-bpf would in meaning, but as a binary search over the
// syscall number instead of the library's chain of one comparison per syscall.
// With ~350 syscalls named, the chain ran up to 370 instructions for every
// syscall the box makes, and the kernel runs the program once per syscall
// number when it loads it (to cache which numbers are always allowed), with
// interrupts off: ~0.3 ms for every box. The search runs about ten instructions.
//
// The program: the architecture check (another ABI gets p's default action),
// on x86_64 the x32 check (ENOSYS), then the search. The syscall numbers are
// split into runs of equal action (a number no group names has the default);
// each comparison halves the runs left, and each run ends in its action or, for
// a syscall in blocks, in a jump to that syscall's program, which the search is
// followed by, whole: blocks maps syscall names to programs the search hands
// them to instead of returning p's action.
func searchProgram(p bpfseccomp.Policy, blocks map[string][]bpf.Instruction) ([]bpf.Instruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	actions := map[uint32]bpfseccomp.Action{}
	for _, g := range p.Syscalls {
		if len(g.NamesWithCondtions) > 0 {
			return nil, fmt.Errorf("a search program takes no argument conditions (%s)", g.NamesWithCondtions[0].Name)
		}
		for _, name := range g.Names {
			nr, ok := info.SyscallNames[name]
			if !ok {
				return nil, fmt.Errorf("unknown syscall %q on %s", name, info.Name)
			}
			if _, seen := actions[uint32(nr)]; !seen { // the first group naming it decides, as in the chain
				actions[uint32(nr)] = retAction(g.Action)
			}
		}
	}
	names := make([]string, 0, len(blocks))
	for name := range blocks {
		names = append(names, name)
	}
	slices.Sort(names)
	blockOf := map[uint32]int{} // syscall number -> index in names
	for i, name := range names {
		nr, ok := info.SyscallNames[name]
		if !ok {
			return nil, fmt.Errorf("unknown syscall %q on %s", name, info.Name)
		}
		if _, named := actions[uint32(nr)]; !named {
			return nil, fmt.Errorf("a program for %s, which the policy does not name", name)
		}
		blockOf[uint32(nr)] = i
	}
	nrs := make([]uint32, 0, len(actions))
	for nr := range actions {
		nrs = append(nrs, nr)
	}
	slices.Sort(nrs)
	// runs[i] covers the numbers from runs[i].lo up to runs[i+1].lo.
	var runs []actionRun
	set := func(lo uint32, a bpfseccomp.Action, block int) {
		if n := len(runs); n > 0 && runs[n-1].lo == lo {
			runs[n-1].action, runs[n-1].block = a, block
		} else {
			runs = append(runs, actionRun{lo, a, block})
		}
		if n := len(runs); n > 1 && runs[n-2].action == runs[n-1].action && runs[n-2].block == runs[n-1].block {
			runs = runs[:n-1]
		}
	}
	fallback := retAction(p.DefaultAction)
	set(0, fallback, -1)
	for _, nr := range nrs {
		block, ok := blockOf[nr]
		if !ok {
			block = -1
		}
		set(nr, actions[nr], block)
		set(nr+1, fallback, -1)
	}

	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: dataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(fallback)},
		bpf.LoadAbsolute{Off: dataNr, Size: 4},
	}
	if info.ID == arch.X86_64.ID {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: uint32(arch.X32.SeccompMask), SkipFalse: 1},
			bpf.RetConstant{Val: uint32(actionENOSYS)})
	}
	prog = append(prog, searchRuns(runs)...)
	start := make([]int, len(names))
	for i, name := range names {
		start[i] = len(prog)
		prog = append(prog, blocks[name]...)
	}
	for i, ins := range prog {
		if b, ok := ins.(gotoBlock); ok {
			prog[i] = bpf.Jump{Skip: uint32(start[b] - (i + 1))}
		}
	}
	if len(prog) > bpfMaxInsns {
		return nil, fmt.Errorf("search program of %d instructions, more than %d", len(prog), bpfMaxInsns)
	}
	return prog, nil
}

// retAction is what a program returns for action a: go-seccomp-bpf returns
// EPERM for a bare errno action.
func retAction(a bpfseccomp.Action) bpfseccomp.Action {
	if a == bpfseccomp.ActionErrno {
		return actionEPERM
	}
	return a
}

type actionRun struct {
	lo     uint32
	action bpfseccomp.Action
	block  int // the index of the run's program in searchProgram's blocks, or -1: it returns action
}

// gotoBlock is the jump that ends a block's run until searchProgram knows
// where the block starts. It cannot be assembled: a program that kept one
// would fail to load rather than run.
type gotoBlock int

func (b gotoBlock) Assemble() (bpf.RawInstruction, error) {
	return bpf.RawInstruction{}, fmt.Errorf("jump to block %d left unresolved", int(b))
}

// searchRuns returns the search over runs (the accumulator holds the syscall
// number): the left half's code falls through from the comparison, the right
// half's follows it; a jump too long for a conditional jump's 8 bits goes
// through an unconditional one.
func searchRuns(runs []actionRun) []bpf.Instruction {
	if len(runs) == 1 {
		if runs[0].block >= 0 {
			return []bpf.Instruction{gotoBlock(runs[0].block)}
		}
		return []bpf.Instruction{bpf.RetConstant{Val: uint32(runs[0].action)}}
	}
	mid := len(runs) / 2
	left, right := searchRuns(runs[:mid]), searchRuns(runs[mid:])
	var out []bpf.Instruction
	if len(left) <= 255 {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: runs[mid].lo, SkipTrue: uint8(len(left))})
	} else {
		out = append(out,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: runs[mid].lo, SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(left))})
	}
	out = append(out, left...)
	return append(out, right...)
}

// bpfMaxInsns is the kernel's BPF_MAXINSNS limit for one classic BPF program.
const bpfMaxInsns = 4096

func assemble(s spec) ([][]unix.SockFilter, error) {
	progs, err := s.programs()
	if err != nil {
		return nil, err
	}
	filters := make([][]unix.SockFilter, 0, len(progs))
	for i, insts := range progs {
		raw, err := bpf.Assemble(insts)
		if err != nil {
			return nil, fmt.Errorf("assemble bpf program %d: %w", i, err)
		}
		if len(raw) == 0 || len(raw) > bpfMaxInsns {
			return nil, fmt.Errorf("assemble bpf program %d: %d instructions, want 1 to %d", i, len(raw), bpfMaxInsns)
		}
		filter := make([]unix.SockFilter, len(raw))
		for j, r := range raw {
			filter[j] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		filters = append(filters, filter)
	}
	return filters, nil
}

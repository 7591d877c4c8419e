package landlock

import ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

// pinnedABI is the highest Landlock ABI whose rights Restrict and Ruleset
// handle. Raising it changes what sandboxed programs may do (V9
// restricts pathname UNIX socket connects, V10 restricts UDP), so it is a
// deliberate change together with policyFor, config, the docs and the
// tests.
const pinnedABI = 7

// rootAccess is what the rule on "/" grants: reading files, listing
// directories and executing files anywhere, and nothing else.
const rootAccess = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir

// rwDirAccess is what the rule on each rw directory grants: the rights
// of "/" plus every write and create right except creating device
// nodes, and refer (V2+) so files can move between rw directories.
// With CAP_MKNOD a sandboxed process could otherwise mknod the host's
// disk (or /dev/mem) inside /tmp and open it for writing, since a
// Landlock grant on a directory covers every file beneath it regardless
// of its type. The ioctl-on-devices right (V5) is not granted either.
const rwDirAccess = rootAccess |
	ll.AccessFSWriteFile |
	ll.AccessFSTruncate |
	ll.AccessFSRemoveDir |
	ll.AccessFSRemoveFile |
	ll.AccessFSMakeDir |
	ll.AccessFSMakeReg |
	ll.AccessFSMakeSock |
	ll.AccessFSMakeFifo |
	ll.AccessFSMakeSym |
	ll.AccessFSRefer

// devRWAccess is what the rule on each devRW file grants: opening it
// for reading and writing (truncate covers O_TRUNC) and executing it,
// the file rights of go-landlock's RWFiles.
const devRWAccess = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate

// policy is the ruleset Restrict and Ruleset build at one Landlock ABI:
// what it handles (denies unless a rule grants it) and what each rule
// grants. policyFor is the only place that decides which rights apply.
type policy struct {
	// handled is the landlock_create_ruleset(2) argument.
	handled ll.RulesetAttr
	// root is granted beneath "/", rwDir beneath each rw directory and
	// devRW on each devRW file.
	root, rwDir, devRW uint64
	// connect is granted on each connect port: connecting to it over
	// TCP. It is 0 below V4, where TCP is not handled and there is no
	// rule to add.
	connect uint64
}

// policyFor returns the policy at abi, between 1 and pinnedABI: the
// ruleset handles every right that ABI knows, and each grant is cut
// down to the handled rights, as go-landlock's best-effort mode does.
// On V1 that drops refer from rwDir, so files cannot move between rw
// directories (the kernel always denies it below V2), and truncate,
// which V1 and V2 cannot restrict anywhere.
func policyFor(abi int) policy {
	var h ll.RulesetAttr
	if abi >= 1 {
		h.HandledAccessFS = ll.AccessFSExecute |
			ll.AccessFSWriteFile |
			ll.AccessFSReadFile |
			ll.AccessFSReadDir |
			ll.AccessFSRemoveDir |
			ll.AccessFSRemoveFile |
			ll.AccessFSMakeChar |
			ll.AccessFSMakeDir |
			ll.AccessFSMakeReg |
			ll.AccessFSMakeSock |
			ll.AccessFSMakeFifo |
			ll.AccessFSMakeBlock |
			ll.AccessFSMakeSym
	}
	if abi >= 2 {
		h.HandledAccessFS |= ll.AccessFSRefer
	}
	if abi >= 3 {
		h.HandledAccessFS |= ll.AccessFSTruncate
	}
	if abi >= 4 {
		// With no bind rule, every TCP bind(2) is denied.
		h.HandledAccessNet = ll.AccessNetBindTCP | ll.AccessNetConnectTCP
	}
	if abi >= 5 {
		h.HandledAccessFS |= ll.AccessFSIoctlDev
	}
	if abi >= 6 {
		h.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	// V7 only adds audit logging flags to landlock_restrict_self(2),
	// which stay at their defaults: nothing to handle.
	return policy{
		handled: h,
		root:    rootAccess & h.HandledAccessFS,
		rwDir:   rwDirAccess & h.HandledAccessFS,
		devRW:   devRWAccess & h.HandledAccessFS,
		connect: ll.AccessNetConnectTCP & h.HandledAccessNet,
	}
}

// grant is what p grants on the file of a rule path of kind k.
func (p policy) grant(k pathKind) uint64 {
	switch k {
	case rootPath:
		return p.root
	case rwPath:
		return p.rwDir
	default:
		return p.devRW
	}
}

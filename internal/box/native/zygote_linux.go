package native

import (
	"bytes"
	"context"
	_ "embed" // zygoteSource
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/linux/landlock"
	"github.com/moat-sandbox/moat/internal/linux/seccomp"
)

// The zygote: one preloaded interpreter per session spec, forked into each fresh box.
//
// Starting a Python interpreter costs about 20 ms of CPU before the first line of
// code, and importing pandas 400 ms more; forking one that has done both costs 1 to
// 4 ms. A warm-pool box made from a zygote is therefore cheap enough to make as fast
// as boxes are used (box.SessionSpec.Zygote; the engine's warm pool asks for it).
//
// # Processes
//
//	server                 zygote box (made like any box, by init)
//	------                 ---------------------------------------
//	                       init (PID 1, Go): builds the root as for a box, keeps
//	                         CAP_SYS_ADMIN, SETUID, SETGID and NET_ADMIN in the
//	                         bounding set, starts Z as root of the user namespace U
//	                       Z (Python, zygote.py): the runner, preloaded; no hook
//	request + 5 fds  --->  Z: unshare(CLONE_NEWPID), fork J, setns back
//	                       J (PID 1 of a new PID namespace): new mount, network,
//	                         IPC, UTS namespaces; fresh /tmp, /workspace, /dev/shm,
//	                         /proc (masked as init masks it); lo up
//	hello (SCM_CREDENTIALS) <-- J
//	cgroup.New (v2: AddProc(J)); a Landlock ruleset built on J's root (/proc/J/root)
//	go + ruleset fd  --->  J: (v1: J moves itself into the cgroup through the
//	  (+ v1 tasks fds)       tasks files sent); cgroup namespace; rlimits; uid/gid 65534, then a
//	                         user namespace of its own; no capabilities, bounding
//	                         set empty, not dumpable, no_new_privs, Landlock,
//	                         seccomp (the filter a cold box loads)
//	                  <--  confined; J forks L, the interpreter; started
//	                       L: the box's fds 0-4, /workspace; the runner installs
//	                         its hook and says ready, as in a cold session box
//
// From then on the box is a session box (session_linux.go) whose agent is J:
// "exited" when L ends, "start" forks a new L, "signal" reaches L's process group.
// The server serves the workspace's files itself, through the box's /workspace that
// it opened at the hand-over (agentfs_linux.go), and bounds, measures and kills the
// box through its cgroup and J's pidfd.
//
// # Why a zygote box is as isolated as a cold one
//
//   - Nothing untrusted ever runs in Z. It receives only sizes and fds, never code or
//     files; the code reaches L through the request pipe after the fork. So no state
//     of one execution can reach another: each L is a copy of a Z that no execution
//     touched, and Z never sees what its children do.
//   - What every box would make the same way is made once in Z, before its first
//     fork: J's seccomp programs, /proc paths and capset arguments, and the
//     session's fresh __main__, its builtins and the runner's audit hook (built, not
//     installed: L installs it). Each box gets a copy no execution touched, as with
//     everything else in Z. L never frees what Z made (freeing writes to, and so
//     copies, the pages): the modules Z imported for itself are dropped from
//     sys.modules but stay alive, which gives the code nothing it could not import
//     itself with the policy off (the policy denies the collector's object lists,
//     the only way to them).
//   - Each box gets new namespaces of every kind a cold box has (user, mount, PID,
//     network, IPC, UTS, cgroup), its own tmpfs /tmp, /workspace and /dev/shm, its own
//     /proc (it sees only its own processes), its own cgroup with the box's limits,
//     and the code runs as uid/gid 65534 with no capabilities in any namespace,
//     no_new_privs, the box's Landlock ruleset and the same seccomp filter a cold box
//     has (which denies unshare, setns, mount and ptrace). J applies all of it to
//     itself before it forks L, so L never runs unconfined.
//   - The mount, network, IPC and UTS namespaces are owned by U, where the code has
//     no capability; its own user namespace owns nothing. Its uid 65534 is the host's
//     HostBoxUID, as in a cold box.
//   - J shares the code's uid (the box's user namespace can map one id). It is PID 1
//     of the box's PID namespace, so the code's signals reach it only where it has a
//     handler (SIGCHLD, which only wakes it); it is not dumpable, so its memory and
//     fds are out of the code's reach (and ptrace is denied by seccomp anyway). The
//     code can at most break its own box, as it could by exiting.
//   - Per-user kernel quotas that the kernel counts along the user namespaces
//     (inotify instances and watches, queued signals) are charged to the zygote's
//     namespace owner for all its boxes together, where a cold box has an owner of
//     its own (owner_linux.go). J holds each box to an eighth of them
//     (quotaShares), so one box cannot take them all.
//   - The server trusts from J only its first message, sent before any untrusted
//     code exists, and takes J's pid from the kernel (SCM_CREDENTIALS), not from J.
//   - On cgroup v1 J gets the box's tasks files with its go frame, opened by the
//     server (whoever holds them could move any process into the box; the server's
//     own stay with the cgroup until it is destroyed): J writes "0" to each, which
//     moves J itself, and closes them before anything else, so L and the code never
//     hold them.
//   - Forked children share the zygote's address-space layout and Python's hash
//     seed; L reseeds numpy's global generator, and random reseeds itself at fork.
//     Nothing secret lives in Z to be found at a known address.
//
// Killing the zygote's box kills every box forked from it (they live in descendants
// of its PID namespace), so a zygote is retired, not killed, while boxes made from it
// are alive: it ends once the last one does.

//go:embed zygote.py
var zygoteSource []byte

// Where the zygote's files go in its box, beside the runner.
const (
	zygotePyPath     = "/.moat/zygote.py"
	zygoteConfigPath = "/.moat/zygote.json"
)

// zygoteCaps are the capabilities the zygote keeps (in its user namespace only): to
// make namespaces and mounts, to set the box user, to bring a box's lo up.
var zygoteCaps = []int{unix.CAP_SYS_ADMIN, unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_NET_ADMIN}

// Zygote bounds.
const (
	// maxZygotes bounds the zygotes kept; the least recently used is retired first.
	maxZygotes = 4
	// zygoteIdle retires a zygote that made no box for this long.
	zygoteIdle = 5 * time.Minute
	// zygoteBackoff is how long a spec whose zygote failed to start is made cold.
	zygoteBackoff = 30 * time.Second
	// zygoteReserve is added to a zygote box's pids cgroup limit: J, and a spare.
	zygoteReserve = 2
)

// zygoteConfig is /.moat/zygote.json: what zygote.py applies to each box.
type zygoteConfig struct {
	Seccomp      string   `json:"seccomp"` // hex of seccomp.Encoded
	ProcMasked   []string `json:"proc_masked"`
	ProcReadOnly []string `json:"proc_read_only"`
	BoxUID       int      `json:"box_uid"`
	BoxGID       int      `json:"box_gid"`
	Trace        bool     `json:"trace"` // J reports its laps (MOAT_DEBUG_PHASES)
	// UserLimits are the values J writes to the box's /proc/sys/user, and SigPending
	// (0: none) the box's RLIMIT_SIGPENDING: each box's share of the quotas its
	// zygote's boxes draw from together (quotaShares).
	UserLimits map[string]int64 `json:"user_limits"`
	SigPending int64            `json:"sigpending"`
}

// zygoteReq asks the zygote for one box; it travels with the box's five fds.
type zygoteReq struct {
	Tmp    int64 `json:"tmp"`
	Disk   int64 `json:"disk"`
	NoFile int64 `json:"nofile"`
	CPU    int64 `json:"cpu"` // RLIMIT_CPU in seconds, -1 for none
	Pids   int64 `json:"pids"`
}

// zygoteGo is the server's answer to a box's hello.
type zygoteGo struct {
	Go          bool `json:"go"`
	LandlockABI int  `json:"landlock_abi"`
	// Tasks counts the box's v1 tasks files sent with the frame, after the Landlock
	// ruleset: J writes "0" to each, which moves it into the box's cgroup.
	Tasks int `json:"tasks,omitempty"`
}

// errZygoteUnusable: this spec's boxes cannot come from a zygote here; they are made
// cold.
var errZygoteUnusable = errors.New("no zygote for this box")

// canZygote says whether a session spec's boxes may be forked from a zygote: the
// spec names a zygote, and the box would be a native one made by root with cgroups,
// without a network and taking requests on fd 4.
func (b *Backend) canZygote(spec *box.SessionSpec, onStdin bool) bool {
	return len(spec.Zygote) > 0 && b.Starter == nil && os.Geteuid() == 0 && spec.Egress == nil &&
		!onStdin && len(spec.Interpreter) > 0 && hostHasCgroups()
}

// hostHasCgroups says whether the host has cgroups moat can use; the host's layout
// does not change while moat runs, and Detect reads /proc and the mounts.
var hostHasCgroups = sync.OnceValue(func() bool { return cgroup.Detect().Version != cgroup.None })

// zygotes is a backend's set of zygotes, by spec.
type zygotes struct {
	mu     sync.Mutex
	byKey  map[uint64]*zygoteSlot
	failed map[uint64]time.Time
	closed bool
	wg     sync.WaitGroup // zygotes not yet ended
}

// zygoteSlot is a zygote being started or running.
type zygoteSlot struct {
	ready chan struct{} // closed once z or err is set
	z     *zygote
	err   error
}

// zygote is a running zygote and the boxes made from it.
type zygote struct {
	b     *Backend
	key   uint64
	bp    *boxProc
	done  chan struct{} // closed once its box is gone
	out   *tail         // what Z printed, for errors
	sendM sync.Mutex

	mu       sync.Mutex // guards what follows
	live     int        // boxes made from it not yet released
	retired  bool
	lastUsed time.Time
	idle     *time.Timer
}

// zygoteKey identifies interchangeable zygotes: the same interpreter, environment,
// support files and limits. It is computed for each box, so it is a fast hash
// (maphash, seeded once per process) over length-prefixed fields rather than a
// digest; its inputs come from the config and the engine, never from a box.
func zygoteKey(spec *box.SessionSpec, lim box.Limits) uint64 {
	var h maphash.Hash
	h.SetSeed(zygoteSeed)
	n := func(v int) { _ = binary.Write(&h, binary.LittleEndian, uint64(v)) }
	str := func(s string) { n(len(s)); h.WriteString(s) }
	strs := func(ss []string) {
		n(len(ss))
		for _, s := range ss {
			str(s)
		}
	}
	str(spec.Language)
	strs(spec.Zygote)
	strs(spec.Env)
	str(fmt.Sprintf("%+v", lim))
	n(len(spec.Support))
	for _, f := range spec.Support {
		str(f.Path)
		n(len(f.Data))
		h.Write(f.Data)
	}
	return h.Sum64()
}

var zygoteSeed = maphash.MakeSeed()

// startFromZygote makes a session box by forking the spec's zygote (starting it
// first if need be). errZygoteUnusable (wrapped) means the caller should make the
// box cold.
func (b *Backend) startFromZygote(ctx context.Context, spec *box.SessionSpec, lang string, lim box.Limits) (box.Session, error) {
	tr := newPhaseTrace(time.Now())
	z, err := b.zygoteFor(ctx, spec, lim)
	if err != nil {
		return nil, err
	}
	tr.mark("zygote")
	bp, err := z.spawn(lim)
	if err != nil {
		b.zys.retire(z) // a zygote that cannot fork is no use: the next box starts another
		return nil, fmt.Errorf("%w: %w", errZygoteUnusable, err)
	}
	tr.mark("fork")
	s, err := b.beginSession(ctx, bp, lang, lim)
	tr.mark("ready")
	tr.report(b.log())
	var ce *ChildError
	if errors.As(err, &ce) {
		// The kernel refused a step of the box's setup: it would refuse it for every
		// box of this zygote. Boxes are made cold for a while instead.
		b.zys.fail(z)
		return nil, fmt.Errorf("%w: %w", errZygoteUnusable, err)
	}
	return s, err
}

// ZygoteReady implements box.ZygoteBackend.
func (b *Backend) ZygoteReady(spec *box.SessionSpec) bool {
	_, onStdin, _ := box.SessionArgv(spec.Language) // canZygote wants Interpreter set anyway
	if !b.canZygote(spec, onStdin) {
		return false
	}
	zs := &b.zys
	zs.mu.Lock()
	defer zs.mu.Unlock()
	slot := zs.byKey[zygoteKey(spec, spec.Limits.WithDefaults())]
	if slot == nil {
		return false
	}
	select {
	case <-slot.ready:
		return slot.z != nil && !slot.z.isRetired()
	default:
		return false
	}
}

// zygoteFor returns the running zygote for spec, starting one if there is none,
// with one more live box counted on it (release it with boxDone).
func (b *Backend) zygoteFor(ctx context.Context, spec *box.SessionSpec, lim box.Limits) (*zygote, error) {
	zs := &b.zys
	key := zygoteKey(spec, lim)
	zs.mu.Lock()
	if zs.closed {
		zs.mu.Unlock()
		return nil, fmt.Errorf("%w: the backend is closed", errZygoteUnusable)
	}
	if zs.byKey == nil {
		zs.byKey, zs.failed = map[uint64]*zygoteSlot{}, map[uint64]time.Time{}
	}
	if at, ok := zs.failed[key]; ok && time.Since(at) < zygoteBackoff {
		zs.mu.Unlock()
		return nil, fmt.Errorf("%w: its zygote failed to start %s ago", errZygoteUnusable, time.Since(at).Round(time.Second))
	}
	slot := zs.byKey[key]
	if slot == nil {
		zs.evictLocked()
		slot = &zygoteSlot{ready: make(chan struct{})}
		zs.byKey[key] = slot
		zs.wg.Add(1)
		go func() {
			z, err := b.startZygote(spec, lim, key)
			zs.mu.Lock()
			slot.z, slot.err = z, err
			if err != nil {
				zs.failed[key] = time.Now()
				delete(zs.byKey, key)
			}
			zs.mu.Unlock()
			close(slot.ready)
			if err != nil {
				b.log().Warn("zygote failed to start: its boxes are made cold for a while", "err", err)
			}
		}()
	}
	zs.mu.Unlock()
	select {
	case <-slot.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if slot.err != nil {
		return nil, fmt.Errorf("%w: %w", errZygoteUnusable, slot.err)
	}
	if !slot.z.use() {
		return nil, fmt.Errorf("%w: its zygote was retired", errZygoteUnusable)
	}
	return slot.z, nil
}

// evictLocked retires the least recently used zygote when the set is full.
func (zs *zygotes) evictLocked() {
	if len(zs.byKey) < maxZygotes {
		return
	}
	var oldest *zygote
	for _, s := range zs.byKey {
		if s.z == nil {
			continue // still starting
		}
		if oldest == nil || s.z.used().Before(oldest.used()) {
			oldest = s.z
		}
	}
	if oldest != nil {
		delete(zs.byKey, oldest.key)
		go oldest.retire()
	}
}

// fail retires z and makes its spec's boxes cold for zygoteBackoff.
func (zs *zygotes) fail(z *zygote) {
	zs.mu.Lock()
	if zs.failed != nil {
		zs.failed[z.key] = time.Now()
	}
	zs.mu.Unlock()
	zs.retire(z)
	z.b.log().Warn("zygote: a box it forked failed to start; boxes are made cold for a while")
}

// retire takes z out of the set: it ends once its last box does.
func (zs *zygotes) retire(z *zygote) {
	zs.mu.Lock()
	if s := zs.byKey[z.key]; s != nil && s.z == z {
		delete(zs.byKey, z.key)
	}
	zs.mu.Unlock()
	z.retire()
}

// Close ends every zygote once its boxes are gone: the caller has closed them (the
// engine closes its pool and sessions first), and removes the cgroups kept for
// later boxes. It returns once all have ended.
func (b *Backend) Close() error {
	zs := &b.zys
	zs.mu.Lock()
	zs.closed = true
	var all []*zygoteSlot
	for _, s := range zs.byKey {
		all = append(all, s)
	}
	zs.byKey = nil
	zs.mu.Unlock()
	for _, s := range all {
		<-s.ready
		if s.z != nil {
			s.z.retire()
		}
	}
	zs.wg.Wait()
	// The cgroups Release kept for later boxes (cgroup.Recycle).
	return cgroup.DestroySpares()
}

// startZygote starts a zygote's box and waits until the zygote says it is ready. It
// marks b.zys.wg done once the zygote has ended, or at once when it fails to start.
func (b *Backend) startZygote(spec *box.SessionSpec, lim box.Limits, key uint64) (_ *zygote, err error) {
	launched := false
	defer func() {
		if !launched {
			b.zys.wg.Done()
		}
	}()
	cfg, err := zygoteConfigFile()
	if err != nil {
		return nil, err
	}
	support := append(slices.Clone(spec.Support),
		box.SupportFile{Path: zygotePyPath, Data: zygoteSource},
		box.SupportFile{Path: zygoteConfigPath, Data: cfg})
	tr := newPhaseTrace(time.Now())
	bp, err := b.launch(launchSpec{
		language: spec.Language,
		init: initSpec{
			Support: support,
			Argv:    spec.Zygote,
			Env:     box.MergeEnv(spec.Env),
			CPUSecs: math.MaxUint64,
		},
		limits: lim,
		zygote: true,
	}, tr)
	if err != nil {
		return nil, err
	}
	launched = true // the box's end marks the wait group done, below
	z := &zygote{b: b, key: key, bp: bp, done: make(chan struct{}), out: &tail{max: 4 << 10}, lastUsed: time.Now()}
	var drained sync.WaitGroup
	for _, r := range []*os.File{bp.stdoutR, bp.stderrR} {
		drained.Add(1)
		go func() { defer drained.Done(); _, _ = io.Copy(z.out, r) }()
	}
	go func() {
		err := bp.proc.Wait()
		drained.Wait()
		bp.release(b.log(), tr)
		if !z.isRetired() {
			b.log().Warn("zygote ended", "err", err, "output", z.out.String())
			b.zys.retire(z)
		}
		close(z.done)
		b.zys.wg.Done()
	}()
	if err := z.awaitReady(); err != nil {
		bp.kill()
		<-z.done
		if out := z.out.String(); out != "" {
			err = fmt.Errorf("%w; the zygote printed: %s", err, box.LastLine(out, 300))
		}
		return nil, err
	}
	z.idle = time.AfterFunc(zygoteIdle, func() { b.zys.retireIdle(z) })
	return z, nil
}

// retireIdle retires z if it made no box for zygoteIdle, else checks again later.
func (zs *zygotes) retireIdle(z *zygote) {
	z.mu.Lock()
	left := zygoteIdle - time.Since(z.lastUsed)
	if left > 0 && !z.retired {
		z.idle.Reset(left)
	}
	z.mu.Unlock()
	if left <= 0 {
		zs.retire(z)
	}
}

// awaitReady hands the zygote box its spec and waits for init to confine it and for
// the zygote's ready message.
func (z *zygote) awaitReady() error {
	if err := z.bp.handOver(); err != nil {
		return fmt.Errorf("start the zygote's box: %w", err)
	}
	var m initMsg
	if err := readFrame(z.bp.sock, maxInitFrame, &m); err != nil {
		return fmt.Errorf("the zygote's box ended during setup: %w", err)
	}
	switch m.Kind {
	case "confined":
	case "error":
		return m.childError()
	default:
		return fmt.Errorf("the zygote's box said %q during setup", m.Kind)
	}
	if err := z.bp.ctl.SetReadDeadline(time.Now().Add(readyTimeout)); err != nil {
		return err
	}
	buf := make([]byte, 256)
	n, err := z.bp.ctl.Read(buf)
	if err != nil {
		return fmt.Errorf("the zygote did not start: %w", err)
	}
	var ready struct{ Kind string }
	if json.Unmarshal(buf[:n], &ready) != nil || ready.Kind != "ready" {
		return fmt.Errorf("the zygote said %q instead of ready", buf[:n])
	}
	return z.bp.ctl.SetReadDeadline(time.Time{})
}

// zygoteConfigFile is /.moat/zygote.json.
func zygoteConfigFile() ([]byte, error) {
	filter, err := seccomp.Encoded()
	if err != nil {
		return nil, err
	}
	return json.Marshal(zygoteConfig{
		Seccomp: hex.EncodeToString(filter), ProcMasked: procMasked, ProcReadOnly: procReadOnly,
		BoxUID: boxUID, BoxGID: boxGID, Trace: traceEnabled, UserLimits: userLimitShares(),
		SigPending: sigPendingShare(),
	})
}

// use counts one more box on z; false if z is retired.
func (z *zygote) use() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.retired {
		return false
	}
	z.live++
	z.lastUsed = time.Now()
	return true
}

func (z *zygote) used() time.Time {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.lastUsed
}

func (z *zygote) isRetired() bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.retired
}

// boxDone counts a box of z released; the last one of a retired zygote ends it.
func (z *zygote) boxDone() {
	z.mu.Lock()
	z.live--
	end := z.retired && z.live == 0
	z.mu.Unlock()
	if end {
		z.bp.kill()
	}
}

// retire makes z take no more boxes and end once its last box is released.
func (z *zygote) retire() {
	z.mu.Lock()
	first := !z.retired
	z.retired = true
	end := first && z.live == 0
	if z.idle != nil {
		z.idle.Stop()
	}
	z.mu.Unlock()
	if end {
		z.bp.kill()
	}
}

// spawn asks the zygote for a box with lim. The box is not running code yet: its
// hand-over (zygoteBox.handOver, through boxProc.handOver) completes it.
func (z *zygote) spawn(lim box.Limits) (_ *boxProc, err error) {
	zb := &zygoteBox{z: z, lim: lim, known: make(chan struct{}), pidfd: -1}
	bp := &boxProc{zy: zb, proc: &zygoteProc{zb}}
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			close(zb.known)
			bp.release(z.b.log(), newPhaseTrace(time.Now()))
		}
	}()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	childEnds = append(childEnds, os.NewFile(uintptr(fds[1]), "sync-child"))
	// The kernel attaches the sender's pid to what J sends: set before J exists.
	// Non-blocking, so that the hand-over can time out.
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fds[0])
		return nil, os.NewSyscallError("setsockopt(SO_PASSCRED)", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		return nil, os.NewSyscallError("fcntl", err)
	}
	bp.sock = os.NewFile(uintptr(fds[0]), "sync-parent")
	var stdoutW, stderrW, reportW *os.File
	for _, p := range []struct{ r, w **os.File }{{&bp.stdoutR, &stdoutW}, {&bp.stderrR, &stderrW}, {&bp.reportR, &reportW}} {
		if *p.r, *p.w, err = boxPipe(false); err != nil {
			return nil, err
		}
		childEnds = append(childEnds, *p.w)
	}
	requestR, requestW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	bp.requestW = requestW
	childEnds = append(childEnds, requestR)
	req := zygoteReq{Tmp: lim.Tmp, Disk: lim.Disk, NoFile: lim.OpenFiles, CPU: -1, Pids: lim.Pids}
	if err := z.send(req, childEnds[0], stdoutW, stderrW, reportW, requestR); err != nil {
		return nil, err
	}
	return bp, nil
}

// send writes one request and its fds to the zygote.
func (z *zygote) send(req zygoteReq, files ...*os.File) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	rc, err := z.bp.ctl.SyscallConn()
	if err != nil {
		return err
	}
	z.sendM.Lock()
	defer z.sendM.Unlock()
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), body, unix.UnixRights(fds...), nil, 0)
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("ask the zygote for a box: %w", os.NewSyscallError("sendmsg", err))
	}
	return nil
}

// seqpacketPair makes a zygote's control socket: the parent's end non-blocking (its
// reads time out), the child's blocking.
func seqpacketPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(fds[0]), "zygote-parent"), os.NewFile(uintptr(fds[1]), "zygote-child"), nil
}

// zygoteBox is the server's side of one box a zygote forks.
type zygoteBox struct {
	z   *zygote
	lim box.Limits

	known chan struct{} // closed once the hand-over set pidfd or failed
	pid   int
	cg    *cgroup.Box

	mu    sync.Mutex // guards pidfd, which Release closes
	pidfd int
}

// handOver completes a forked box (see the diagram above): it learns J's pid from
// the kernel, places J in the box's cgroup, opens the box's workspace for the
// server's file operations, builds the Landlock ruleset on the box's root and sends
// it. On failure the box is killed.
func (zb *zygoteBox) handOver(bp *boxProc) error {
	err := zb.greet(bp)
	select {
	case <-zb.known:
	default:
		close(zb.known)
	}
	if err != nil {
		bp.kill()
	}
	return err
}

func (zb *zygoteBox) greet(bp *boxProc) error {
	if err := bp.sock.SetReadDeadline(time.Now().Add(readyTimeout)); err != nil {
		return err
	}
	defer bp.sock.SetReadDeadline(time.Time{}) //nolint:errcheck // the same file, just used
	m, pid, err := readHello(bp.sock)
	if err != nil {
		if out := zb.z.out.String(); out != "" {
			err = fmt.Errorf("%w (the zygote printed: %s)", err, box.LastLine(out, 300))
		}
		return err
	}
	if m.Kind == "error" {
		return m.childError()
	}
	if m.Kind != "hello" {
		return fmt.Errorf("a box from the zygote said %q instead of hello", m.Kind)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return os.NewSyscallError("pidfd_open", err)
	}
	zb.mu.Lock()
	zb.pid, zb.pidfd = pid, pidfd
	zb.mu.Unlock()
	close(zb.known)
	lim := zb.lim
	cg, err := cgroup.New(BoxName(), cgroup.Limits{MemoryBytes: lim.Memory, Pids: lim.Pids + zygoteReserve, CPUs: lim.CPUs})
	if err != nil {
		return fmt.Errorf("create the box's cgroup: %w", err)
	}
	zb.cg = cg
	// On v1, J moves itself in, through the box's tasks files it gets with the go
	// frame: a process that moves itself costs no RCU grace period, where AddProc
	// costs one (~9 ms) for every box (cgroup.EnterThread).
	var tasks []int // the cgroup's own: passed on, never closed here
	if cg.Version() == cgroup.V1 {
		if tasks, err = cg.TaskFDs(); err != nil {
			return fmt.Errorf("open the box's cgroup: %w", err)
		}
	} else if err := cg.AddProc(pid); err != nil {
		return err
	}
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("open the box's root", err)
	}
	defer unix.Close(root)
	// The pid named J when the root was opened only if J is still alive now: a dead
	// J's pid could have been reused. The pidfd tells.
	if gone(pidfd) {
		return errors.New("a box from the zygote ended during its hand-over")
	}
	if bp.ws, err = workspaceAt(root, strings.TrimPrefix(box.WorkspaceDir, "/"), HostBoxUID, HostBoxUID); err != nil {
		return fmt.Errorf("open the box's workspace: %w", err)
	}
	rules, abi, err := landlock.Ruleset(root, writableDirs, devicePaths())
	if err != nil {
		return err
	}
	if rules >= 0 {
		defer unix.Close(rules)
	}
	fds := make([]int, 0, 1+len(tasks))
	if rules >= 0 {
		fds = append(fds, rules)
	}
	fds = append(fds, tasks...)
	return sendGo(bp.sock, zygoteGo{Go: true, LandlockABI: abi, Tasks: len(tasks)}, fds)
}

// helloBufs recycles readHello's buffers (a box's first frame arrives whole).
var helloBufs = sync.Pool{New: func() any { return new([4 + maxInitFrame]byte) }}

// readHello reads a box's first frame and the pid the kernel attached to it.
func readHello(sock *os.File) (initMsg, int, error) {
	var m initMsg
	rc, err := sock.SyscallConn()
	if err != nil {
		return m, 0, err
	}
	frame := helloBufs.Get().(*[4 + maxInitFrame]byte)
	defer helloBufs.Put(frame)
	buf := frame[:]
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	var n, oobn int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return m, 0, fmt.Errorf("a box from the zygote did not report: %w", err)
	}
	if n == 0 {
		return m, 0, errors.New("the zygote did not make the box (its fork failed, or it ended)")
	}
	if n < 4 {
		return m, 0, errors.New("a box from the zygote sent a short frame")
	}
	size := int(binary.BigEndian.Uint32(buf))
	if size > maxInitFrame {
		return m, 0, fmt.Errorf("a box from the zygote sent a frame of %d bytes", size)
	}
	body := buf[4:n]
	if len(body) < size {
		rest := make([]byte, size-len(body))
		if _, err := io.ReadFull(sock, rest); err != nil {
			return m, 0, fmt.Errorf("read a box's first frame: %w", err)
		}
		body = append(body, rest...)
	}
	if err := json.Unmarshal(body[:size], &m); err != nil {
		return m, 0, fmt.Errorf("decode a box's first frame: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return m, 0, os.NewSyscallError("parse the box's credentials", err)
	}
	for i := range msgs {
		if cred, err := unix.ParseUnixCredentials(&msgs[i]); err == nil && cred.Pid > 0 {
			return m, int(cred.Pid), nil
		}
	}
	return m, 0, errors.New("a box from the zygote sent no credentials")
}

// sendGo writes the go frame with fds: the Landlock ruleset when there is one, then
// the box's tasks files (zygoteGo.Tasks).
func sendGo(sock *os.File, g zygoteGo, fds []int) error {
	body, err := json.Marshal(g)
	if err != nil {
		return err
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		werr = unix.Sendmsg(int(fd), frame, oob, nil, 0)
		return werr != unix.EAGAIN
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("send the box its go: %w", err)
	}
	return nil
}

// gone says whether the process of pidfd has exited.
func gone(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// zygoteProc is the Proc of a box a zygote forked: J, through its pidfd and cgroup.
type zygoteProc struct{ zb *zygoteBox }

func (p *zygoteProc) Wait() error {
	<-p.zb.known
	p.zb.mu.Lock()
	pidfd := p.zb.pidfd
	p.zb.mu.Unlock()
	if pidfd < 0 {
		return errors.New("the box was never made")
	}
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
			return nil
		}
	}
}

func (p *zygoteProc) Kill() {
	select {
	case <-p.zb.known:
	default:
		return // nothing to kill yet: closing the socket ends J
	}
	// J is PID 1 of the box's PID namespace, and every process of the box's cgroup
	// is in that namespace: its death kills them all. (Release's cgroup Destroy
	// kills what might be left; freezing the cgroup here as well would cost the
	// whole host a text patch of its freezer static key per box.)
	p.zb.mu.Lock()
	if p.zb.pidfd >= 0 {
		_ = unix.PidfdSendSignal(p.zb.pidfd, unix.SIGKILL, nil, 0)
	}
	p.zb.mu.Unlock()
}

func (p *zygoteProc) LimitsMemory() bool { return true }

func (p *zygoteProc) Placed() error { return nil }

func (p *zygoteProc) Usage() (ProcUsage, bool) { return cgroupUsage(p.zb.cg) }

func (p *zygoteProc) Isolation(landlockABI int) []string {
	return append(isolationList(p.zb.cg, landlockABI, false), "zygote")
}

func (p *zygoteProc) Warnings() []string { return nil }

func (p *zygoteProc) Release() error {
	var err error
	if p.zb.cg != nil {
		// J's death took the box's processes along, so its cgroup is usually
		// empty by now and kept for the next box (a spare, on v1); else destroyed.
		err = p.zb.cg.Recycle()
	}
	p.zb.mu.Lock()
	if p.zb.pidfd >= 0 {
		unix.Close(p.zb.pidfd)
		p.zb.pidfd = -1
	}
	p.zb.mu.Unlock()
	p.zb.z.boxDone()
	return err
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

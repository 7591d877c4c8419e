"""moat's zygote: a preloaded Python interpreter forked into fresh boxes.

The policy runner (runner.py --zygote) imports the profile's modules, then calls
serve(session). In a box's interpreter, once that box is made and confined, serve
calls session(), which serves the box's session as in a box made cold, and returns
what it returns. The
design and the security argument are in zygote_linux.go; this file carries them
out. Every number, list and filter comes from the server (/.moat/zygote.json and
each fork request): nothing here decides what a box may do.

Processes:

    Z  the zygote: uid 0 of the zygote box's user namespace U, with the
       capabilities to make namespaces and mounts, and no untrusted code ever.
       Per request it forks J into a new PID namespace.
    J  the box's PID 1 (the agent): new mount, network, IPC and UTS namespaces,
       fresh /tmp, /workspace, /dev/shm and /proc; moved into the box's cgroup by
       the server; then a user namespace of its own as uid/gid 65534, no
       capabilities, no_new_privs, the box's Landlock ruleset and seccomp filter.
       It forks L, reports its end, serves start and signal requests.
    L  the interpreter, forked by J: it inherits all of J's confinement.
"""

import _signal
import _socket
import ctypes
import fcntl
import gc
import os
import resource
import select
import struct
import sys

# Nothing here imports socket, json or platform: with what they import (selectors,
# json's decoder and encoder, ...) they made the zygote 0.2 MiB larger, and each box's
# fork copies the page tables of all of the zygote's memory and its exit unmaps them.
# _socket serves, the runner's JSON codec (serve's loads and quote) and os.uname do
# the rest.

CONFIG = '/.moat/zygote.json'

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_MODE_FILTER = 2
CAP_V3 = 0x20080522

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

SYSCALLS = {
    'x86_64': {'capset': 126, 'landlock_restrict_self': 446},
    'aarch64': {'capset': 91, 'landlock_restrict_self': 446},
}

MAX_FRAME = 4 << 20
# The most v1 tasks files a go frame brings (one per hierarchy of a box).
_MAX_TASK_FILES = 16
_laps = []
CHUNK_BIT = 1 << 31

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


class Failed(Exception):
    """A setup step failed; step names match the Go init's (init_linux.go)."""

    def __init__(self, step, detail, errno=0):
        Exception.__init__(self, detail)
        self.step, self.errno = step, errno


def _lap(cfg, name, last=[0.0, 0]):
    """Records the time and the page faults since the previous lap when the server
    traces (its MOAT_DEBUG_PHASES); J sends them with its confined message. The
    faults are most of what a forked box costs: each page J writes is copied."""
    if cfg.get('trace'):
        import time
        now, faults = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if last[0]:
            _laps.append('%s=%dus/%dpf' % (name, (now - last[0]) * 1e6, faults - last[1]))
        last[0], last[1] = now, faults


def _check(ret, step, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise Failed(step, '%s: %s' % (what, os.strerror(e)), e)


def _mount(step, src, dst, fstype, flags, data=None):
    """mount(2); the arguments are bytes (or None)."""
    if _libc.mount(src, dst, fstype, flags, data) < 0:
        _check(-1, step, 'mount %s on %s' % ((src or fstype).decode(), dst.decode()))


_NR = SYSCALLS.get(os.uname().machine, {})


def _syscall(name, *args):
    nr = _NR[name]
    return _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])


def serve(session, loads, quote):
    """The zygote's loop: one box per request on fd 3 (a SOCK_SEQPACKET socket; a
    request is a JSON object and five fds). Returns only in a box's interpreter, what
    session() returned there. The interpreter calls session() from the frame that
    forked it rather than return to the runner: returning would free what the frames
    below hold (the config, the request), each freed object a page copied. loads
    (text to a value, ValueError when it is not JSON) and quote (a str as an ASCII
    JSON string) are the runner's JSON codec."""
    global _loads, _quote
    _loads, _quote = loads, quote
    with open(CONFIG, 'rb') as fh:
        cfg = _prepare(_json_loads(fh.read()))
    ctl = _socket.socket(fileno=3)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)  # the kernel reaps each J
    pidns = os.open('/proc/self/ns/pid', os.O_RDONLY | os.O_CLOEXEC)
    # Every object so far is shared with the boxes, page by page, until written:
    # keep the collector from walking (and so copying) them in each box.
    gc.collect()
    _libc.malloc_trim(0)
    gc.freeze()
    ctl.sendall(b'{"kind":"ready"}')
    while True:
        try:
            msg, fds = _recv_fds(ctl, 1 << 16, 8)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)  # the server is gone: so is the zygote box
        try:
            req = _json_loads(msg)
            ok = len(fds) == 5 and isinstance(req, dict)
        except ValueError:
            ok = False
        pid = -1
        if ok:
            # The new PID namespace is for the next child only: setns takes the
            # zygote's own back right after the fork.
            if _libc.unshare(CLONE_NEWPID) == 0:
                try:
                    pid = os.fork()
                except OSError:
                    pid = -1
                if pid == 0:
                    _lap(cfg, 'fork')
                    os.close(pidns)
                    ctl.close()
                    return _box(cfg, req, fds, session)  # returns in the interpreter only
                if _libc.setns(pidns, CLONE_NEWPID) != 0:
                    os._exit(70)  # cannot make the next box right: let the server see
        # The server sees a failed fork as its sync socket closing unanswered.
        for fd in fds:
            os.close(fd)


def _prepare(cfg):
    """Does once, in the zygote, what would be the same in every box: each box's J
    would otherwise pay for it in time and in pages copied. Adds to cfg:
    masked and read_only, the /proc paths (bytes) of proc_masked and proc_read_only
    that this kernel has (a box's /proc is a fresh mount of the same kernel's);
    cap_last_cap; the seccomp filters as ready sock_fprog structures; the hello
    frame; capset's arguments. (What a J writes to is its own copy.)"""
    def present(names):
        return [p for p in (b'/proc/' + n.encode() for n in names) if os.path.lexists(p)]
    cfg['masked'], cfg['read_only'] = present(cfg['proc_masked']), present(cfg['proc_read_only'])
    with open('/proc/sys/kernel/cap_last_cap', 'rb') as fh:
        cfg['cap_last_cap'] = int(fh.read())
    cfg['fprogs'] = _seccomp_programs(bytes.fromhex(cfg['seccomp']))
    cfg['hello'] = _frame({'kind': 'hello'})
    # capset's arguments: the version 3 header (this process) and no capabilities.
    cfg['capset'] = ((ctypes.c_uint32 * 2)(CAP_V3, 0), (ctypes.c_uint32 * 6)())
    return cfg


def _box(cfg, req, fds, session):
    """J: makes and confines the box, then serves it. Returns in L only, what
    session() returned."""
    sync, out, err, rep, reqfd = fds
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    # PID 1 gets only the signals it handles from inside its namespace: none but
    # SIGCHLD, so the code cannot stop or interrupt it.
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    sock = _socket.socket(fileno=sync)
    try:
        abi = _setup(cfg, req, sock)
    except Failed as e:
        _send(sock, {'kind': 'error', 'step': e.step, 'detail': str(e), 'errno': e.errno})
        os._exit(1)
    except Exception as e:  # a bug: say so rather than leave the server waiting
        _send(sock, {'kind': 'error', 'step': 'setup', 'detail': '%s: %s' % (type(e).__name__, e)})
        os._exit(1)
    _send(sock, {'kind': 'confined', 'landlock_abi': abi, 'laps': ' '.join(_laps)})
    return _agent(sock, (out, err, rep, reqfd), session)  # returns in L only


def _setup(cfg, req, sock):
    """The box's namespaces, mounts, cgroup and confinement, in the order the Go
    init applies them (init_linux.go setup and confine). Returns the Landlock ABI."""
    uid, gid = cfg['box_uid'], cfg['box_gid']
    _lap(cfg, 'start')
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), 'mount',
           'unshare')
    _mount('mount', None, b'/', None, MS_REC | MS_PRIVATE)
    _mount('mount', b'tmpfs', b'/tmp', b'tmpfs', MS_NOSUID | MS_NODEV,
           b'mode=1777,size=%d' % req['tmp'])
    _mount('mount', b'tmpfs', b'/workspace', b'tmpfs', MS_NOSUID | MS_NODEV,
           b'mode=0755,size=%d,uid=%d,gid=%d' % (req['disk'], uid, gid))
    _mount('mount', b'tmpfs', b'/dev/shm', b'tmpfs', MS_NOSUID | MS_NODEV | MS_NOEXEC,
           b'mode=1777,size=%d' % req['tmp'])
    _mount('mount', b'proc', b'/proc', b'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # /proc/sys of this proc, before it is made read-only below: J sets the box's
    # user-namespace limits through it once it is in that namespace (_user_limits).
    sysfd = os.open('/proc/sys', os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for p in cfg['masked']:
        _mount('mount', b'/dev/null', p, None, MS_BIND)
    for p in cfg['read_only']:
        _mount('mount', p, p, None, MS_BIND | MS_REC)
        _mount('mount', p, p, None,
               MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _lap(cfg, 'mounts')
    _loopback_up()
    _lap(cfg, 'lo')

    # The server moves J into the box's cgroup, builds the Landlock ruleset on this
    # mount tree and sends it back.
    try:
        sock.sendall(cfg['hello'])
    except OSError:
        pass  # the server is gone: the go frame's read says so
    ruleset = _await_go(sock)
    _lap(cfg, 'await-go')
    _check(_libc.unshare(CLONE_NEWCGROUP), 'cgroup-namespace', 'unshare(CLONE_NEWCGROUP)')

    try:
        for res, v in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, req['nofile']),
                       (resource.RLIMIT_CPU, req['cpu'])):
            # Lower only (-1 is infinity): raising past the hard limit needs
            # CAP_SYS_RESOURCE in the host's namespace.
            hard = resource.getrlimit(res)[1]
            if hard != resource.RLIM_INFINITY and (v == resource.RLIM_INFINITY or v > hard):
                v = hard
            resource.setrlimit(res, (v, v))
    except (OSError, ValueError) as e:
        raise Failed('rlimits', 'setrlimit: %s' % e)

    # The box's own user namespace, as the box's user: its processes are counted
    # (RLIMIT_NPROC and the other per-user limits) apart from every other box's.
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as e:
        raise Failed('capabilities', 'set the box user: %s' % e, e.errno or 0)
    _check(_libc.unshare(CLONE_NEWUSER), 'capabilities', 'unshare(CLONE_NEWUSER)')
    # Changing uid made J not dumpable, which gives its /proc files to root: its own
    # maps could not be written. It is made not dumpable again below.
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), 'capabilities', 'PR_SET_DUMPABLE')
    try:
        for name, data in (('/proc/self/setgroups', b'deny'),
                           ('/proc/self/uid_map', b'%d %d 1' % (uid, uid)),
                           ('/proc/self/gid_map', b'%d %d 1' % (gid, gid))):
            fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        # The code's exact process limit; J, the same user here, is one of them.
        nproc = req['pids'] + 1
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        # The box's share of the queued signals its zygote's boxes draw from together.
        # Only now: the kernel caps the count of all of them by the limit J had when it
        # made the box's namespace, and the share is for this box alone.
        if cfg.get('sigpending'):
            resource.setrlimit(resource.RLIMIT_SIGPENDING, (cfg['sigpending'], cfg['sigpending']))
    except (OSError, ValueError) as e:
        raise Failed('capabilities', 'user namespace: %s' % e, getattr(e, 'errno', 0) or 0)
    _user_limits(sysfd, cfg.get('user_limits') or {})
    _lap(cfg, 'userns')
    for c in range(cfg['cap_last_cap'] + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, c, 0, 0, 0), 'capabilities', 'PR_CAPBSET_DROP')
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), 'capabilities',
           'PR_CAP_AMBIENT_CLEAR_ALL')
    hdr, data = cfg['capset']
    _check(_syscall('capset', ctypes.addressof(hdr), ctypes.addressof(data)), 'capabilities',
           'capset')
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), 'capabilities', 'PR_SET_DUMPABLE')
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 'no-new-privs', 'PR_SET_NO_NEW_PRIVS')

    abi = 0
    if ruleset is not None:
        fd, abi = ruleset
        _check(_syscall('landlock_restrict_self', fd, 0), 'landlock', 'landlock_restrict_self')
        os.close(fd)
    _lap(cfg, 'caps+landlock')
    for fp in cfg['fprogs']:
        _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fp), 0, 0),
               'seccomp', 'PR_SET_SECCOMP')
    _lap(cfg, 'seccomp')
    return abi


def _user_limits(sysfd, limits):
    """Writes the box's share of the per-user quotas its zygote's boxes draw from
    together (owner_linux.go's userLimitShares) to the box's own user namespace,
    through sysfd (this box's /proc/sys, opened while writable): a lookup under
    /proc/sys/user finds the namespace of the process that makes it, J's by now, where
    J still has every capability. A kernel without the limit has no file for it."""
    try:
        for name, value in sorted(limits.items()):
            try:
                fd = os.open('user/' + name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=sysfd)
            except FileNotFoundError:
                continue
            try:
                os.write(fd, b'%d' % value)
            finally:
                os.close(fd)
    except (OSError, TypeError, ValueError) as e:
        raise Failed('capabilities', 'user namespace limits: %s' % e, getattr(e, 'errno', 0) or 0)
    finally:
        os.close(sysfd)


def _loopback_up():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        ifr = bytearray(struct.pack('16sH22x', b'lo', 0))
        fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifr)
        flags = struct.unpack_from('H', ifr, 16)[0] | IFF_UP
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack('16sH22x', b'lo', flags))
    except OSError as e:
        raise Failed('loopback', 'bring lo up: %s' % e, e.errno or 0)
    finally:
        s.close()


class _Fprog(ctypes.Structure):
    """struct sock_fprog; prog holds the instructions' buffer, which filter points to."""
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


def _seccomp_programs(blob):
    """Decodes the filter stack the server encoded (seccomp.Encoded: per filter a
    little-endian uint32 count, then that many 8-byte instructions) into the
    sock_fprog structures prctl loads, in order. Raises ValueError for a malformed
    stack: the zygote then never starts."""
    progs = []
    while blob:
        count = struct.unpack_from('<I', blob)[0]
        prog = blob[4:4 + 8 * count]
        if count == 0 or len(prog) != 8 * count:
            raise ValueError('malformed seccomp filter')
        fp = _Fprog(count, 0)
        fp.prog = ctypes.create_string_buffer(prog, len(prog))
        fp.filter = ctypes.addressof(fp.prog)
        progs.append(fp)
        blob = blob[4 + 8 * count:]
    if not progs:
        raise ValueError('no seccomp filter')
    return progs


def _await_go(sock):
    """Reads the server's go frame and the fds with it: the Landlock ruleset, then on
    cgroup v1 the box's tasks files, to which J writes "0": it moves itself into the
    box's cgroup (the server's AddProc would cost each box an RCU grace period).
    Returns (fd, abi), or None when the kernel has no Landlock."""
    try:
        data, fds = _recv_fds(sock, 1 << 16, 1 + _MAX_TASK_FILES)
        while len(data) < 4 or len(data) < 4 + struct.unpack_from('>I', data)[0]:
            more = sock.recv(1 << 16)
            if not more:
                break
            data += more
        n = struct.unpack_from('>I', data)[0]
        msg = _json_loads(data[4:4 + n])
    except (OSError, ValueError, struct.error) as e:
        raise Failed('await-go', 'read the go frame: %s' % e)
    if not msg.get('go'):
        for fd in fds:
            os.close(fd)
        raise Failed('await-go', 'the server aborted the box')
    abi = msg.get('landlock_abi', 0)
    ntasks = msg.get('tasks', 0)
    if len(fds) != (1 if abi else 0) + ntasks:
        for fd in fds:
            os.close(fd)
        raise Failed('await-go', 'the go frame came with %d fds' % len(fds))
    # These carry the server's credentials (they could move any process into the
    # box): closed here, long before any code runs.
    for fd in fds[len(fds) - ntasks:]:
        try:
            os.write(fd, b'0')
        except OSError as e:
            raise Failed('await-go', 'enter the box\'s cgroup: %s' % e, e.errno or 0)
        finally:
            os.close(fd)
    if abi:
        return fds[0], abi
    return None


_loads = _quote = None  # the runner's JSON codec (serve)


def _json_loads(data):
    """A JSON value from bytes; ValueError when they are not UTF-8 JSON."""
    return _loads(data.decode('utf-8'))


def _json_dumps(msg):
    """A flat message (str keys; str, int, bool or None values) as ASCII JSON."""
    def value(v):
        if v is None:
            return 'null'
        if v is True or v is False:
            return 'true' if v else 'false'
        if isinstance(v, int):
            return str(v)
        return _quote(str(v))
    return '{%s}' % ','.join('%s:%s' % (_quote(k), value(v)) for k, v in msg.items())


def _recv_fds(sock, bufsize, maxfds):
    """socket.recv_fds: the data and the fds passed with it (at most maxfds)."""
    data, anc, _, _ = sock.recvmsg(bufsize, _socket.CMSG_LEN(maxfds * 4))
    fds = []
    for level, kind, cdata in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            n = len(cdata) // 4
            fds.extend(struct.unpack('%di' % n, cdata[:4 * n]))
    return data, fds


def _frame(msg):
    body = _json_dumps(msg).encode()
    return struct.pack('>I', len(body)) + body


def _send(sock, msg):
    try:
        sock.sendall(_frame(msg))
        return True
    except OSError:
        return False


def _read_frame(sock):
    """One frame from the server; None at its end or on a broken frame."""
    def exactly(n):
        buf = b''
        while len(buf) < n:
            b = sock.recv(n - len(buf))
            if not b:
                return None
            buf += b
        return buf
    hdr = exactly(4)
    if hdr is None:
        return None
    n = struct.unpack('>I', hdr)[0]
    if n & CHUNK_BIT or n > MAX_FRAME:
        return None  # no data follows any request a zygote box serves
    body = exactly(n)
    if body is None:
        return None
    try:
        return _json_loads(body)
    except ValueError:
        return None


def _agent(sock, fds, session):
    """J's life once confined: starts L, tells the server of each end of it, serves
    start and signal requests until the server closes the socket, then exits. In a
    newly forked L, calls session() (see serve) and returns what it returns."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    _signal.set_wakeup_fd(w)
    _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(r, select.POLLIN)
    child, started = 0, False

    def start():
        nonlocal child, started
        if started:
            _drain(fds[3])
        started = True
        child = os.fork()
        return child == 0

    def interpreter():
        _interpreter(fds)
        sock.detach()  # closed already (_interpreter): never close the number again
        return session()

    if start():
        return interpreter()
    if not _send(sock, {'kind': 'started'}):
        os._exit(0)
    while True:
        try:
            ready = poller.poll()
        except InterruptedError:
            continue
        try:
            while os.read(r, 64):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == child:
                child = 0
                msg = {'kind': 'exited'}
                if os.WIFSIGNALED(status):
                    msg['signal'] = os.WTERMSIG(status)
                    msg['exit_code'] = 128 + msg['signal']
                else:
                    msg['exit_code'] = os.waitstatus_to_exitcode(status)
                if not _send(sock, msg):
                    os._exit(0)
        if not any(fd == sock.fileno() for fd, _ in ready):
            continue
        m = _read_frame(sock)
        if m is None:
            os._exit(0)  # the server closed the box
        op = m.get('op')
        if op == 'start':
            if child == 0 and start():
                return interpreter()
            if not _send(sock, {'kind': 'started'}):
                os._exit(0)
        elif op == 'signal':
            sig = m.get('signal')
            if child and sig in (_signal.SIGINT, _signal.SIGKILL):
                try:
                    os.killpg(child, sig)
                except OSError:
                    pass
        elif not _send(sock, {'kind': 'fail', 'code': 'failed',
                              'error': 'operation %r is served by the server in this box' % op}):
            os._exit(0)


def _drain(fd):
    """Drops what an ended interpreter left unread in the request pipe."""
    os.set_blocking(fd, False)
    try:
        while os.read(fd, 1 << 16):
            pass
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)


def _interpreter(fds):
    """L, right after the fork: the session's fds as the Go init gives them (0
    /dev/null, 1 and 2 the output, 3 the report, 4 the requests), nothing else
    open, in /workspace, in a session of its own; then back to the runner."""
    _signal.set_wakeup_fd(-1)
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    os.setsid()
    null = os.open('/dev/null', os.O_RDWR)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64) for fd in (null,) + tuple(fds)]
    for i, fd in enumerate(high):
        os.dup2(fd, i)
    os.closerange(5, os.sysconf('SC_OPEN_MAX'))
    os.chdir('/workspace')
    # Forked interpreters share the zygote's random state: reseed what is seeded once.
    nprand = sys.modules.get('numpy.random')
    if nprand is not None:
        try:
            nprand.seed()
        except Exception:
            pass

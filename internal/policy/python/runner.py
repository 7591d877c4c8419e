"""moat's Python runner: the language-level policy for Python code in a moat box.

The engine starts it inside the box, usually compiled (see policy/python.CompileRunner),

    /usr/bin/python3 -u -I -S /.moat/runner.pyc [--policy FILE] [--check-only] /.moat/main.py [ARGS...]
    /usr/bin/python3 -u -I -S /.moat/runner.pyc [--policy FILE] [--preload=MOD,...] --session
    /usr/bin/python3 -u -I -S /.moat/runner.pyc [--policy FILE] [--preload=MOD,...] --zygote --session

with the policy at /.moat/policy.json (or FILE) and a report channel on file
descriptor 3 (and, in a session, a request channel on fd 4; see "Session"). It is
DEFENCE IN DEPTH and a source of clear, early errors. The box
(namespaces, seccomp, Landlock, cgroups) is the security boundary; nothing here is
needed to keep the host safe, and a determined program can get past in-process checks
(see "Known limits"). -I matters: without it Python reads PYTHON* variables and .pth
files of a user site directory under HOME=/workspace before this file runs.

Two layers
==========

1. Static checks, before any of the program runs. The program is compiled once (as
   `python3 main.py` would); when the names and string constants of its code objects
   touch anything the policy names (a denied module, a denied builtin loaded as a
   global, a denied attribute, a module rule, /.moat), the source is parsed with
   `ast` and walked: imports and from-imports (also `__import__('x')`,
   `importlib.import_module('x')` and `sys.modules['x']` with literal names), uses of
   denied builtins by name, called or not (identifiers are NFKC-normalised by the
   parser, so `ｅｖａｌ` is `eval`), denied attributes (also inside string literals,
   which covers getattr/attrgetter names, format fields like '{0.__globals__}' and
   literal concatenations), module rules through import aliases (`import os as o;
   o.system`, `from os import system`), denied modules reached as attributes, literal
   paths under /.moat and, when file_access is "sandbox", literal writes outside /tmp
   and /workspace. Findings are reported and the runner exits 77 without running the
   program. The walk costs 5-10 ms, so it runs only when the prefilter says so (always
   in allowlist or sandbox mode). --check-only stops after this layer: status 0, 77
   or 1 (syntax error), and the program never runs.

2. Runtime checks: a PEP 578 audit hook (sys.addaudithook), installed just before the
   program runs. A violation is reported and the process ends at once with
   os._exit(77), so the program cannot catch it and keep probing. A refusal that is
   not the program's doing (see below) raises PermissionError instead.

Origin rule
===========

A frame is *library* code when its code object's file lies under the interpreter's
library directories (the sys.path entries under sys.base_prefix when the runner
starts; read-only in the box) or is frozen ("<frozen ...>"). Everything else is *user*
code: the program (compiled under its own path, /.moat/main.py), modules it writes
and imports, code compiled from strings ("<string>", "<timeit-src>", ...) even when a
library compiled it, and the runner's own frames (but its error printer and the
fork_exec guard, trusted by code object identity). Library file names cannot be
forged: compiling under one requires the source to equal that file, code objects are
built by user code only when dynamic code is allowed, and sourceless .pyc files load
only from library directories.

- imports: a denied import is refused when the nearest frame outside importlib is
  user code, or is library code that neither names the module (co_names) nor runs a
  module's initialisation, so a library cannot serve as a trampoline
  (`Thread(target=__import__, args=('subprocess',))`). Libraries import what they
  need. In allowlist mode a few modules the interpreter's C code imports by itself
  (_strptime, encodings, ...) are always allowed.
- dynamic code (compile, exec, marshal, code and function objects): refused from user
  code; from library code unless the library frame itself calls exec/eval/compile,
  is a module body or an extension module's initialisation (dataclasses, namedtuple,
  typing, six, Cython do; a trampoline such as threading's run() or an event loop's
  callback does not). What a library compiles from a string runs as user code, so
  timeit, doctest, code and runpy cannot launder it.
- processes, network, file writes (sandbox): refused whoever asks when the profile
  denies them. The walk skips the stdlib modules that only carry a request out
  (subprocess, os, pty, multiprocessing, asyncio, threading, socket, urllib, http,
  pathlib, shutil, ...). If it reaches user code, or a library frame that does not
  name the API itself (pandas' apply(os.system)), it is the program's violation;
  if a library asked on its own (matplotlib runs fc-list to list fonts, platform runs
  uname), the hook raises PermissionError, which such libraries handle.
- ctypes: refused while user code is on the stack, unless an import is in progress in
  between (numpy loads ctypes when it is imported).
- attributes and frames (object.__getattr__ and friends, sys._getframe, tracing):
  refused from user code.
- pickle.find_class of dangerous globals, sys.addaudithook, gc introspection, pdb
  started by the program and files under /.moat (but the program's own file):
  refused whoever asks.

Audit events used (CPython 3.11, docs.python.org/3.11/library/audit_events.html)
================================================================================

import; compile, exec, marshal.loads, marshal.load, code.__new__, function.__new__;
subprocess.Popen, os.system, os.exec, os.spawn, os.posix_spawn, os.fork, os.forkpty,
pty.spawn, os.kill, os.killpg, signal.pthread_kill; socket.__new__ (but AF_UNIX,
which asyncio uses), socket.connect, socket.bind, socket.sendto, socket.sendmsg,
socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex,
socket.gethostbyaddr, socket.getnameinfo, socket.sethostname, urllib.Request,
http.client.connect; ctypes.dlopen, ctypes.dlsym, ctypes.dlsym/handle,
ctypes.call_function, ctypes.cdata, ctypes.cdata/buffer, ctypes.addressof,
ctypes.string_at, ctypes.wstring_at, ctypes.create_string_buffer,
ctypes.create_unicode_buffer, ctypes.get_errno, ctypes.set_errno,
ctypes.set_exception; open, os.remove, os.rmdir, os.mkdir, os.rename, os.symlink,
os.link, os.truncate, os.chmod, os.chown; pickle.find_class; object.__getattr__
(3.11 raises it for __code__, f_code, tb_frame, gi_frame, gi_code, cr_frame,
ag_frame), object.__setattr__ (function attributes and every attribute of a class),
object.__delattr__; sys._getframe, sys._current_frames, sys.settrace,
sys.setprofile, sys.addaudithook; gc.get_objects, gc.get_referrers,
gc.get_referents; builtins.breakpoint, pdb.Pdb. Only events the profile denies get
a handler; every other event costs one dict lookup.

_posixsubprocess.fork_exec raises no event: when the profile denies subprocess it is
replaced by a guard reporting a violation (subprocess binds it when first imported,
after this point; the subprocess.Popen event refuses every legitimate way there).

Self-protection
===============

The hook and its helpers are closures built before the program runs and use no
global names (builtins are captured too; a test checks the bytecode), so replacing
builtins, module attributes, sys.modules entries or the runner's globals does not
change their decisions. There is no "inside the hook, skip checks" state: code the
program gets to run in the middle of the hook (a signal handler, a __del__ run by
the garbage collector) is checked like any other; only the hook's own sys._getframe
call is exempt, by a one-shot token that fails closed if stolen. Only the interpreter's hook list refers to the hook; gc
introspection and sys.addaudithook are refused. Event arguments are read as exact
str copies, so str subclasses run no code inside the hook. The program gets a fresh
__main__ module whose builtins lack the denied ones (except __import__, which the
import statement needs; the static layer refuses its use by name). The report
descriptor is moved off fd 3 before the program runs; the channel is untrusted input
for the engine all the same.

The hook knows the code the runner itself runs by two containers that only the
runner changes: `allowed` (id -> code object: the program and its trailing expression,
or those of a session's current call, which exec may run from user code) and
`current` (current[0]: the file name of the program or call, for violation lines).
No global name, module attribute or object handed to the program refers to them:
only the hook's and the fork_exec guard's closure cells and the runner's own frames
(below the program's on the stack) do, and the program can reach those only by the
frame and closure introspection the policy refuses (sys._getframe, tb_frame,
gi_frame at run time; f_back, f_locals, __closure__ statically), with the limits
below. A session empties `allowed` after each call. In a session the hook also
trusts, by code object identity, the two functions that compile requests (_split
and _parse, made by _compilers with no global names), for compile events only:
compiling gains nothing unless the runner then puts the result in `allowed`.

Report channel
==============

One JSON object per line, each written with one loop of os.write:

    {"kind":"violation","rule":"python.import","detail":"...","line":3}
    {"kind":"result","repr":"150.0"}
    {"kind":"display","mime_type":"image/png","data":"<base64>"}

result is the repr of a trailing expression that is not None, at most 64 KiB, with
"truncated":true when cut; the expression must start a line. display is one figure
the code left open in matplotlib.pyplot, rendered with savefig(format='png') after
the code ends (but not after a violation or an interrupt), at most 8 figures and
4 MiB of PNG per program or call (a "moat: " note on stderr tells what was left out);
then all figures are closed. MPLBACKEND defaults to Agg. Without fd 3, or with
/dev/null there, violations go to stderr, prefixed "moat: ", and nothing else is
reported. Exit status: 77 policy violation; 70 the runner could not start (bad
policy, unreadable code); 1 an uncaught exception or syntax error, printed as Python
would; SystemExit as Python handles it.

Session
=======

With --session the runner keeps one interpreter, and one __main__, for many calls,
like a notebook kernel: variables, imports and functions persist. The request channel
is fd 4 (moved off it, like fd 3, before any code runs); the report channel is
required. Once the hook is installed the runner writes {"kind":"ready"}, then serves
requests until fd 4 ends (status 0). With --zygote the runner, once preloaded, is
moat's zygote (zygote.py beside it), forked into fresh boxes; in each, the forked
interpreter goes on as a session runner (the native backend's zygote_linux.go). A request is a header line of ASCII JSON,
{"id":N,"bytes":L} (0 <= N < 2**63, 0 <= L <= 8 MiB, no other keys, at most 200
bytes), then exactly L bytes of UTF-8 code. A malformed header, or fd 4 ending inside
a request, ends the runner with status 70 and a "moat: bad request" line on stderr:
the protocol's place is lost. For each call the runner writes the call's report lines
(as above), flushes sys.stdout and sys.stderr, then

    \n{"kind":"done","id":N,"exit":E}\n

(the newline first: a line the code left unterminated on the channel cannot swallow
it). E is 0; 1 for an uncaught exception or a SyntaxError (the traceback on stderr,
with source lines: call k is compiled as "<cell k>" and its source put in linecache);
77 when the static layer refused the code (violation lines first; the code did not
run); 130 when SIGINT interrupted the call; 70 when the code is not UTF-8 or the
static layer failed; for SystemExit the status Python would exit with (the message
of a non-int code on stderr), and the session goes on. A runtime violation ends the
interpreter with status 77 as in a single run, with no done line: the host restarts
it, and the session's state is gone.

SIGINT raises KeyboardInterrupt only during a call: from just before the code runs
until its report is ready. Outside calls (reading requests, writing the report) the
runner's SIGINT handler does nothing, so an interrupt there is lost, never fatal; a
SIGINT handler the code installs lasts until its call ends. The request reader takes
nothing out of its buffer until a whole request is in it, so an interrupted read could
be repeated without losing the protocol's place. A session's __main__ has no
__file__ and sys.argv is [''].

Known limits
============

A program that reaches importlib's internals through an allowed module's attributes
by computed names loads modules without an import event (a fresh _posixsubprocess
too); callbacks run by a library read interpreter internals (frames from
inspect.stack(), __globals__ through a library's getattr) without an event; module
rules without a matching event are enforced statically only; native code of allowed
libraries is not watched; code the runtime layer allows after a library compiled it
was never seen by the static layer; a signal handler receives a frame without an
event. A program that reaches the runner's frames that way can, in a session, also
use the runner's _split and `allowed` to run code it compiles, and can forge report
lines (a done line needs the call's id, which the host should make random). The box
bounds all of these.
"""

import sys
import os
import _ast  # built in; a session walks ASTs after the hook is installed

_PROTECTED = '/.moat'
_SANDBOX_DIRS = ('/tmp', '/workspace')
_WRITE_ANYWHERE = ('/dev/null', '/dev/stdout', '/dev/stderr')
_EXIT_VIOLATION = 77
_EXIT_INTERNAL = 70
_RESULT_CAP = 64 << 10  # python.MaxResultBytes
_MAX_FINDINGS = 50

# Modules whose code only carries out a request for whoever called them: the origin of
# a process, network or file event is looked for beyond these (paths relative to the
# stdlib directory; frozen modules by name).
_CARRIERS = (
    'subprocess.py', 'os.py', 'pty.py', 'multiprocessing/', 'concurrent/futures/',
    'asyncio/', 'threading.py', 'socket.py', 'ssl.py', 'selectors.py', 'urllib/',
    'http/', 'ftplib.py', 'smtplib.py', 'poplib.py', 'imaplib.py', 'nntplib.py',
    'telnetlib.py', 'socketserver.py', 'xmlrpc/', 'pathlib.py', 'shutil.py',
    'tempfile.py', '_pyio.py', 'gzip.py', 'bz2.py', 'lzma.py', 'zipfile.py',
    'tarfile.py', 'fileinput.py', 'codecs.py', 'io.py', 'pickle.py', 'pdb.py', 'bdb.py',
)
_FROZEN_CARRIERS = ('<frozen os>', '<frozen io>', '<frozen codecs>')

# Names a library's own code uses when it starts a process, opens a connection or
# writes a file itself (rather than calling a callable it was given).
_PROCESS_API = frozenset((
    'subprocess', 'Popen', 'call', 'check_call', 'check_output', 'run', 'getoutput',
    'getstatusoutput', 'system', 'popen', 'fork', 'forkpty', 'spawnv', 'spawnve', 'spawnvp',
    'spawnvpe', 'spawnl', 'spawnle', 'spawnlp', 'spawnlpe', 'execv', 'execve', 'execvp',
    'execvpe', 'execl', 'execle', 'execlp', 'execlpe', 'posix_spawn', 'posix_spawnp', 'kill',
    'killpg', 'pthread_kill', 'create_subprocess_exec', 'create_subprocess_shell',
))
_NETWORK_API = frozenset((
    'socket', 'create_connection', 'connect', 'connect_ex', 'bind', 'sendto', 'sendmsg',
    'getaddrinfo', 'gethostbyname', 'gethostbyname_ex', 'gethostbyaddr', 'getnameinfo',
    'urlopen', 'Request', 'request', 'urllib', 'http', 'HTTPConnection', 'HTTPSConnection',
    'open_connection', 'create_server', 'start_server',
))
_FILE_API = frozenset((
    'open', 'io', 'write', 'mkdir', 'makedirs', 'remove', 'unlink', 'rename', 'replace',
    'rmdir', 'removedirs', 'symlink', 'link', 'truncate', 'chmod', 'chown', 'touch',
    'write_text', 'write_bytes', 'copyfile', 'copy', 'copy2', 'copytree', 'move', 'rmtree',
    'mkstemp', 'mkdtemp', 'NamedTemporaryFile', 'TemporaryFile', 'FileIO', 'save', 'savefig',
    'Path', 'fspath', 'fsencode',
))

# What a shell-like or network-like module is for, to end a detail with advice.
_HINTS = {
    'subprocess': '; use Python code instead of shell commands',
    '_posixsubprocess': '; use Python code instead of shell commands',
    'pty': '; use Python code instead of shell commands',
    'os': '; use Python code instead of shell commands',
    'multiprocessing': '; use threads or vectorised numpy/pandas code instead of processes',
    'socket': ' (the box has no network)',
    '_socket': ' (the box has no network)',
    'ssl': ' (the box has no network)',
    'urllib': ' (the box has no network)',
    'http': ' (the box has no network)',
    'requests': ' (the box has no network)',
    'ctypes': '; native code is not allowed',
    '_ctypes': '; native code is not allowed',
    'importlib': '; use a plain import statement',
}

# Modules never worth unpickling from untrusted data, whatever the profile.
_PICKLE_DANGER = frozenset((
    'os', 'posix', 'nt', 'subprocess', '_posixsubprocess', 'sys', 'importlib', 'ctypes',
    '_ctypes', 'socket', '_socket', 'pty', 'multiprocessing', 'runpy', 'code', 'codeop',
    'pickle', '_pickle', 'marshal', 'types', 'operator', '_operator', 'shutil',
    'webbrowser', 'signal', 'pdb', 'timeit', 'doctest', 'gc', 'inspect', 'pydoc',
    'platform', 'asyncio',
))
_PICKLE_BUILTINS = frozenset(('getattr', 'setattr', 'delattr', 'globals', 'locals', 'vars'))

_DYNAMIC = ('eval', 'exec', 'compile')

# Modules every allowlist allows: the interpreter's C code imports them on its own from
# whatever frame is running (datetime.strptime imports _strptime, codec lookup imports
# encodings.*), and none of them reaches a capability.
_IMPLICIT = frozenset((
    '__future__', '_strptime', 'encodings', 'codecs', 'warnings', 'copyreg', '_compat_pickle',
    'locale', '_locale', 'unicodedata', 'linecache',
))

# The rule reported for module attributes that guard the runner itself.
_RULE_OF = {
    ('sys', 'addaudithook'): 'python.hook', ('sys', 'settrace'): 'python.hook',
    ('sys', 'setprofile'): 'python.hook', ('gc', 'get_objects'): 'python.hook',
    ('gc', 'get_referrers'): 'python.hook', ('gc', 'get_referents'): 'python.hook',
    ('sys', '_getframe'): 'python.attribute', ('sys', '_current_frames'): 'python.attribute',
}


class _Policy:
    """The policy file, checked and converted to sets."""

    def __init__(self, raw):
        if type(raw) is not dict:
            raise ValueError('the policy is not a JSON object')

        def strs(key):
            v = raw.get(key)
            if v is None:
                return frozenset()
            if type(v) is not list or any(type(x) is not str for x in v):
                raise ValueError(key + ' is not a list of strings')
            return frozenset(v)

        self.profile = raw.get('profile') or 'unnamed'
        self.mode = raw.get('mode') or 'denylist'
        if type(self.profile) is not str or self.mode not in ('denylist', 'allowlist', 'off'):
            raise ValueError('profile must be a string and mode one of denylist, allowlist, off')
        self.allow = strs('allow_modules')
        self.deny = strs('deny_modules')
        self.builtins = strs('deny_builtins')
        self.attrs = strs('deny_attributes')
        fa = raw.get('file_access') or 'any'
        if fa not in ('any', 'sandbox'):
            raise ValueError('file_access must be any or sandbox')
        self.sandbox = fa == 'sandbox'
        self.rules = {}
        mods = raw.get('modules') or {}
        if type(mods) is not dict:
            raise ValueError('modules is not an object')
        for mod, r in mods.items():
            if type(r) is not dict:
                raise ValueError('modules.%s is not an object' % mod)
            allow, deny = r.get('allow'), r.get('deny')
            if allow is not None and deny is not None:
                raise ValueError('modules.%s has both allow and deny' % mod)
            if allow is None and deny is None:
                continue
            pats = allow if allow is not None else deny
            if type(pats) is not list or any(type(x) is not str for x in pats):
                raise ValueError('modules.%s is not a list of strings' % mod)
            exact = frozenset(p for p in pats if '*' not in p)
            prefixes = tuple(p[:-1] for p in pats if p.count('*') == 1 and p.endswith('*'))
            other = tuple(p for p in pats if '*' in p and not (p.count('*') == 1 and p.endswith('*')))
            self.rules[mod] = (allow is not None, exact, prefixes, other, tuple(sorted(pats)))


def _rule_funcs(p):
    """Returns module_denied(name) and attr_denied(module, attr) for policy p.

    Both are closures without global names: the audit hook uses them too.
    Names must be exact str.
    """
    allowlist = p.mode == 'allowlist'
    allow, deny, rules = p.allow, p.deny, p.rules
    implicit = _IMPLICIT
    aliases = {'posix': 'os', 'nt': 'os'}
    rfind, sw, find = str.rfind, str.startswith, str.find
    _len = len

    def module_denied(name):
        n = name
        while True:
            if allowlist:
                if n in allow or n in implicit:
                    return False
            elif n in deny:
                return True
            i = rfind(n, '.')
            if i < 0:
                return allowlist
            n = n[:i]

    def glob(pat, s):
        parts = pat.split('*')
        if not sw(s, parts[0]):
            return False
        i = _len(parts[0])
        for part in parts[1:-1]:
            j = find(s, part, i)
            if j < 0:
                return False
            i = j + _len(part)
        last = parts[-1]
        return _len(s) - i >= _len(last) and s.endswith(last)

    def attr_denied(module, attr):
        r = rules.get(aliases.get(module, module))
        if r is None:
            return False
        is_allow, exact, prefixes, other = r[0], r[1], r[2], r[3]
        hit = attr in exact or sw(attr, prefixes)
        if not hit:
            for pat in other:
                if glob(pat, attr):
                    hit = True
                    break
        return hit != is_allow

    return module_denied, attr_denied


# ---------------------------------------------------------------- details

def _hint(module):
    return _HINTS.get(module.partition('.')[0], '')


def _import_detail(p, name):
    if p.mode == 'allowlist':
        names = sorted(p.allow)
        shown = ', '.join(names[:20]) + (', ...' if len(names) > 20 else '')
        return "import of '%s' is blocked by profile '%s', which allows only: %s" % (name, p.profile, shown)
    return "import of '%s' is blocked by profile '%s'%s" % (name, p.profile, _hint(name))


def _call_detail(p, module, attr, called):
    verb = 'call of' if called else 'use of'
    r = p.rules.get({'posix': 'os', 'nt': 'os'}.get(module, module))
    if r is not None and r[0]:
        pats = r[4]
        shown = ', '.join(pats[:20]) + (', ...' if len(pats) > 20 else '')
        return "%s %s.%s is blocked by profile '%s'; %s allows only: %s" % (verb, module, attr, p.profile, module, shown)
    hint = ''
    if module in ('os', 'posix', 'nt') and attr.startswith(('system', 'popen', 'exec', 'spawn', 'fork', 'posix_spawn')):
        hint = '; use Python code instead of shell commands'
    elif attr.startswith('kill'):
        hint = '; processes in the box are managed by moat'
    elif module == 'sys' or module == 'gc':
        hint = "; it would expose moat's runtime checks"
    return "%s %s.%s is blocked by profile '%s'%s" % (verb, module, attr, p.profile, hint)


def _builtin_detail(p, name, called):
    hints = {
        'eval': '; write the code directly instead of building it as a string',
        'exec': '; write the code directly instead of building it as a string',
        'compile': '; write the code directly instead of building it as a string',
        '__import__': '; use an import statement',
        'breakpoint': '; there is no debugger in the box',
        '__builtins__': '; call builtins by name',
    }
    what = ('call of %s()' if called else 'use of %s') % name
    return "%s is blocked by profile '%s'%s" % (what, p.profile, hints.get(name, ''))


def _attr_detail(p, name):
    return ("access to attribute '%s' is blocked by profile '%s'; "
            "introspection of interpreter internals is not allowed" % (name, p.profile))


def _write_detail(p, path):
    return "writing '%s' is blocked by profile '%s'; write under /workspace or /tmp" % (path, p.profile)


def _protected_detail(path):
    return "access to '%s' is blocked: files under /.moat belong to moat" % path


# ---------------------------------------------------------------- static checks

def _interesting(p, module_denied, code_objects, src=None):
    """Reports whether the compiled code touches anything the policy names, so that
    the source needs the full AST walk (about 5-10 ms). A cheap superset of what
    _check reports: names and string constants of all code objects. In allowlist
    mode the imports are read from the bytecode (_imports_allowed) and in sandbox
    mode the calls that could write to a literal path (_may_write_outside); either
    falls back to the walk when unsure. MOAT_PYTHON_STATIC_WALK=always forces the
    walk (tests compare both paths)."""
    allowlist = p.mode == 'allowlist'
    if (allowlist or p.sandbox) and (src is None or sys.version_info[:2] != (3, 11)
                                     or os.environ.get('MOAT_PYTHON_STATIC_WALK') == 'always'):
        return True
    code_type = type(code_objects[0])
    names, consts, todo = set(), [], list(code_objects)
    codes = []
    loaded = set()  # denied builtins loaded as globals, not only attributes (re.compile)
    while todo:
        co = todo.pop()
        codes.append(co)
        names.update(co.co_names)
        for b in p.builtins.intersection(co.co_names):
            if _loads_global(co, b):
                loaded.add(b)
        stack = list(co.co_consts)
        while stack:
            c = stack.pop()
            t = type(c)
            if t is str:
                consts.append(c)
            elif t is code_type:
                todo.append(c)
            elif t is tuple or t is frozenset:
                stack.extend(c)
    if loaded or not names.isdisjoint(p.attrs | {'__builtins__', 'builtins', 'modules'}):
        return True
    if allowlist:
        # The walk checks modules only in imports and in __import__('x'),
        # importlib.import_module('x') and sys.modules['x'] ('modules' is above).
        if '__import__' in names or 'import_module' in names:
            return True
        if not _imports_allowed(module_denied, codes, src):
            return True
    else:
        for n in names:
            if module_denied(n) or module_denied(n.partition('.')[0]):
                return True
    const_set = set(consts)
    words, prefixes = set(p.builtins), []
    for mod, r in p.rules.items():
        present = mod in names or mod in const_set or (mod == 'os' and ('posix' in names or 'nt' in names))
        if not present:
            continue
        if r[0] or r[3]:
            return True  # allow rules and general globs: walk
        words.update(r[1])
        prefixes.extend(r[2])
    prefixes = tuple(prefixes)
    for n in names:
        if n in words and n not in p.builtins or (prefixes and n.startswith(prefixes)):
            return True
    blob = '\n'.join(consts)
    for w in p.attrs:
        if w in blob:
            return True
    if _PROTECTED in blob:
        return True
    for c in const_set:
        if c in words or (prefixes and c.startswith(prefixes)) or (not allowlist and module_denied(c)):
            return True
    if p.sandbox and _may_write_outside(codes):
        return True
    return False


# CPython 3.11 opcodes (checked by a test against the opcode module).
_CACHE, _PUSH_NULL, _LOAD_CONST, _LOAD_ATTR, _IMPORT_NAME, _IMPORT_FROM = 0, 2, 100, 106, 108, 109
_LOAD_FAST, _LOAD_DEREF, _EXTENDED_ARG, _LOAD_CLASSDEREF, _LOAD_METHOD = 124, 137, 144, 148, 160


def _imports_allowed(module_denied, codes, src):
    """Reports whether every import statement of the program is allowed, reading
    IMPORT_NAME/IMPORT_FROM from the bytecode of codes (all code objects). False
    (walk) when unsure: a relative import, an EXTENDED_ARG, an unusual sequence, or
    fewer import statements in the bytecode than 'import' occurs in src (the
    compiler drops dead code such as `if 0: import x`, which the walk still sees)."""
    if sys.version_info[:2] != (3, 11):
        return False
    statements = 0
    for co in codes:
        code = co.co_code
        at = []
        for op in (_IMPORT_NAME, _IMPORT_FROM):
            i = code.find(op)
            while i >= 0:
                if i % 2 == 0:
                    at.append(i)
                i = code.find(op, i + 1)
        if not at:
            continue
        at.sort()
        names, consts = co.co_names, co.co_consts
        positions = None
        seen = set()
        module = None
        for i in at:
            if i < 4 or code[i - 2] == _EXTENDED_ARG:
                return False
            name = names[code[i + 1]]
            if code[i] == _IMPORT_FROM:
                if module is None or module_denied(module + '.' + name):
                    return False
                continue
            # LOAD_CONST level; LOAD_CONST fromlist; IMPORT_NAME name
            if code[i - 2] != _LOAD_CONST or code[i - 4] != _LOAD_CONST or (i >= 6 and code[i - 6] == _EXTENDED_ARG):
                return False
            level = consts[code[i - 3]]
            if type(level) is not int or level != 0 or module_denied(name):
                return False
            module = name
            if positions is None:
                positions = list(co.co_positions())
            pos = positions[i // 2]
            if pos[0] is None or pos[2] is None:
                return False
            seen.add((pos[0], pos[2]))
        statements += len(seen)
    return statements == src.count('import')


def _write_outside(path):
    """Reports whether the static walk refuses a literal write to path in sandbox mode."""
    if path == _PROTECTED or path.startswith(_PROTECTED + '/'):
        return True
    full = path if path.startswith('/') else os.path.join(os.getcwd(), path)
    full = os.path.normpath(full)
    if full in _WRITE_ANYWHERE:
        return False
    return not any(full == d or full.startswith(d + '/') for d in _SANDBOX_DIRS)


_WRITE_NAMES = frozenset(('open', 'write_text', 'write_bytes', 'touch', 'mkdir', 'unlink', 'rmdir',
                          'symlink_to', 'hardlink_to', 'rename', 'replace', 'chmod'))


def _may_write_outside(codes):
    """Sandbox mode: reports whether some code object may pass a string constant that
    _write_outside refuses as the first argument of a call the walk checks (open,
    io/codecs/os.open, Path(...).write_text, ...). Conservative: any such constant
    loaded right after a callable in a code object that names one of those calls."""
    if sys.version_info[:2] != (3, 11):
        return True
    for co in codes:
        if _WRITE_NAMES.isdisjoint(co.co_names):
            continue
        consts = co.co_consts
        bad, keywords = set(), False
        for k, c in enumerate(consts):
            if type(c) is str:
                if _write_outside(c):
                    bad.add(k)
            elif type(c) is tuple and ('file' in c or 'path' in c):
                keywords = True  # keyword arguments: open(mode='w', file='/x')
        if not bad:
            continue
        if keywords:
            return True
        code = co.co_code
        prev = prev2 = (-1, 0)
        ext = 0
        for i in range(0, len(code), 2):
            op = code[i]
            if op == _CACHE:
                continue
            arg = code[i + 1] | ext
            if op == _EXTENDED_ARG:
                ext = arg << 8
                continue
            ext = 0
            if op == _LOAD_CONST and arg in bad:
                pop, parg = prev
                if pop in (_LOAD_METHOD, _LOAD_ATTR) or (pop == _LOAD_GLOBAL and parg & 1):
                    return True
                if pop in (_LOAD_NAME, _LOAD_GLOBAL, _LOAD_FAST, _LOAD_DEREF, _LOAD_CLASSDEREF) \
                        and prev2[0] == _PUSH_NULL:
                    return True
            prev2, prev = prev, (op, arg)
    return False


# CPython 3.11 opcodes (checked by a test against the opcode module).
_LOAD_NAME, _LOAD_GLOBAL = 101, 116


def _loads_global(co, name):
    """Reports whether co loads name as a global or builtin, not only as an attribute.
    Conservative (True) when unsure."""
    if sys.version_info[:2] != (3, 11):
        return True
    k = co.co_names.index(name)
    if k > 127:
        return True  # an EXTENDED_ARG would precede the load
    code = co.co_code
    for pat in (bytes((_LOAD_NAME, k)), bytes((_LOAD_GLOBAL, 2 * k)), bytes((_LOAD_GLOBAL, 2 * k + 1))):
        i = code.find(pat)
        while i >= 0:
            if i % 2 == 0:
                return True
            i = code.find(pat, i + 1)
    return False


def _word_in(word, s):
    """Reports whether word occurs in s as a whole identifier."""
    i = s.find(word)
    while i >= 0:
        before = s[i - 1] if i else ' '
        j = i + len(word)
        after = s[j] if j < len(s) else ' '
        if not (before.isalnum() or before == '_') and not (after.isalnum() or after == '_'):
            return True
        i = s.find(word, i + 1)
    return False


def _check(p, src, filename, module_denied, attr_denied, tree=None):
    """Walks the AST of src (tree when given, from _parse) and returns findings
    [(rule, detail, line)]."""
    A = _ast
    if tree is None:
        tree = _parse(src, filename)

    # Pass 1: flatten, mark called expressions, record import aliases and user definitions.
    nodes = []
    stack = [tree]
    AST = A.AST
    while stack:
        node = stack.pop()
        nodes.append(node)
        for f in node._fields:
            v = getattr(node, f, None)
            if type(v) is list:
                for x in v:
                    if isinstance(x, AST):
                        stack.append(x)
            elif isinstance(v, AST):
                stack.append(v)
    nodes.reverse()

    aliases = {'__builtins__': 'builtins'}
    defined = set()
    for n in nodes:
        t = type(n)
        if t is A.Call:
            n.func._moat_called = True
        elif t is A.Import:
            for a in n.names:
                if a.asname:
                    aliases[a.asname] = a.name
                    defined.add(a.asname)
                else:
                    top = a.name.partition('.')[0]
                    aliases[top] = top
                    defined.add(top)
        elif t is A.ImportFrom and n.module and not n.level:
            for a in n.names:
                if a.name != '*':
                    local = a.asname or a.name
                    aliases[local] = n.module + '.' + a.name
                    if n.module != 'builtins':
                        defined.add(local)
        elif t in (A.FunctionDef, A.AsyncFunctionDef, A.ClassDef):
            defined.add(n.name)
    for _ in range(2):  # o = os; p = o
        for n in nodes:
            if type(n) is A.Assign and type(n.value) is A.Name and n.value.id in aliases:
                for tgt in n.targets:
                    if type(tgt) is A.Name:
                        aliases[tgt.id] = aliases[n.value.id]

    found = []
    seen = set()

    def add(rule, detail, node):
        line = getattr(node, 'lineno', 0) or 0
        key = (rule, detail, line)
        if key not in seen and len(found) < _MAX_FINDINGS:
            seen.add(key)
            found.append(key)

    def literal(node):
        """The value of a string literal or of a concatenation of literals, else None."""
        t = type(node)
        if t is A.Constant and type(node.value) is str:
            return node.value
        if t is A.BinOp and type(node.op) is A.Add:
            a, b = literal(node.left), literal(node.right)
            if a is not None and b is not None:
                return a + b
        if t is A.JoinedStr and all(type(v) is A.Constant for v in node.values):
            return ''.join(v.value for v in node.values)
        return None

    def dotted(node):
        """The dotted name a Name/Attribute chain refers to, resolved through import
        aliases ('o.system' -> 'os.system'), or None when its base is not a module."""
        parts = []
        while type(node) is A.Attribute:
            parts.append(node.attr)
            node = node.value
        t = type(node)
        if t is A.Name:
            base = aliases.get(node.id)
        elif t is A.Subscript and dotted(node.value) == 'sys.modules':
            base = literal(node.slice)
        elif t is A.Call and type(node.func) is A.Name and node.func.id in ('__import__',) and node.args:
            base = literal(node.args[0])
        else:
            base = None
        if base is None:
            return None
        parts.append(base)
        parts.reverse()
        return '.'.join(parts)

    def check_module(name, node):
        if module_denied(name):
            add('python.import', _import_detail(p, name), node)
            return True
        return False

    def check_attr_of(module, attr, node, called):
        """module.attr where module is a dotted module name."""
        if module == 'builtins' and attr in p.builtins:
            add('python.builtin', _builtin_detail(p, attr, called), node)
        elif attr_denied(module, attr):
            add(_RULE_OF.get((module, attr), 'python.call'), _call_detail(p, module, attr, called), node)
        elif p.mode == 'denylist' and module_denied(module + '.' + attr) and not module_denied(module):
            add('python.import', _import_detail(p, module + '.' + attr), node)

    def check_string(s, node):
        for w in p.attrs:
            if w in s and _word_in(w, s):
                add('python.attribute', _attr_detail(p, w), node)
        if s == _PROTECTED or _PROTECTED + '/' in s:
            add('python.file', _protected_detail(s), node)

    def check_path(path, write, node):
        if path is None:
            return
        if path == _PROTECTED or path.startswith(_PROTECTED + '/'):
            add('python.file', _protected_detail(path), node)
            return
        if write and p.sandbox and _write_outside(path):
            add('python.file', _write_detail(p, path), node)

    def is_write_mode(mode):
        return mode is not None and any(c in mode for c in 'wax+')

    def arg(call, i, kw):
        if len(call.args) > i:
            return call.args[i]
        for k in call.keywords:
            if k.arg == kw:
                return k.value
        return None

    pathlib_write = {'write_text', 'write_bytes', 'touch', 'mkdir', 'unlink', 'rmdir',
                     'symlink_to', 'hardlink_to', 'rename', 'replace', 'chmod', 'open'}
    deny_top = {m.partition('.')[0] for m in p.deny} if p.mode == 'denylist' else set()

    for n in nodes:
        t = type(n)
        called = getattr(n, '_moat_called', False)
        if t is A.Import:
            for a in n.names:
                check_module(a.name, a)
        elif t is A.ImportFrom:
            mod = n.module or ''
            if mod and check_module(mod, n):
                continue
            for a in n.names:
                if a.name == '*':
                    r = p.rules.get({'posix': 'os', 'nt': 'os'}.get(mod, mod))
                    if r is not None and r[0]:
                        add('python.call', "'from %s import *' is blocked by profile '%s'; import the names you need" % (mod, p.profile), n)
                    continue
                if mod:
                    check_attr_of(mod, a.name, a, False)
                    if mod != 'builtins' and not attr_denied(mod, a.name):
                        check_module(mod + '.' + a.name, a)
                else:
                    check_module(a.name, a)
        elif t is A.Name:
            if type(n.ctx) is not A.Load:
                continue
            if n.id in p.builtins and n.id not in defined:
                add('python.builtin', _builtin_detail(p, n.id, called), n)
            elif n.id == '__builtins__' and p.builtins:
                add('python.builtin', _builtin_detail(p, '__builtins__', False), n)
            elif n.id in p.attrs:
                add('python.attribute', _attr_detail(p, n.id), n)
        elif t is A.Attribute:
            if n.attr in p.attrs:
                add('python.attribute', _attr_detail(p, n.attr), n)
                continue
            base = dotted(n.value)
            if base is not None:
                check_attr_of(base, n.attr, n, called)
            if n.attr in deny_top:  # a denied module reached as another's attribute: np.ctypeslib.ctypes
                add('python.import', _import_detail(p, n.attr), n)
        elif t is A.Subscript:
            key = literal(n.slice)
            if key is None:
                continue
            if dotted(n.value) == 'sys.modules':
                check_module(key, n)
            elif key in p.builtins:
                v = n.value
                holder = (type(v) is A.Call and type(v.func) is A.Name and v.func.id in ('vars', 'globals', 'locals')) \
                    or (type(v) is A.Attribute and v.attr == '__dict__') \
                    or dotted(v) == 'builtins'
                if holder:
                    add('python.builtin', _builtin_detail(p, key, False), n)
        elif t is A.Call:
            f = n.func
            fname = f.id if type(f) is A.Name and f.id not in defined else None
            full = dotted(f)
            if fname in ('getattr', 'setattr', 'delattr', 'hasattr') and len(n.args) >= 2:
                name = literal(n.args[1])
                base = dotted(n.args[0])
                if name is not None and base is not None:
                    check_attr_of(base, name, n, False)
            elif fname == '__import__' or full in ('importlib.import_module', 'builtins.__import__'):
                name = literal(n.args[0]) if n.args else None
                if name is not None:
                    check_module(name, n)
            elif fname == 'open' or full in ('io.open', 'builtins.open', 'codecs.open', 'os.open'):
                path = literal(arg(n, 0, 'file' if full != 'os.open' else 'path'))
                if full == 'os.open':
                    write = True  # flags are rarely literal; be conservative for literal paths
                else:
                    mode_node = arg(n, 1, 'mode')
                    write = is_write_mode(literal(mode_node) if mode_node is not None else 'r')
                check_path(path, write, n)
            elif type(f) is A.Attribute and f.attr in pathlib_write and type(f.value) is A.Call:
                inner = f.value
                ifull = dotted(inner.func)
                iname = inner.func.id if type(inner.func) is A.Name else None
                if (ifull and ifull.startswith('pathlib.')) or iname in ('Path', 'PurePath', 'PosixPath'):
                    path = literal(inner.args[0]) if inner.args else None
                    if f.attr == 'open':
                        mode_node = arg(n, 0, 'mode')
                        write = is_write_mode(literal(mode_node) if mode_node is not None else 'r')
                    else:
                        write = True
                    check_path(path, write, n)
        elif t is A.Constant:
            if type(n.value) is str:
                check_string(n.value, n)
        elif t is A.BinOp:
            s = literal(n)
            if s is not None:
                check_string(s, n)
        elif t is A.MatchClass:
            for name in n.kwd_attrs:
                if name in p.attrs:
                    add('python.attribute', _attr_detail(p, name), n)
    found.sort(key=lambda f: f[2])
    return found


# ---------------------------------------------------------------- runtime checks

def _make_hook(p, module_denied, attr_denied, allowed, current, emit, trusted_dirs,
               protected, stdlib, trusted_codes):
    """Returns the audit hook. Everything it uses is bound here, as closure variables:
    the hook and its helpers use no global names (a test checks the bytecode).

    allowed maps id(code) to the code objects the runner itself executes (the program
    and its trailing expression, or those of the session's current call); current[0]
    is the file name of the program or of the current call (violation lines, and the
    program may read its own file). Only the runner changes them; see
    "Self-protection". trusted_codes are (error printer, fork_exec guard, _split's
    code, _parse's code), the last two None outside a session."""
    # Builtins and functions captured now, before user code can replace anything.
    _type, _str, _bytes, _int, _list, _tuple = type, str, bytes, int, list, tuple
    _isinstance, _len, _OSError, _PermissionError = isinstance, len, OSError, PermissionError
    _sw, _ew, _rfind, _split, _join = str.startswith, str.endswith, str.rfind, str.split, str.join
    _as_str, _eq, _decode, _encode = str.__str__, str.__eq__, bytes.decode, str.encode
    _getframe, _exit = sys._getframe, os._exit
    _getcwd, _lstat, _readlink = os.getcwd, os.lstat, os.readlink
    _osopen, _osread, _osclose = os.open, os.read, os.close
    import _thread
    _ident = _thread.get_ident
    _wflags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    _rdonly = os.O_RDONLY | getattr(os, 'O_CLOEXEC', 0)

    profile = p.profile
    attrs = p.attrs - {'f_code'}  # see enter()
    sandbox = p.sandbox
    dynamic_denied = not p.builtins.isdisjoint(_DYNAMIC)
    trusted_pre = tuple(d + '/' for d in trusted_dirs) + ('<frozen ',)
    trusted_dirs_pre = tuple(d + '/' for d in trusted_dirs)
    carriers = tuple(stdlib + '/' + c for c in _CARRIERS) + _FROZEN_CARRIERS
    sandbox_dirs = _SANDBOX_DIRS
    write_anywhere = _WRITE_ANYWHERE
    _id = id
    t0, t1, t2, t3 = trusted_codes
    allowed_get = allowed.get
    armed = set()  # threads whose next sys._getframe event is the hook's own (enter())
    arm, disarm, is_armed = armed.add, armed.discard, armed.__contains__
    pickle_danger, pickle_builtins = _PICKLE_DANGER, _PICKLE_BUILTINS | p.builtins
    denied_builtins = p.builtins
    allowlist = p.mode == 'allowlist'
    allow_sorted = sorted(p.allow)
    hints = dict(_HINTS)
    process_api, network_api, file_api = _PROCESS_API, _NETWORK_API, _FILE_API
    pdb_api = frozenset(('Pdb', 'pdb', 'set_trace', 'post_mortem', 'pm', 'runcall', 'runeval', 'runctx'))

    # ---- helpers for frames. enter() must be called directly by a handler, which
    # ---- must be called directly by hook(): the event's frame is 3 levels up.
    # ---- There is no "inside the hook, ignore events" state: a signal handler or a
    # ---- __del__ run by the garbage collector can execute in the middle of the hook,
    # ---- and its events must be checked like any other. Only the sys._getframe
    # ---- event of enter()'s own call is skipped (a one-shot token; should something
    # ---- else consume it first, the hook's own call is refused: fail closed), and
    # ---- f_code, which walking frames reads, is never refused at run time.

    def enter():
        arm(_ident())
        return _getframe(3)

    def trusted(co):
        return co is t0 or co is t1 or co is t2 or co is t3 or _sw(co.co_filename, trusted_pre)

    def user_line(f):
        user_name = current[0]
        while f is not None:
            co = f.f_code
            if _eq(user_name, co.co_filename) is True:
                return f.f_lineno
            f = f.f_back
        return 0

    def violate(rule, detail, f):
        emit('violation', rule, detail, user_line(f))
        _exit(77)

    def nearest(f):
        """The first frame that is not importlib's _call_with_frames_removed trampoline."""
        while f is not None:
            co = f.f_code
            if _sw(co.co_filename, '<frozen importlib._bootstrap') and co.co_name == '_call_with_frames_removed':
                f = f.f_back
                continue
            return f
        return None

    def from_user(f):
        """Reports whether the nearest frame (past trampolines) is user code."""
        f = nearest(f)
        return f is None or not trusted(f.f_code)

    def asked_by_user(f, api):
        """For processes, network and files: reports whether the request came from user
        code, directly or through modules that only carry it out (_CARRIERS). A
        library asked on its own only if its frame names the API (api): otherwise it
        is relaying a callable the program gave it (pandas' apply(os.system))."""
        while f is not None:
            co = f.f_code
            fn = co.co_filename
            if _sw(fn, '<frozen importlib._bootstrap'):
                f = f.f_back
                continue
            if not trusted(co):
                return True
            if not _sw(fn, carriers):
                return api.isdisjoint(co.co_names)
            f = f.f_back
        return True

    def exact(x):
        """x as an exact str (a copy of a str subclass, without calling its methods),
        bytes decoded, else None."""
        t = _type(x)
        if t is _str:
            return x
        if t is _bytes:
            return _decode(x, 'utf-8', 'surrogateescape')
        if _isinstance(x, _str):
            return _as_str(x)
        if _isinstance(x, _bytes):
            return _decode(x, 'utf-8', 'surrogateescape')
        return None

    def show(x):
        s = exact(x)
        if s is None:
            t = _type(x)
            if t is _list or t is _tuple:
                parts = []
                for e in x[:8]:
                    parts.append(show(e))
                s = _join(' ', parts)
            elif t is _int:
                s = _int.__repr__(x)
            else:
                s = '...'
        if _len(s) > 80:
            s = s[:77] + '...'
        return s

    # ---- paths (no os.path: its module globals are user-replaceable)

    def norm(path):
        """path as an absolute, normalised str (links not resolved); None for fds."""
        s = exact(path)
        if s is None:
            return None
        if not _sw(s, '/'):
            s = _getcwd() + '/' + s
        parts = []
        for c in _split(s, '/'):
            if c == '' or c == '.':
                continue
            if c == '..':
                if parts:
                    parts.pop()
                continue
            parts.append(c)
        return '/' + _join('/', parts)

    def real(path):
        """path (normalised, absolute) with symbolic links resolved."""
        rest = _split(path, '/')
        done = ''
        hops = 0
        while rest:
            c = rest.pop(0)
            if c == '' or c == '.':
                continue
            if c == '..':
                done = done[:_rfind(done, '/')] if done else ''
                continue
            cand = done + '/' + c
            try:
                st = _lstat(cand)
            except _OSError:
                rest.insert(0, cand)
                return norm(_join('/', rest))
            if st.st_mode & 0o170000 == 0o120000:
                hops += 1
                if hops > 40:
                    return cand
                target = _readlink(cand)
                if _sw(target, '/'):
                    done = ''
                rest = _split(target, '/') + rest
                continue
            done = cand
        return done or '/'

    def under(path, dirs):
        for d in dirs:
            if path == d or _sw(path, d + '/'):
                return True
        return False

    def check_path(p, write):
        """Refuses a use of the normalised path p: always under /.moat, and writes
        outside the sandbox directories when file_access is sandbox."""
        r = real(p)
        user_name = current[0]
        if (under(p, protected) or under(r, protected)) and (write or (p != user_name and r != user_name)):
            e = enter2()
            violate('python.file', "access to '%s' is blocked: files under /.moat belong to moat" % p, e)
        if write and sandbox and p not in write_anywhere and not under(r, sandbox_dirs):
            e = enter2()
            user = asked_by_user(e, file_api)
            detail = "writing '%s' is blocked by profile '%s'; write under /workspace or /tmp" % (p, profile)
            if user:
                violate('python.file', detail, e)
            raise _PermissionError(1, 'moat: ' + detail)

    def enter2():
        """enter() for helpers one level below a handler."""
        arm(_ident())
        return _getframe(4)

    def import_detail(name):
        if allowlist:
            shown = _join(', ', allow_sorted[:20]) + (', ...' if _len(allow_sorted) > 20 else '')
            return "import of '%s' is blocked by profile '%s', which allows only: %s" % (name, profile, shown)
        return "import of '%s' is blocked by profile '%s'%s" % (name, profile, hints.get(name.partition('.')[0], ''))

    def dynamic_verdict(e):
        """Dynamic code is refused unless the nearest frame is library code that itself
        calls exec, eval or compile (not a callback trampoline)."""
        f = nearest(e)
        if f is None or not trusted(f.f_code):
            return True
        co = f.f_code
        if _sw(co.co_filename, '<frozen importlib._bootstrap') and (
                co.co_name == 'exec_module' or co.co_name == 'create_module'):
            return False  # an extension module's initialisation (Cython runs exec there)
        if co.co_name == '<module>':
            return False  # a library's module body (six binds exec to another name)
        names = co.co_names
        return not ('exec' in names or 'eval' in names or 'compile' in names)

    # ---- handlers: called by hook() only, as handler(event, args)

    def on_import(event, args):
        name = exact(args[0])
        if name is None or not module_denied(name):
            return
        e = enter()
        f, init = e, False
        while f is not None:
            co = f.f_code
            if _sw(co.co_filename, '<frozen importlib._bootstrap'):
                if co.co_name == 'exec_module' or co.co_name == 'create_module':
                    init = True
                f = f.f_back
                continue
            break
        if f is None or not trusted(f.f_code):
            bad = True
        elif init:
            bad = False
        else:
            names = f.f_code.co_names
            last = name[_rfind(name, '.') + 1:]
            bad = not (name in names or last in names or '__import__' in names or 'import_module' in names)
            if bad:  # `from .a.b import c`; a parent of `import a.b.c`
                dotted = name + '.'
                for n in names:
                    if '.' in n and (_ew(name, '.' + n) or _sw(n, dotted)):
                        bad = False
                        break
        if bad:
            violate('python.import', import_detail(name), e)

    def on_exec(event, args):
        co = args[0]
        if allowed_get(_id(co)) is co:
            return
        e = enter()
        bad = dynamic_verdict(e)
        if bad:
            violate('python.exec', "dynamic code execution (exec) is blocked by profile '%s'; "
                    "write the code directly instead of building it at run time" % profile, e)

    def on_compile(event, args):
        fn = exact(args[1]) if _len(args) > 1 else None
        forged = fn is not None and _sw(fn, trusted_pre) and not same_source(fn, args[0])
        if not forged and not dynamic_denied:
            return
        e = enter()
        if not forged and e is not None and (e.f_code is t2 or e.f_code is t3):
            return  # a session's _split or _parse compiles a request of the host
        bad = forged or dynamic_verdict(e)
        if forged:
            violate('python.exec', "compiling code under the name of a library file (%s) is blocked "
                    "by profile '%s'" % (show(fn), profile), e)
        if bad:
            violate('python.exec', "dynamic code execution (compile) is blocked by profile '%s'; "
                    "write the code directly instead of building it at run time" % profile, e)

    def same_source(fn, source):
        """Reports whether source is the content of the library file fn."""
        if _sw(fn, '<frozen '):
            return False
        if _type(source) is _str:
            source = _encode(source, 'utf-8', 'surrogateescape')
        if _type(source) is not _bytes:
            return False
        try:
            fd = _osopen(fn, _rdonly)
        except _OSError:
            return False
        try:
            chunks = []
            while True:
                b = _osread(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
        finally:
            _osclose(fd)
        return b''.join(chunks) == source

    def on_marshal(event, args):
        e = enter()
        if e is None or not trusted(e.f_code):
            bad = dynamic_denied
        else:
            co = e.f_code
            fn = co.co_filename
            if fn == '<frozen importlib._bootstrap_external>' and co.co_name == '_compile_bytecode':
                if e.f_back.f_code.co_qualname == 'SourceLoader.get_code':
                    bad = False  # a cached .pyc of a source file: importlib fixes co_filename
                else:
                    loc = e.f_locals
                    bad = loc.get('source_path') is None and not lib_path(loc.get('bytecode_path'))
            elif fn == '<frozen zipimport>' and co.co_name == '_unmarshal_code':
                bad = not lib_path(e.f_locals.get('pathname'))
            else:
                bad = False
        if bad:
            violate('python.exec', "loading compiled code (%s) is blocked by profile '%s'; "
                    "import modules from source" % (event, profile), e)

    def lib_path(x):
        s = exact(x)
        return s is not None and _sw(s, trusted_dirs_pre)

    def on_new_code(event, args):
        fn = exact(args[1]) if event == 'code.__new__' and _len(args) > 1 else None
        e = enter()
        user = from_user(e)
        if user and (dynamic_denied or (fn is not None and _sw(fn, trusted_pre))):
            violate('python.exec', "building code or function objects (%s) is blocked by profile '%s'; "
                    "define functions with def or lambda" % (event, profile), e)

    def on_process(event, args):
        what = show(args[0]) if args else ''
        if event == 'subprocess.Popen' and _len(args) > 1 and args[1] is not None:
            what = show(args[1])
        e = enter()
        user = asked_by_user(e, process_api)
        if event == 'os.kill' or event == 'os.killpg' or event == 'signal.pthread_kill':
            detail = ("sending a signal (%s) is blocked by profile '%s'; processes in the box are "
                      "managed by moat" % (event, profile))
        else:
            detail = ("starting a process (%s %s) is blocked by profile '%s'; use Python code instead "
                      "of shell commands" % (event, what, profile))
        if user:
            violate('python.process', detail, e)
        raise _PermissionError(1, 'moat: ' + detail)

    def on_network(event, args):
        if event == 'socket.__new__' and _len(args) > 1 and args[1] == 1:  # AF_UNIX: socketpair, asyncio
            return
        what = ''
        if event != 'socket.__new__' and _len(args) > 1:
            what = ' ' + show(args[1])
        e = enter()
        user = asked_by_user(e, network_api)
        detail = "network access (%s%s) is blocked by profile '%s' (the box has no network)" % (event, what, profile)
        if user:
            violate('python.network', detail, e)
        raise _PermissionError(1, 'moat: ' + detail)

    def on_ctypes(event, args):
        e = enter()
        user, f = True, e
        while f is not None:
            co = f.f_code
            if _sw(co.co_filename, '<frozen importlib._bootstrap'):
                user = False
                break
            if not trusted(co):
                break
            f = f.f_back
        if user:
            violate('python.ctypes', "ctypes (%s) is blocked by profile '%s'; native code is not allowed"
                    % (event, profile), e)

    def on_open(event, args):
        path = args[0]
        mode = args[1] if _len(args) > 1 else None
        if _type(mode) is _str and (mode == 'r' or mode == 'rb') and _type(path) is _str and \
                _sw(path, '/usr/') and '/.' not in path:
            return  # fast path: a library reads its own files (imports, fonts)
        p = norm(path)
        if p is None:
            return
        mode = exact(mode)
        if mode is not None:
            write = 'w' in mode or 'a' in mode or 'x' in mode or '+' in mode
        else:
            flags = args[2] if _len(args) > 2 else 0
            write = _type(flags) is _int and (flags & _wflags) != 0
        if not write and _sw(p, '/usr/'):
            return  # library files: read-only in the box, no links to /.moat
        check_path(p, write)

    def on_fs(event, args):
        if event == 'os.rename' or event == 'os.link':
            paths = (args[0], args[1])
        elif event == 'os.symlink':
            paths = (args[1],)
        else:
            paths = (args[0],)
        for path in paths:
            p = norm(path)
            if p is not None:
                check_path(p, True)

    def on_pickle(event, args):
        mod, name = exact(args[0]), exact(args[1])
        if mod is None or name is None:
            return
        bad, top = False, mod
        while True:
            if top in pickle_danger or (not allowlist and module_denied(top)):
                bad = True
                break
            j = _rfind(top, '.')
            if j < 0:
                break
            top = top[:j]
        if not bad:
            bad = attr_denied(mod, name) or (mod == 'builtins' and name in pickle_builtins)
        if bad:
            e = enter()
            violate('python.pickle', "unpickling %s.%s is blocked by profile '%s'; only unpickle plain data"
                    % (show(mod), show(name), profile), e)

    def on_attr(event, args):
        name = args[1] if _len(args) > 1 else None
        if _type(name) is not _str:
            name = exact(name)
            if name is None:
                return
        if name not in attrs:
            return
        e = enter()
        user = from_user(e)
        if user:
            violate('python.attribute', "access to attribute '%s' is blocked by profile '%s'; "
                    "introspection of interpreter internals is not allowed" % (name, profile), e)

    def on_frames(event, args):
        i = _ident()
        if event == 'sys._getframe' and is_armed(i):
            disarm(i)
            return
        e = enter()
        user = from_user(e)
        if user:
            violate('python.attribute', "access to stack frames (%s) is blocked by profile '%s'; "
                    "introspection of interpreter internals is not allowed" % (event, profile), e)

    def on_tracing(event, args):
        e = enter()
        user = from_user(e)
        if user:
            violate('python.hook', "%s is blocked by profile '%s'; tracing hooks would observe moat's "
                    "runtime checks" % (event, profile), e)

    def on_hook(event, args):
        e = enter()
        violate('python.hook', "%s is blocked by profile '%s'; moat's runtime checks cannot be "
                "replaced or inspected" % (event, profile), e)

    def on_breakpoint(event, args):
        e = enter()
        if event == 'pdb.Pdb':  # pdb.set_trace() and friends are the program's; doctest's is not
            user = asked_by_user(e, pdb_api)
        else:
            user = from_user(e)
        if user:
            violate('python.builtin', "the debugger (%s) is blocked by profile '%s'; there is no "
                    "debugger in the box" % (event, profile), e)

    # ---- the table: only events the profile denies get a handler

    table = {}
    if p.mode == 'allowlist' or p.deny:
        table['import'] = on_import
    if dynamic_denied:
        table['exec'] = on_exec
        table['function.__new__'] = on_new_code
    table['compile'] = on_compile
    table['code.__new__'] = on_new_code
    table['marshal.loads'] = on_marshal
    table['marshal.load'] = on_marshal
    process = {
        'os.system': ('os', 'system'), 'os.exec': ('os', 'execv'), 'os.spawn': ('os', 'spawnv'),
        'os.posix_spawn': ('os', 'posix_spawn'), 'os.fork': ('os', 'fork'),
        'os.forkpty': ('os', 'forkpty'), 'os.kill': ('os', 'kill'), 'os.killpg': ('os', 'killpg'),
        'signal.pthread_kill': ('os', 'kill'), 'subprocess.Popen': ('subprocess', None),
        'pty.spawn': ('pty', None),
    }
    for ev, (m, a) in process.items():
        if module_denied(m) or (a is not None and attr_denied(m, a)):
            table[ev] = on_process
    if module_denied('socket') or module_denied('_socket'):
        for ev in ('socket.__new__', 'socket.connect', 'socket.bind', 'socket.sendto',
                   'socket.sendmsg', 'socket.getaddrinfo', 'socket.gethostbyname',
                   'socket.gethostbyname_ex', 'socket.gethostbyaddr', 'socket.getnameinfo',
                   'socket.sethostname', 'urllib.Request', 'http.client.connect'):
            table[ev] = on_network
    if module_denied('ctypes') or module_denied('_ctypes'):
        for ev in ('ctypes.dlopen', 'ctypes.dlsym', 'ctypes.dlsym/handle', 'ctypes.call_function',
                   'ctypes.cdata', 'ctypes.cdata/buffer', 'ctypes.addressof', 'ctypes.string_at',
                   'ctypes.wstring_at', 'ctypes.create_string_buffer',
                   'ctypes.create_unicode_buffer', 'ctypes.get_errno', 'ctypes.set_errno',
                   'ctypes.set_exception'):
            table[ev] = on_ctypes
    table['open'] = on_open
    for ev in ('os.remove', 'os.rmdir', 'os.mkdir', 'os.rename', 'os.symlink', 'os.link',
               'os.truncate', 'os.chmod', 'os.chown'):
        table[ev] = on_fs
    table['pickle.find_class'] = on_pickle
    if attrs:
        table['object.__getattr__'] = on_attr
        table['object.__setattr__'] = on_attr
        table['object.__delattr__'] = on_attr
    for ev, a in (('sys._getframe', '_getframe'), ('sys._current_frames', '_current_frames')):
        if attr_denied('sys', a):
            table[ev] = on_frames
    for ev, a in (('sys.settrace', 'settrace'), ('sys.setprofile', 'setprofile')):
        if attr_denied('sys', a):
            table[ev] = on_tracing
    table['sys.addaudithook'] = on_hook
    for a in ('get_objects', 'get_referrers', 'get_referents'):
        if attr_denied('gc', a):
            table['gc.' + a] = on_hook
    if 'breakpoint' in denied_builtins:
        table['builtins.breakpoint'] = on_breakpoint
        table['pdb.Pdb'] = on_breakpoint

    get = table.get
    def hook(event, args):
        h = get(event)
        if h is not None:
            h(event, args)

    return hook


def _guard_fork_exec(emit, profile, current):
    """Returns the replacement for _posixsubprocess.fork_exec (which raises no audit
    event) that _arm installs: a function that reports a violation, for the
    subprocess.Popen event refuses every legitimate way there first, so reaching it
    means the event was bypassed. The hook trusts its code object (it looks up the
    caller's frame). The replacement refers to nothing of the hook's but current (see
    _make_hook)."""
    _exit, _getframe, _eq = os._exit, sys._getframe, str.__eq__
    detail = ("starting a process (_posixsubprocess.fork_exec) is blocked by profile '%s'; "
              "use Python code instead of shell commands" % profile)

    def fork_exec(*args, **kwargs):
        f, line, user_name = _getframe(1), 0, current[0]
        while f is not None:
            if _eq(user_name, f.f_code.co_filename) is True:
                line = f.f_lineno
                break
            f = f.f_back
        emit('violation', 'python.process', detail, line)
        _exit(77)

    return fork_exec


# ---------------------------------------------------------------- report channel

def _open_report():
    """Moves the report channel off fd 3 and returns its new descriptor, or None
    when fd 3 is closed or /dev/null."""
    try:
        st = os.fstat(3)
    except OSError:
        return None
    if (st.st_mode & 0o170000) == 0o020000 and st.st_rdev == os.makedev(1, 3):
        return None
    fd = os.dup(3)  # not inheritable
    os.close(3)
    return fd


def _open_requests():
    """Moves a session's request channel off fd 4 and returns its new descriptor, or
    None when fd 4 is closed."""
    try:
        os.fstat(4)
    except OSError:
        return None
    fd = os.dup(4)  # not inheritable
    os.close(4)
    return fd


def _make_emit(fd, quote):
    """Returns emit(kind, ...), which writes one JSON line per report with one loop of
    os.write and reports whether it could:

        emit('violation', rule, detail, line)   also to stderr without a channel
        emit('result', repr, truncated=cut)
        emit('display', base64_png)             ASCII bytes
        emit('ready')
        emit('done', request_id, exit_status)

    A done line starts with a newline, so that a line the code left unterminated on
    the channel cannot swallow it."""
    _write, _OSError, _memoryview = os.write, OSError, memoryview

    def write_all(data):
        view = _memoryview(data)
        while view:
            n = _write(fd, view)
            view = view[n:]

    def emit(kind, a=None, b=None, line=0, truncated=False):
        if kind == 'violation':
            if fd is None:
                where = ' (line %d)' % line if line else ''
                _write(2, ('moat: %s: %s%s\n' % (a, b, where)).encode('utf-8', 'backslashreplace'))
                return True
            s = '{"kind":"violation","rule":%s,"detail":%s' % (quote(a), quote(b))
            if line:
                s += ',"line":%d' % line
            data = (s + '}\n').encode('ascii')
        elif fd is None:
            return False
        elif kind == 'result':
            data = ('{"kind":"result","repr":%s%s}\n' % (
                quote(a), ',"truncated":true' if truncated else '')).encode('ascii')
        elif kind == 'display':
            data = b'{"kind":"display","mime_type":"image/png","data":"' + a + b'"}\n'
        elif kind == 'done':
            data = ('\n{"kind":"done","id":%d,"exit":%d}\n' % (a, b)).encode('ascii')
        else:
            data = b'{"kind":"ready"}\n'
        try:
            write_all(data)
        except _OSError:
            if kind == 'violation':
                _write(2, ('moat: %s: %s\n' % (a, b)).encode('utf-8', 'backslashreplace'))
            return False
        return True

    return emit


def _json_codec():
    """Returns (loads, quote) without importing json (and re): ~5 ms saved."""
    try:
        import _json
    except ImportError:
        import json
        return json.loads, json.dumps

    class ctx:
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = None
        memo = None

    scan = _json.make_scanner(ctx)

    def loads(s):
        s = s.strip(' \t\r\n')
        try:
            obj, end = scan(s, 0)
        except StopIteration:
            raise ValueError('not valid JSON') from None
        if end != len(s):
            raise ValueError('trailing data after the JSON value')
        return obj

    return loads, _json.encode_basestring_ascii


# ---------------------------------------------------------------- figures

_MAX_FIGURES = 8
_FIGURE_BYTES = 4 << 20  # PNG bytes per program or call, before base64


def _make_figures():
    """Returns figures(render): when the code imported matplotlib.pyplot, renders the
    figures it left open as PNG (if render) and closes them all; returns (images,
    skipped), images as base64 ASCII bytes. At most _MAX_FIGURES figures and
    _FIGURE_BYTES of PNG; a note on stderr tells what was left out.

    This is the runner's code, called where the program's frames were (the hook treats
    it as user code, like _run). Its own code imports nothing when it runs: binascii
    and _io are bound here, before the hook, so an allowlist need not name them.
    Rendering draws the program's figures, so whatever the program put in them (and
    matplotlib, as a library) runs under the hook as usual."""
    import binascii, _io
    b64, BytesIO, modules = binascii.b2a_base64, _io.BytesIO, sys.modules
    _len, _write, _type, _Exception = len, os.write, type, Exception
    limit, cap = _MAX_FIGURES, _FIGURE_BYTES

    def note(msg):
        _write(2, ('moat: %s\n' % msg).encode('utf-8', 'backslashreplace'))

    def figures(render):
        plt = modules.get('matplotlib.pyplot')
        if plt is None:
            return [], 0
        images, skipped, total = [], 0, 0
        try:
            nums = plt.get_fignums() if render else []
            for i, num in enumerate(nums):
                if _len(images) >= limit:
                    skipped = _len(nums) - i
                    break
                buf = BytesIO()
                try:
                    plt.figure(num).savefig(buf, format='png')
                except _Exception as e:
                    note('figure %s could not be rendered: %s: %s' % (num, _type(e).__name__, e))
                    continue
                png = buf.getvalue()
                if total + _len(png) > cap:
                    skipped = _len(nums) - i
                    break
                total += _len(png)
                images.append(b64(png, newline=False))
        except _Exception as e:
            note('figures could not be rendered: %s: %s' % (_type(e).__name__, e))
        finally:
            try:
                plt.close('all')
            except _Exception:
                pass
        if skipped:
            note('%d more figure%s not shown: at most %d figures and %d MiB of PNG are shown'
                 % (skipped, 's' if skipped > 1 else '', limit, cap >> 20))
        return images, skipped

    return figures


# ---------------------------------------------------------------- running the code

def _compilers():
    """Returns (_split, _parse), the runner's only calls of compile once a session's
    hook is installed; the hook trusts their code objects for compile events (in a
    session only). They use no global names (a test checks the bytecode), so
    replacing builtins.compile cannot make them call something else, and whatever
    they compile still needs the runner to put it in the hook's allowed code objects
    before it can run."""
    _compile, _len, _SyntaxError, ast_only = compile, len, SyntaxError, _ast.PyCF_ONLY_AST

    def split(src, filename):
        """Compiles src and returns (code, tail): tail is the last top-level statement
        compiled in 'eval' mode when it is an expression starting at the beginning of
        a line, else None. Splitting the text is exact: the head must compile on its
        own (so the tail line starts a top-level statement) and the tail must compile
        as one expression. Raises SyntaxError for the whole source."""
        lines = src.splitlines(True)
        i = _len(lines) - 1
        while i >= 0 and (not lines[i][:1] or lines[i][0] in ' \t\r\n\f#'):
            i -= 1
        if i >= 0:
            try:
                tail = _compile('\n' * i + ''.join(lines[i:]), filename, 'eval', dont_inherit=True)
                head = _compile(''.join(lines[:i]), filename, 'exec', dont_inherit=True)
                return head, tail
            except _SyntaxError:
                pass
        return _compile(src, filename, 'exec', dont_inherit=True), None

    def parse(src, filename):
        """Returns the AST of src (for _check)."""
        return _compile(src, filename, 'exec', ast_only, dont_inherit=True)

    return split, parse


_split, _parse = _compilers()


def _fail(msg):
    os.write(2, ('moat: %s\n' % msg).encode('utf-8', 'backslashreplace'))
    os._exit(_EXIT_INTERNAL)


def _site():
    """Does what the site module does at start-up, but for one step, when Python
    skipped it (-S, as Interpreter starts the runner): site-packages directories and
    the path lines of their .pth files join sys.path, and exit, quit, help, copyright,
    credits and license join the builtins. The step left out is running the .pth
    files' import lines, code of installed packages that every start-up would pay for
    (on a Debian host with matplotlib, most of the 4-5 ms site takes; the code never
    needs it: a namespace package imports without it). The user site is off as with
    -I, and sitecustomize is not imported (in a box it is a dangling link into the
    host's /etc)."""
    if not sys.flags.no_site:
        return
    import site
    for d in site.getsitepackages():
        if not os.path.isdir(d) or d in sys.path:
            continue
        sys.path.append(d)
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith('.pth') and not n.startswith('.'))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(d, name), 'rb') as fh:
                    lines = fh.read().decode('utf-8', 'replace').splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.rstrip()
                if not line or line.startswith(('#', 'import ', 'import\t')):
                    continue
                path = os.path.abspath(os.path.join(d, line))
                if path not in sys.path and os.path.exists(path):
                    sys.path.append(path)
    site.setquit()
    site.setcopyright()
    site.sethelper()


def _main(argv):
    _site()
    sys.dont_write_bytecode = True
    os.environ.setdefault('MPLBACKEND', 'Agg')
    policy_path, code_path, rest, check_only, session = '/.moat/policy.json', None, [], False, False
    preload, zygote = [], False
    args = argv[1:]
    while args:
        a = args.pop(0)
        if a == '--policy' and args:
            policy_path = args.pop(0)
        elif a.startswith('--preload='):
            preload = [m for m in a[len('--preload='):].split(',') if m]
        elif a.startswith('--policy='):
            policy_path = a[len('--policy='):]
        elif a == '--check-only':
            check_only = True
        elif a == '--session':
            session = True
        elif a == '--zygote':
            zygote = True
        else:
            code_path, rest = a, args
            break
    if ((code_path is None) != session or (session and check_only) or (preload and not session)
            or (zygote and not session)):
        _fail('usage: runner.py [--policy FILE] [--check-only] CODE [ARGS...]\n'
              '       runner.py [--policy FILE] [--preload=MOD,...] [--zygote] --session')
    runner_dir = os.path.dirname(os.path.abspath(argv[0]))
    policy_path = os.path.abspath(policy_path)

    loads, quote = _json_codec()
    try:
        with open(policy_path, 'rb') as fh:
            p = _Policy(loads(fh.read().decode('utf-8')))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        _fail('cannot load the Python policy %s: %s' % (policy_path, e))
    if zygote:
        prepared = _prepare_session(p, runner_dir, policy_path, preload)
        # Returns in a fresh box's interpreter only, at the end of its session.
        return _serve_zygote(runner_dir, lambda: _session(p, loads, quote, prepared))
    if session:
        # The channels first: no preload module's process can inherit them.
        channels = _open_channels()
        return _session(p, loads, quote, _prepare_session(p, runner_dir, policy_path, preload),
                        channels)
    report = _open_report()
    emit = _make_emit(report, quote)

    filename = os.path.abspath(code_path)  # the program's code objects and tracebacks
    try:
        with open(code_path, 'rb') as fh:
            src = fh.read().decode('utf-8')
    except (OSError, UnicodeDecodeError) as e:
        _fail('cannot read the code %s: %s' % (code_path, e))

    try:
        code, tail = _split(src, filename)
    except (SyntaxError, ValueError) as e:  # ValueError: NUL bytes
        _show_error(e.with_traceback(None))
        return 1

    module_denied, attr_denied = _rule_funcs(p)
    if p.mode != 'off':
        objs = [code] if tail is None else [code, tail]
        if _interesting(p, module_denied, objs, src):
            found = _check(p, src, filename, module_denied, attr_denied)
            if found:
                for rule, detail, line in found:
                    emit('violation', rule, detail, line)
                return _EXIT_VIOLATION
    if check_only:
        return 0

    # A fresh __main__ for the program, as `python3 main.py` run from the working dir.
    cwd = os.getcwd()
    g = _new_main(p, filename)
    sys.argv = [code_path] + rest
    sys.path[:] = [cwd] + [d for d in sys.path if d not in ('', runner_dir)]
    figures = _make_figures() if report is not None else None

    if p.mode != 'off':
        allowed = {id(code): code}
        if tail is not None:
            allowed[id(tail)] = tail
        _install_hook(p, module_denied, attr_denied, allowed, [filename], emit, runner_dir,
                      policy_path, None)
    del p, module_denied, attr_denied
    try:
        status, result, cut = _run(code, tail, g)
    except SystemExit:
        _show_figures(figures, emit, True)
        raise
    if result is not None:
        emit('result', result, truncated=cut)
    _show_figures(figures, emit, status != 130)
    return status


def _install_hook(p, module_denied, attr_denied, allowed, current, emit, runner_dir, policy_path,
                  compilers):
    """Installs the audit hook (and the fork_exec guard), once sys.path is the
    program's. compilers: (_split, _parse) in a session, else None."""
    _arm(*_build_hook(p, module_denied, attr_denied, allowed, current, emit, runner_dir,
                      policy_path, compilers, sys.path[1:]))


def _arm(hook, guard):
    """Installs a hook and fork_exec guard _build_hook made."""
    if guard is not None:
        import _posixsubprocess
        _posixsubprocess.fork_exec = guard
    sys.addaudithook(hook)


def _build_hook(p, module_denied, attr_denied, allowed, current, emit, runner_dir, policy_path,
                compilers, path):
    """Returns the audit hook and the fork_exec guard (or None), for the program's
    sys.path but its first entry (the working directory): path. Installs neither
    (_arm does)."""
    prefix = sys.base_prefix.rstrip('/') + '/'
    trusted_dirs = []
    for d in path:
        d = os.path.normpath(d)
        if d.startswith(prefix) and d not in trusted_dirs:
            trusted_dirs.append(d)
    protected = tuple(dict.fromkeys((_PROTECTED, runner_dir, policy_path)))
    stdlib = getattr(sys, '_stdlib_dir', None) or os.path.dirname(os.__file__)
    guard = None
    if module_denied('subprocess') or module_denied('_posixsubprocess'):
        guard = _guard_fork_exec(emit, p.profile, current)
    split = parse = None
    if compilers is not None:
        split, parse = compilers[0].__code__, compilers[1].__code__
    hook = _make_hook(p, module_denied, attr_denied, allowed, current, emit, tuple(trusted_dirs),
                      protected, stdlib, (_show_error.__code__, guard and guard.__code__, split,
                                          parse))
    return hook, guard


def _new_main(p, filename):
    """Makes a fresh __main__ module for the program (_main_module), puts it in
    sys.modules and returns its globals."""
    mod = _main_module(p, filename)
    sys.modules['__main__'] = mod
    return mod.__dict__


def _main_module(p, filename):
    """Returns a fresh __main__ module for the program: builtins without the denied
    ones (but __import__, which the import statement needs). __file__ is filename,
    unless None (a session)."""
    mod = type(sys)('__main__')
    g = mod.__dict__
    import builtins
    if p.mode == 'off':
        g['__builtins__'] = builtins
    else:
        user_builtins = dict(builtins.__dict__)
        for name in p.builtins:
            if name != '__import__':
                user_builtins.pop(name, None)
        g['__builtins__'] = user_builtins
    if filename is not None:
        g['__file__'] = filename
    return mod


def _show_error(exc):
    """Prints exc as Python's default excepthook would. The hook trusts this function's
    code object: the traceback module it imports parses source lines for the carets."""
    import traceback
    traceback.print_exception(exc)


def _show_figures(figures, emit, render):
    """Reports the open matplotlib figures (see _make_figures) and closes them."""
    if figures is None:
        return
    images, _ = figures(render)
    for data in images:
        emit('display', data)


def _run(code, tail, g, _exec=exec, _eval=eval, _repr=repr, _type=type, _len=len,
         _excepthook=sys.__excepthook__, _str=str, _KeyboardInterrupt=KeyboardInterrupt):
    """Runs the program and returns (status, repr of a trailing expression or None,
    whether the repr was cut); SystemExit propagates. The hook treats this frame as
    user code, so callables reached from here (a __repr__, an excepthook) gain
    nothing."""
    try:
        _exec(code, g)
        value = _eval(tail, g) if tail is not None else None
        r, cut = None, False
        if value is not None:
            r = _repr(value)
            if _type(r) is _str:
                data = r.encode('utf-8', 'backslashreplace')
                cut = _len(data) > _RESULT_CAP
                if cut:
                    r = data[:_RESULT_CAP].decode('utf-8', 'ignore')
            else:
                r = None
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        tb = tb.tb_next if tb is not None else None  # drop this frame
        hook = sys.excepthook
        if hook is _excepthook or hook is None:
            _show_error(e.with_traceback(tb))
        else:
            hook(_type(e), e.with_traceback(tb), tb)
        return (130 if _type(e) is _KeyboardInterrupt else 1), None, False
    return 0, r, cut


def _exit_status(e):
    """The exit status Python gives an uncaught SystemExit e, printing its message as
    Python does: 0 for None, the low 8 bits of an int (255 when it overflows a C
    long), else 1."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        v = int.__index__(code)
        return v & 0xff if -(1 << 63) <= v < (1 << 63) else 255
    try:
        err = sys.stderr
        err.write(str(code) + '\n')
        err.flush()
    except Exception:
        pass
    return 1


# ---------------------------------------------------------------- sessions

_HEADER_CAP = 200  # bytes of a request header, newline excluded
_REQUEST_CAP = 8 << 20  # bytes of a request's code (box.MaxCodeBytes is 1 MiB)


def _make_reader(fd, loads):
    """Returns read() -> (id, code bytes), or None at the end of the request channel
    fd; raises ValueError for a malformed request. Nothing is taken out of the buffer
    until a whole request is in it, so a read that an exception cuts short can be
    repeated without losing the protocol's place."""
    buf = bytearray()
    _read = os.read

    def header(h):
        try:
            obj = loads(bytes(h).decode('ascii'))
        except Exception:
            obj = None
        if type(obj) is not dict or set(obj) != {'id', 'bytes'}:
            raise ValueError('bad request header %r' % bytes(h[:80]))
        rid, size = obj['id'], obj['bytes']
        if type(rid) is not int or not 0 <= rid < (1 << 63):
            raise ValueError('bad request id %r' % (rid,))
        if type(size) is not int or not 0 <= size <= _REQUEST_CAP:
            raise ValueError('bad request size %r (at most %d bytes)' % (size, _REQUEST_CAP))
        return rid, size

    def read():
        while True:
            i = buf.find(b'\n', 0, _HEADER_CAP + 1)
            if i < 0:
                if len(buf) > _HEADER_CAP:
                    raise ValueError('request header longer than %d bytes' % _HEADER_CAP)
                want = 1 << 16
            else:
                rid, size = header(buf[:i])
                end = i + 1 + size
                if len(buf) >= end:
                    body = bytes(buf[i + 1:end])
                    del buf[:end]
                    return rid, body
                want = max(end - len(buf), 1 << 16)
            data = _read(fd, min(want, 1 << 24))
            if not data:
                if buf:
                    raise ValueError('the request channel closed inside a request')
                return None
            buf.extend(data)

    return read


def _preload(names):
    """Imports a profile's preload modules, before the hook: the profile allows them
    (the config checks it), and the code pays nothing for them."""
    for name in names:
        if not all(part.isidentifier() for part in name.split('.')):
            _fail('--preload: %r is not a module name' % name)
        try:
            __import__(name)
        except BaseException:  # a module that fails is the code's to see when it imports it
            pass


def _serve_zygote(runner_dir, session):
    """--zygote: hands this interpreter, preloaded and not yet hooked, to moat's
    zygote (zygote.py beside the runner, from the native backend), which forks it into
    fresh boxes. In a box's interpreter, confined, with the session's fds in place,
    calls session() and returns what it returns, at the end of the box's session.
    What the zygote imported for itself is dropped from sys.modules before it forks
    any box, so that the code's imports of them meet the policy as anywhere else; the
    zygote imports nothing after that.

    Nothing the zygote made is freed in a box (it calls session() rather than
    return, and holds the modules it drops): freeing would write to every page the
    objects are on (reference counts, the allocator's lists), and each such page is
    shared with the zygote until a box writes to it, then copied (over a hundred pages
    a box, measured).
    Held, they are as out of the code's reach as freed: a module's functions and its
    dict hold each other, and the collector never frees what serve() froze."""
    # What the runner itself imports once it serves a session (and would import in
    # each box): imported here once, as a cold session's runner has them before the
    # code runs.
    import _signal, _thread, _io, _posixsubprocess, binascii, builtins, linecache, traceback  # noqa: F401
    before = set(sys.modules)
    path = os.path.join(runner_dir, 'zygote.py')
    code = _compile_apart(path)
    g = {'__name__': '_moat_zygote', '__file__': path}
    exec(code, g)
    # Out of sys.modules here, once, rather than in each box, where walking sys.modules
    # and holding each module wrote to about 70 pages, each a copy (measured).
    held = [sys.modules.pop(name) for name in set(sys.modules) - before]  # noqa: F841
    return g['serve'](session, *_json_codec())


def _compile_apart(path):
    """The code object of the Python source at path, compiled in a child process and
    marshalled back: the compiler's garbage stays there. Compiled here, it left 0.4 MiB
    of the zygote's heap in pools the allocator cannot give back, which every box's
    fork and exit then paid for (page tables copied and unmapped)."""
    import marshal
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            with open(path, 'rb') as fh:
                data = marshal.dumps(compile(fh.read(), path, 'exec', dont_inherit=True))
            while data:
                data = data[os.write(w, data):]
            os._exit(0)
        except BaseException as e:
            os.write(2, ('moat: cannot load the zygote %s: %s\n' % (path, e)).encode('utf-8', 'backslashreplace'))
        os._exit(_EXIT_INTERNAL)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        _fail('cannot load the zygote %s' % path)
    return marshal.loads(b''.join(chunks))


def _prepare_session(p, runner_dir, policy_path, preload=()):
    """Makes what a session needs before its channels are open: imports the preload
    modules (before the hook: the profile allows them, the config checks it, and the
    code pays nothing for them), a fresh __main__, the figures, the rule functions, and
    the audit hook, built, not installed. Returns it all for _session.

    A zygote calls this once, before it forks any box, so that each box's interpreter
    finds it made: made in each box it cost over a hundred page copies, since every
    object it touches (such as each builtin the fresh builtins dict refers to) is on a
    page the box shares with the zygote until written. Nothing in it has served any call: a
    box gets its own copy, as untouched as one made in the box."""
    import traceback  # the runner's own (for _show_error), before the hook
    del traceback
    _preload(preload)
    mod = _main_module(p, None)
    path = [d for d in sys.path if d not in ('', runner_dir)]  # the working directory comes first
    figures = _make_figures()
    module_denied, attr_denied = _rule_funcs(p)
    allowed, current = {}, ['']
    emit, bind_emit = _late_emit()
    hook = guard = None
    if p.mode != 'off':
        hook, guard = _build_hook(p, module_denied, attr_denied, allowed, current, emit,
                                  runner_dir, policy_path, (_split, _parse), path)
    return mod, path, figures, module_denied, attr_denied, allowed, current, bind_emit, hook, guard


def _late_emit():
    """Returns (emit, bind): emit calls the emit that bind(emit) gives it later, once
    the report channel is open."""
    target = []

    def emit(*args, **kwargs):
        return target[0](*args, **kwargs)

    return emit, target.append


def _open_channels():
    """Moves a session's report and request channels off fds 3 and 4 (in that order:
    fd 3 is free again for the request channel's read end, fd 4 for nothing that can
    write to the report) and returns their new descriptors."""
    report = _open_report()
    if report is None:
        _fail('--session needs the report channel on fd 3')
    requests = _open_requests()
    if requests is None:
        _fail('--session needs the request channel on fd 4')
    return report, requests


def _session(p, loads, quote, prepared, channels=None):
    """Runs the requests of the request channel as calls in one __main__ until the
    channel ends (see "Session" in the module docstring), with what _prepare_session
    made and the channels _open_channels returned (opened here when None). Returns 0
    at its end; a malformed request ends the runner with status 70."""
    mod, path, figures, module_denied, attr_denied, allowed, current, bind_emit, hook, guard = prepared
    report, requests = channels or _open_channels()
    emit, read = _make_emit(report, quote), _make_reader(requests, loads)
    import _signal, linecache
    cache = linecache.cache
    g = mod.__dict__
    main_builtins = g['__builtins__']
    sys.modules['__main__'] = mod
    sys.argv = ['']
    sys.path[:] = [os.getcwd()] + path
    bind_emit(emit)
    if hook is not None:
        _arm(hook, guard)

    # SIGINT interrupts calls only: between them (reading a request, writing the
    # report) the handler does nothing, so the runner cannot die of it there.
    SIGINT, interrupt, set_handler = _signal.SIGINT, _signal.default_int_handler, _signal.signal

    def idle(signum, frame):
        pass

    set_handler(SIGINT, idle)
    if not emit('ready'):
        _fail('the report channel is closed')
    n = 0
    while True:
        try:
            req = read()
        except KeyboardInterrupt:  # not with idle installed; read() can be repeated
            continue
        except (OSError, ValueError) as e:
            _fail('bad request: %s' % e)
        if req is None:
            return 0
        rid, body = req
        n += 1
        try:
            src = body.decode('utf-8')
        except UnicodeDecodeError as e:
            os.write(2, ('moat: cannot read the code: %s\n' % e).encode('utf-8', 'backslashreplace'))
            status = _EXIT_INTERNAL
        else:
            filename = '<cell %d>' % n
            cache[filename] = (len(src), None, src.splitlines(True), filename)
            current[0] = filename
            status = _call(p, module_denied, attr_denied, src, filename, g, main_builtins, allowed,
                           emit, figures, (SIGINT, interrupt, idle, set_handler))
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        if not emit('done', rid, status):
            _fail('the report channel is closed')


def _call(p, module_denied, attr_denied, src, filename, g, main_builtins, allowed, emit, figures,
          signals):
    """Runs one call of a session and returns its exit status."""
    try:
        code, tail = _split(src, filename)
    except Exception as e:  # SyntaxError; ValueError (NUL bytes); RecursionError
        _show_error(e.with_traceback(None))
        return 1
    if p.mode != 'off':
        try:
            found = None
            if _interesting(p, module_denied, [code] if tail is None else [code, tail], src):
                found = _check(p, src, filename, module_denied, attr_denied, _parse(src, filename))
        except Exception as e:  # fail closed
            os.write(2, ('moat: the policy check failed: %s: %s\n' % (type(e).__name__, e))
                     .encode('utf-8', 'backslashreplace'))
            return _EXIT_INTERNAL
        if found:
            for rule, detail, line in found:
                emit('violation', rule, detail, line)
            return _EXIT_VIOLATION

    SIGINT, interrupt, idle, set_handler = signals
    allowed[id(code)] = code
    if tail is not None:
        allowed[id(tail)] = tail
    g['__builtins__'] = main_builtins
    result, cut, images, stop = None, False, (), None
    try:
        set_handler(SIGINT, interrupt)
        try:
            status, result, cut = _run(code, tail, g)
        except SystemExit as e:
            status = _exit_status(e)
        images, _ = figures(status != 130)
        set_handler(SIGINT, idle)
    except KeyboardInterrupt as e:  # between the code and idle: the runner's own steps
        set_handler(SIGINT, idle)
        status, result, images, stop = 130, None, (), e
    allowed.clear()
    if stop is not None:
        _show_error(stop.with_traceback(None))
    if result is not None:
        emit('result', result, truncated=cut)
    for data in images:
        emit('display', data)
    return status


if __name__ == '__main__':
    sys.exit(_main(sys.argv))

package config

// The lists behind the builtin profiles. They are data, read by the policy package;
// BuiltinProfiles hands out copies.

// strictModules are the modules the strict profile lets user code import: pure
// computation, text and data handling, and the numeric stack. Left out on purpose:
// os, sys, subprocess, socket, ctypes, importlib, pickle, marshal, shutil, pathlib,
// gc, inspect, types, traceback, warnings (reach for frames, code objects, the
// import system or the process).
var strictModules = []string{
	// numbers and maths
	"math", "cmath", "decimal", "fractions", "numbers", "random", "statistics",
	// time
	"datetime", "time", "calendar", "zoneinfo",
	// containers and functional tools
	"collections", "collections.abc", "itertools", "functools", "operator", "heapq",
	"bisect", "copy", "array", "graphlib",
	// types and classes
	"typing", "dataclasses", "enum", "abc", "contextlib",
	// text
	"string", "re", "textwrap", "unicodedata", "difflib", "pprint", "shlex", "fnmatch",
	"html", "colorsys",
	// data formats and encodings
	"json", "csv", "io", "struct", "base64", "binascii", "hashlib", "zlib", "uuid",
	"secrets", "urllib.parse",
	// files, confined to /tmp and /workspace by file_access: sandbox; os only through
	// strictOSAllow
	"os", "pathlib", "__future__",
	// the numeric stack
	"numpy", "pandas", "matplotlib",
}

// strictDenyModules carve the sharp submodules out of the packages strict allows:
// C-level access and compilers (numpy), the clipboard, which runs xclip (pandas).
var strictDenyModules = []string{
	"numpy.ctypeslib", "numpy.f2py", "numpy.distutils",
	"pandas.io.clipboard", "pandas.io.clipboards",
}

// defaultDenyModules are the modules the default profile keeps from user code:
// processes, raw sockets, foreign functions, the import system, code objects and
// debuggers. pickle stays importable (benign code uses it; the runtime hook guards
// pickle.find_class), and so do os and sys, with the attribute rules below.
var defaultDenyModules = []string{
	// processes
	"subprocess", "_posixsubprocess", "multiprocessing", "_multiprocessing", "pty",
	"posix", // the C module behind os: it would bypass the os rules
	"webbrowser", "ensurepip", "venv",
	// network
	"socket", "_socket",
	// foreign functions and raw memory
	"ctypes", "_ctypes", "cffi",
	// the import system and code objects
	// (not builtins: pickles of plain data name builtins.slice and friends, and the
	// runtime hook stops builtins.eval and exec from user code)
	"importlib", "imp", "_imp", "zipimport", "marshal",
	// debuggers and interactive interpreters
	"pdb", "bdb", "code", "codeop",
}

// osDeny are the os attributes that start processes, send signals or change
// credentials.
var osDeny = []string{
	"system", "popen", "exec*", "spawn*", "posix_spawn*", "fork", "forkpty", "vfork",
	"kill", "killpg", "pidfd_send_signal",
	"setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid",
	"setresgid", "setgroups", "initgroups", "chroot",
}

// sysDeny are the sys attributes that reach frames, tracing or the import machinery.
var sysDeny = []string{
	"_getframe", "_current_frames", "_current_exceptions", "settrace", "setprofile",
	"breakpointhook", "__breakpointhook__", "meta_path", "path_hooks",
	"path_importer_cache", "addaudithook",
}

// gcDeny are the gc functions that hand out every live object (the runner's own
// among them): an escape route that raises no audit event.
var gcDeny = []string{"get_objects", "get_referrers", "get_referents"}

// strictOSAllow is all of os that the strict profile lets code use: paths and files.
var strictOSAllow = []string{
	"path", "getcwd", "listdir", "scandir", "walk", "makedirs", "mkdir", "remove",
	"unlink", "rename", "replace", "stat", "fspath", "sep", "linesep", "getenv",
	"environ", "cpu_count", "PathLike",
}

// asyncioDeny are the asyncio attributes that start processes.
var asyncioDeny = []string{"create_subprocess_exec", "create_subprocess_shell", "subprocess"}

// gadgetAttributes are the attributes of the classic sandbox escapes: from any
// object to object.__subclasses__(), from a function to its globals and builtins,
// from a frame or generator to its caller's globals, from a code object to bytecode.
//
// __class__ is not on the list: benign code uses it (self.__class__.__name__), and
// the chain ().__class__.__base__.__subclasses__() is cut at __base__ and
// __subclasses__. __dict__ is on the strict list only (see strictAttributes).
var gadgetAttributes = []string{
	"__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__",
	"__mro__", "__bases__", "__base__", "__getattribute__", "__self__",
	"__reduce__", "__reduce_ex__", "__loader__", "__spec__", "__import__",
	"f_globals", "f_locals", "f_back", "f_builtins", "f_code",
	"gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
	"tb_frame", "co_code", "func_globals",
}

// strictAttributes adds __dict__, which on a module bypasses its attribute rules
// (os.__dict__["system"]). The default profile leaves __dict__ to the runtime hook,
// as benign code reads obj.__dict__ often.
var strictAttributes = append(append([]string(nil), gadgetAttributes...), "__dict__", "__func__", "__wrapped__", "__traceback__")

// defaultBuiltins are the builtins that run code from strings or reach the import
// system; benign agent code rarely calls them, and "exec of decoded strings" is the
// usual way around static checks.
var defaultBuiltins = []string{"eval", "exec", "compile", "__import__", "breakpoint"}

// strictBuiltins add the builtins that expose namespaces (globals, locals, vars) and
// help, whose pager starts a process. getattr stays: it is common, and the runtime
// hook checks computed attribute names.
var strictBuiltins = append(append([]string(nil), defaultBuiltins...), "globals", "locals", "vars", "help")

// strictCommands are the commands the strict profile lets shell scripts run: text
// tools and file handling inside the workspace. rm is left out (a strict session
// keeps its files); so are find (-exec), xargs, env and every interpreter, which
// run other commands. awk (system()) and sed (the e command) can too: the shell
// checker inspects their programs.
var strictCommands = []string{
	"ls", "cat", "head", "tail", "wc", "sort", "uniq", "grep", "sed", "awk", "cut", "tr",
	"echo", "printf", "date", "basename", "dirname", "diff", "comm", "tee", "mkdir",
	"touch", "cp", "mv", "seq", "expr", "true", "false", "test", "[", "pwd", "cd",
	"nl", "paste", "join", "fold", "rev", "od", "base64", "md5sum", "sha1sum",
	"sha256sum", "stat", "du", "sleep",
}

// defaultDenyCommands are the commands the default profile refuses: network clients
// and privilege changes. The box has no network and no privileges either; the rule
// gives a clear error instead of a hang or a confusing failure.
var defaultDenyCommands = []string{
	"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "rsync",
	"ftp", "telnet", "nmap", "sudo", "su", "doas", "pkexec", "nsenter", "unshare",
	"mount", "umount", "chroot",
}

// BuiltinProfiles returns the builtin profiles by name, as fresh copies:
//
//   - strict: Python allowlist (computation, text, data formats, numpy, pandas,
//     matplotlib), files only under /tmp and /workspace, eval and friends denied,
//     the escape gadgets denied; shell allowlist of text and file tools.
//   - default: Python denylist (processes, sockets, ctypes, the import system,
//     code objects, debuggers), os process and credential calls denied, eval and
//     friends denied, the escape gadgets denied; shell denylist of network clients
//     and privilege tools.
//   - open: no language rules at all; only the box.
func BuiltinProfiles() map[string]Profile {
	return map[string]Profile{
		ProfileStrict: {
			Python: PythonPolicy{
				Mode:         ModeAllowlist,
				AllowModules: clone(strictModules),
				DenyModules:  clone(strictDenyModules),
				Modules: map[string]ModuleRule{
					"numpy":  {Deny: []string{"ctypeslib", "f2py"}},
					"pandas": {Deny: []string{"read_clipboard", "read_pickle"}},
					"os":     {Allow: clone(strictOSAllow)},
					"gc":     {Deny: clone(gcDeny)},
					"sys":    {Deny: clone(sysDeny)},
				},
				DenyBuiltins:   clone(strictBuiltins),
				DenyAttributes: clone(strictAttributes),
				FileAccess:     FileAccessSandbox,
			},
			Shell: ShellPolicy{Allow: clone(strictCommands), Deny: []string{}},
		},
		ProfileDefault: {
			Python: PythonPolicy{
				Mode:         ModeDenylist,
				AllowModules: []string{},
				DenyModules:  clone(defaultDenyModules),
				Modules: map[string]ModuleRule{
					"os":      {Deny: clone(osDeny)},
					"sys":     {Deny: clone(sysDeny)},
					"asyncio": {Deny: clone(asyncioDeny)},
					"gc":      {Deny: clone(gcDeny)},
				},
				DenyBuiltins:   clone(defaultBuiltins),
				DenyAttributes: clone(gadgetAttributes),
				FileAccess:     FileAccessAny,
			},
			Shell: ShellPolicy{Allow: []string{}, Deny: clone(defaultDenyCommands)},
		},
		ProfileOpen: {
			Python: PythonPolicy{
				Mode:           ModeOff,
				AllowModules:   []string{},
				DenyModules:    []string{},
				Modules:        map[string]ModuleRule{},
				DenyBuiltins:   []string{},
				DenyAttributes: []string{},
				FileAccess:     FileAccessAny,
			},
			Shell: ShellPolicy{Allow: []string{}, Deny: []string{}},
		},
	}
}

// isBuiltin reports whether name is a builtin profile.
func isBuiltin(name string) bool {
	return name == ProfileStrict || name == ProfileDefault || name == ProfileOpen
}

// clone copies a list, keeping nil and empty apart (an empty list is "set").
func clone(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

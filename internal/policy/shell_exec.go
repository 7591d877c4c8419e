package policy

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// execCtx is how a command line is reached.
type execCtx struct {
	redirs []*syntax.Redirect // of the statement, for what a shell would read on stdin
	via    string             // the wrapper that runs it ("env"); "" when the shell runs it
	hops   int
}

func (x execCtx) next(via string) execCtx {
	return execCtx{redirs: x.redirs, via: via, hops: x.hops + 1}
}

// safeBuiltins run no other command and are allowed in every profile unless the
// profile denies them by name. Builtins that run strings or files (eval, source,
// trap, ...) are handled in builtin.
var safeBuiltins = map[string]bool{
	":": true, "true": true, "false": true, "cd": true, "pwd": true, "echo": true,
	"printf": true, "test": true, "[": true, "read": true, "export": true, "local": true,
	"declare": true, "typeset": true, "readonly": true, "set": true, "unset": true,
	"shift": true, "return": true, "exit": true, "break": true, "continue": true,
	"let": true, "type": true, "hash": true, "getopts": true, "wait": true, "umask": true,
	"shopt": true, "pushd": true, "popd": true, "dirs": true, "times": true, "jobs": true,
	"caller": true, "help": true, "ulimit": true, "mapfile": true, "readarray": true,
}

// kinds of commands that get more than a name check.
const (
	kindWrapper = iota + 1 // runs the command that follows its options (env, timeout, xargs)
	kindShell              // sh, bash: -c strings are parsed and checked
	kindOpaque             // runs commands in a way that can't be checked; refused
	kindAwk                // program checked for system() and pipes
	kindSed                // script checked for the e command and s///e
	kindFind               // -exec and friends checked
	kindBusybox            // busybox APPLET is checked as APPLET
	kindRunOpts            // has options that run a program (sort --compress-program)
)

var commandKinds = map[string]int{
	"env": kindWrapper, "nohup": kindWrapper, "timeout": kindWrapper, "nice": kindWrapper,
	"ionice": kindWrapper, "stdbuf": kindWrapper, "setsid": kindWrapper, "time": kindWrapper,
	"flock": kindWrapper, "xargs": kindWrapper,

	"sh": kindShell, "dash": kindShell, "ash": kindShell, "posh": kindShell,
	"bash": kindShell, "rbash": kindShell,

	// Other shells parse differently from bash (zsh runs code in glob qualifiers).
	"zsh": kindOpaque, "ksh": kindOpaque, "ksh93": kindOpaque, "mksh": kindOpaque,
	"lksh": kindOpaque, "pdksh": kindOpaque, "yash": kindOpaque, "fish": kindOpaque,
	"csh": kindOpaque, "tcsh": kindOpaque, "nu": kindOpaque, "elvish": kindOpaque,
	"xonsh": kindOpaque, "pwsh": kindOpaque, "powershell": kindOpaque,
	// Privilege, namespace and tracing wrappers, schedulers and terminals.
	"sudo": kindOpaque, "su": kindOpaque, "doas": kindOpaque, "runuser": kindOpaque,
	"pkexec": kindOpaque, "chroot": kindOpaque, "unshare": kindOpaque, "nsenter": kindOpaque,
	"setpriv": kindOpaque, "capsh": kindOpaque, "firejail": kindOpaque, "bwrap": kindOpaque,
	"proot": kindOpaque, "fakeroot": kindOpaque, "fakechroot": kindOpaque,
	"strace": kindOpaque, "ltrace": kindOpaque, "gdb": kindOpaque, "lldb": kindOpaque,
	"valgrind": kindOpaque, "perf": kindOpaque, "catchsegv": kindOpaque,
	"taskset": kindOpaque, "chrt": kindOpaque, "prlimit": kindOpaque, "numactl": kindOpaque,
	"cpulimit": kindOpaque, "watch": kindOpaque, "parallel": kindOpaque, "sem": kindOpaque,
	"script": kindOpaque, "unbuffer": kindOpaque, "expect": kindOpaque, "rlwrap": kindOpaque,
	"screen": kindOpaque, "tmux": kindOpaque, "ssh": kindOpaque, "at": kindOpaque,
	"batch": kindOpaque, "crontab": kindOpaque, "systemd-run": kindOpaque,
	"start-stop-daemon": kindOpaque, "xvfb-run": kindOpaque, "dbus-launch": kindOpaque,
	"dbus-run-session": kindOpaque, "torsocks": kindOpaque, "proxychains": kindOpaque,
	"proxychains4": kindOpaque, "vi": kindOpaque, "vim": kindOpaque, "nvim": kindOpaque,
	"ex": kindOpaque, "view": kindOpaque,

	"awk": kindAwk, "gawk": kindAwk, "mawk": kindAwk, "nawk": kindAwk, "original-awk": kindAwk,
	"sed": kindSed, "gsed": kindSed,
	"find": kindFind, "gfind": kindFind,
	"busybox": kindBusybox,
	"sort":    kindRunOpts, "split": kindRunOpts, "tar": kindRunOpts, "gtar": kindRunOpts, "rg": kindRunOpts,
}

// run checks one command line: argv[0] is the command word.
func (w *walker) run(argv []arg, x execCtx) {
	if len(argv) == 0 {
		return
	}
	a0 := argv[0]
	if !a0.static {
		if x.via == "" {
			w.c.emit(RuleShellDynamic, a0.line, "command name %s is computed at run time, so profile %q can't check it; write the command name literally", quote(a0.text), w.c.profile)
		} else {
			w.undetermined(x.via, a0)
		}
		return
	}
	if x.hops > maxHops {
		w.c.emit(RuleShellWrapper, a0.line, "more than %d wrappers around one command can't be checked by profile %q; run the command directly", maxHops, w.c.profile)
		return
	}
	base, isPath := commandBase(a0.val)
	if w.c.deny[base] {
		w.c.emit(RuleShellCommand, a0.line, "command %q%s is blocked by profile %q", base, how(a0, base, x.via), w.c.profile)
		return
	}
	if !isPath && w.builtin(base, argv, x) {
		return
	}
	switch commandKinds[base] {
	case kindWrapper:
		w.wrapper(base, argv, x)
	case kindShell:
		w.shell(base, argv, x)
	case kindOpaque:
		w.c.emit(RuleShellWrapper, a0.line, "%q runs other commands in a way profile %q can't check; run the commands directly instead", base, w.c.profile)
	case kindAwk:
		if w.allowed(base, a0, x) {
			w.awk(base, argv)
		}
	case kindSed:
		if w.allowed(base, a0, x) {
			w.sed(base, argv)
		}
	case kindFind:
		w.allowed(base, a0, x)
		w.find(base, argv, x) // the commands of -exec are reported too
	case kindBusybox:
		if len(argv) > 1 && !(argv[1].static && strings.HasPrefix(argv[1].val, "-")) {
			w.run(argv[1:], x.next("busybox"))
		}
	case kindRunOpts:
		if w.allowed(base, a0, x) {
			w.runOpts(base, argv)
		}
	default:
		if spec := interpreterOf(base); spec != nil && w.c.allow != nil {
			if code, ok := spec.inlineCode(argv, x); ok {
				w.inlineCode(base, code, a0)
				return
			}
		}
		w.allowed(base, a0, x)
	}
}

// allowed reports whether the allowlist (if any) has base, and reports it if not.
func (w *walker) allowed(base string, a0 arg, x execCtx) bool {
	if w.c.allow == nil || w.c.allow[base] {
		return true
	}
	w.c.emit(RuleShellCommand, a0.line, "command %q%s is not allowed by profile %q (allowed: %s)", base, how(a0, base, x.via), w.c.profile, w.c.allowed)
	return false
}

// how says how a command was named or reached, for messages: ` (as "/usr/bin/curl",
// run by "env")`.
func how(a0 arg, base, via string) string {
	var parts []string
	if a0.val != base {
		parts = append(parts, fmt.Sprintf("as %q", shorten(a0.val)))
	}
	if via != "" {
		parts = append(parts, fmt.Sprintf("run by %q", via))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func (w *walker) undetermined(via string, a arg) {
	w.c.emit(RuleShellWrapper, a.line, "can't tell which command %q runs because %s is computed at run time, so profile %q refuses it; write the command and its options literally", via, quote(a.text), w.c.profile)
}

// builtin handles the shell builtins; it returns false when name is not one that
// is always allowed or specially handled.
func (w *walker) builtin(name string, argv []arg, x execCtx) bool {
	a0 := argv[0]
	p := w.c.profile
	switch name {
	case "eval":
		w.c.emit(RuleShellWrapper, a0.line, "%q runs a string as shell code, which profile %q can't check; run the commands directly instead", name, p)
	case "source", ".":
		w.c.emit(RuleShellWrapper, a0.line, "%q runs the commands in a file, which profile %q can't check; run those commands directly instead", name, p)
	case "alias":
		if len(argv) > 1 {
			w.c.emit(RuleShellWrapper, a0.line, "%q defines command names profile %q can't check; call the command directly instead", name, p)
		}
	case "enable":
		if len(argv) > 1 {
			w.c.emit(RuleShellWrapper, a0.line, "%q loads or turns off shell builtins, which profile %q refuses; remove it", name, p)
		}
	case "fc":
		w.c.emit(RuleShellWrapper, a0.line, "%q re-runs commands from history, which profile %q can't check; run the commands directly instead", name, p)
	case "compgen", "complete":
		if !hasShortOpt(argv[1:], "CF") {
			return false
		}
		w.c.emit(RuleShellWrapper, a0.line, "%q with -C or -F runs commands profile %q can't check; remove it", name, p)
	case "trap":
		w.trap(argv)
	case "exec":
		i, _ := builtinOpts(argv, "a", nil)
		if i < len(argv) {
			w.run(argv[i:], x.next("exec"))
		}
	case "command":
		query := false
		i, _ := builtinOpts(argv, "", func(c byte, _ arg) { query = query || c == 'v' || c == 'V' })
		if !query && i < len(argv) {
			w.run(argv[i:], x.next("command"))
		}
	case "builtin":
		if len(argv) > 1 {
			w.run(argv[1:], x.next("builtin"))
		}
	case "hash":
		if hasShortOpt(argv[1:], "p") {
			w.c.emit(RuleShellWrapper, a0.line, "\"hash -p\" maps a command name to another file, which profile %q refuses; call the file by its path instead", p)
		}
	case "mapfile", "readarray":
		bad := false
		i, _ := builtinOpts(argv, "dnOsuCc", func(c byte, _ arg) { bad = bad || c == 'C' })
		if bad {
			w.c.emit(RuleShellWrapper, a0.line, "%q with -C runs a callback string profile %q can't check; process the lines in a loop instead", name, p)
		}
		if i < len(argv) {
			w.varName(argv[i], name)
		}
	case "read":
		i, _ := builtinOpts(argv, "adinNptu", func(c byte, v arg) {
			if c == 'a' {
				w.varName(v, name)
			}
		})
		for _, a := range argv[i:] {
			w.varName(a, name)
		}
	case "printf":
		if len(argv) > 1 && argv[1].static && strings.HasPrefix(argv[1].val, "-v") {
			if v := argv[1].val[2:]; v != "" {
				w.varName(literal(v, argv[1]), name)
			} else if len(argv) > 2 {
				w.varName(argv[2], name)
			}
		}
	case "getopts":
		if len(argv) > 2 {
			w.varName(argv[2], name)
		}
	case "unset":
		w.fs.unsafe = true
	case "set", "shopt":
		for _, a := range argv[1:] {
			if !a.static || a.val == "posix" {
				w.fs.unsafe = true
			}
		}
	default:
		return safeBuiltins[name]
	}
	return true
}

// builtinOpts walks the options of a bash builtin (a cluster like -rp, options in
// args taking a value) and returns the index of the first operand. A computed word
// ends the options.
func builtinOpts(argv []arg, args string, on func(c byte, val arg)) (int, bool) {
	i := 1
	for i < len(argv) {
		a := argv[i]
		if !a.static {
			return i, false
		}
		if a.val == "--" {
			return i + 1, true
		}
		if len(a.val) < 2 || a.val[0] != '-' {
			return i, true
		}
		for j := 1; j < len(a.val); j++ {
			c := a.val[j]
			if strings.IndexByte(args, c) < 0 {
				if on != nil {
					on(c, arg{})
				}
				continue
			}
			var v arg
			if rest := a.val[j+1:]; rest != "" {
				v = literal(rest, a)
			} else if i+1 < len(argv) {
				i++
				v = argv[i]
			}
			if on != nil {
				on(c, v)
			}
			break
		}
		i++
	}
	return i, true
}

// hasShortOpt reports whether a word in args is a short option cluster with one of
// letters, or is computed (and so might be).
func hasShortOpt(args []arg, letters string) bool {
	for _, a := range args {
		if !a.static {
			return true
		}
		if len(a.val) > 1 && a.val[0] == '-' && a.val[1] != '-' && strings.ContainsAny(a.val[1:], letters) {
			return true
		}
	}
	return false
}

// trap ACTION SIGNAL...: the action runs later in this shell, so it is checked as a
// script that shares this shell's functions.
func (w *walker) trap(argv []arg) {
	i := 1
	for ; i < len(argv); i++ {
		a := argv[i]
		if !a.static || a.val == "-" || !strings.HasPrefix(a.val, "-") {
			break
		}
		if a.val == "--" {
			i++
			break
		}
		if strings.ContainsAny(a.val, "lpP") {
			return // lists traps or signals
		}
	}
	if len(argv)-i < 2 {
		return // prints, or resets one signal
	}
	act := argv[i]
	if !act.static {
		w.c.emit(RuleShellWrapper, act.line, "the trap action %s is computed at run time, so profile %q can't check it; write the action literally", quote(act.text), w.c.profile)
		return
	}
	if act.val == "" || act.val == "-" || isDigits(act.val) {
		return
	}
	w.nested(act.val, act.line, syntax.LangBash, "trap", true)
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// optSpec describes the options of a wrapper command, so the check can find the
// command it runs. All of these stop at the first operand (getopt with "+").
type optSpec struct {
	flags, args, optional, refuse   string   // short options: no value, a value, an attached value only, refused
	longFlags, longArgs, longRefuse []string // long options; longFlags take a value only as --opt=value
	lead                            int      // operands before the command (timeout DURATION, flock FILE)
	numeric                         bool     // nice -5
	dash                            bool     // "-" alone is an option (env)
}

var helpVersion = []string{"help", "version"}

var wrapperSpecs = map[string]*optSpec{
	"env": {flags: "i0v", args: "uC", refuse: "S", dash: true,
		longFlags:  []string{"ignore-environment", "null", "debug", "list-signal-handling", "block-signal", "default-signal", "ignore-signal", "help", "version"},
		longArgs:   []string{"unset", "chdir"},
		longRefuse: []string{"split-string"}},
	"nohup":   {longFlags: helpVersion},
	"timeout": {flags: "v", args: "ks", lead: 1, longFlags: []string{"foreground", "preserve-status", "verbose", "help", "version"}, longArgs: []string{"kill-after", "signal"}},
	"nice":    {args: "n", numeric: true, longFlags: helpVersion, longArgs: []string{"adjustment"}},
	"ionice":  {flags: "thV", args: "cnpPu", longFlags: []string{"ignore", "help", "version"}, longArgs: []string{"class", "classdata", "pid", "pgid", "uid"}},
	"stdbuf":  {args: "ioe", longFlags: helpVersion, longArgs: []string{"input", "output", "error"}},
	"setsid":  {flags: "cfwhV", longFlags: []string{"ctty", "fork", "wait", "help", "version"}},
	"time":    {flags: "apqvVh", args: "fo", longFlags: []string{"append", "portability", "quiet", "verbose", "help", "version"}, longArgs: []string{"format", "output"}},
	"flock": {flags: "sexnouFhV", args: "wE", lead: 1,
		longFlags: []string{"shared", "exclusive", "nonblock", "nb", "close", "unlock", "no-fork", "verbose", "help", "version"},
		longArgs:  []string{"timeout", "wait", "conflict-exit-code"}},
	"xargs": {flags: "0oprtx", args: "adEILnPs", optional: "eil",
		longFlags: []string{"null", "open-tty", "interactive", "no-run-if-empty", "verbose", "exit", "show-limits", "eof", "replace", "max-lines", "help", "version"},
		longArgs:  []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"}},
}

// scan results
const (
	scanOK       = iota
	scanComputed // a computed word where an option or the command is expected
	scanUnknown  // an option the spec doesn't know
	scanRefused  // an option that runs a string or a shell
)

// scanOpts walks the options of a wrapper from argv[1] and returns the index of the
// first operand. on sees each option with its value. On a problem it returns the
// index of the word at fault and what the problem is.
func scanOpts(argv []arg, s *optSpec, on func(opt string, val arg)) (int, int) {
	i := 1
	for i < len(argv) {
		a := argv[i]
		if !a.static {
			if a.prefix != "" && a.prefix[0] != '-' {
				return i, scanOK // certainly an operand
			}
			return i, scanComputed
		}
		v := a.val
		switch {
		case v == "--":
			return i + 1, scanOK
		case v == "-" && s.dash:
			on("-", arg{})
			i++
			continue
		case len(v) < 2 || v[0] != '-':
			return i, scanOK
		case s.numeric && isNiceNumber(v):
			i++
			continue
		case strings.HasPrefix(v, "--"):
			name, val, hasVal := strings.Cut(v[2:], "=")
			full, kind := matchLongKind(name, s)
			switch kind {
			case scanUnknown, scanRefused:
				return i, kind
			}
			va := literal(val, a)
			if !hasVal && kind == kindLongArg {
				if i+1 >= len(argv) {
					return len(argv), scanOK
				}
				i++
				va = argv[i]
			}
			on(full, va)
			i++
			continue
		}
	cluster:
		for j := 1; j < len(v); j++ {
			c := v[j]
			switch {
			case strings.IndexByte(s.refuse, c) >= 0:
				return i, scanRefused
			case strings.IndexByte(s.args, c) >= 0:
				va := literal(v[j+1:], a)
				if j+1 == len(v) {
					if i+1 >= len(argv) {
						return len(argv), scanOK
					}
					i++
					va = argv[i]
				}
				on(string(c), va)
				break cluster
			case strings.IndexByte(s.optional, c) >= 0:
				on(string(c), literal(v[j+1:], a))
				break cluster
			case strings.IndexByte(s.flags, c) >= 0:
				on(string(c), arg{})
			default:
				return i, scanUnknown
			}
		}
		i++
	}
	return i, scanOK
}

const kindLongArg = 100

// matchLongKind resolves a long option as getopt_long does: an exact name, or an
// unambiguous prefix of one.
func matchLongKind(name string, s *optSpec) (string, int) {
	lists := []struct {
		names []string
		kind  int
	}{{s.longFlags, scanOK}, {s.longArgs, kindLongArg}, {s.longRefuse, scanRefused}}
	found, kind, n := "", scanUnknown, 0
	for _, l := range lists {
		for _, o := range l.names {
			if o == name {
				return o, l.kind
			}
			if name != "" && strings.HasPrefix(o, name) {
				found, kind = o, l.kind
				n++
			}
		}
	}
	if n != 1 {
		return name, scanUnknown
	}
	return found, kind
}

// matchLong resolves name against opts like getopt_long; "" if none or ambiguous.
func matchLong(name string, opts []string) string {
	found, n := "", 0
	for _, o := range opts {
		if o == name {
			return o
		}
		if name != "" && strings.HasPrefix(o, name) {
			found = o
			n++
		}
	}
	if n != 1 {
		return ""
	}
	return found
}

// isNiceNumber matches nice's old-style adjustment: -5, --5, -+5.
func isNiceNumber(v string) bool {
	v = v[1:]
	if v != "" && (v[0] == '-' || v[0] == '+') {
		v = v[1:]
	}
	return isDigits(v)
}

// wrapper finds the command a wrapper runs and checks it like any command. The
// wrapper itself need not be on the allowlist: it only changes how the command
// runs (environment, time limit, priority, arguments from stdin).
func (w *walker) wrapper(name string, argv []arg, x execCtx) {
	spec := wrapperSpecs[name]
	replace, replaceBad, noCmd := "", false, false
	i, st := scanOpts(argv, spec, func(opt string, v arg) {
		switch name {
		case "xargs":
			switch opt {
			case "I", "i", "replace":
				switch {
				case !v.static:
					replaceBad = true
				case v.val != "":
					replace = v.val
				case opt != "I":
					replace = "{}"
				}
			}
		case "ionice":
			switch opt {
			case "p", "P", "u", "pid", "pgid", "uid":
				noCmd = true // the operands are process ids
			}
		}
	})
	a0 := argv[0]
	switch st {
	case scanComputed:
		w.undetermined(name, argv[i])
		return
	case scanUnknown:
		w.c.emit(RuleShellWrapper, argv[i].line, "can't tell which command %q runs with the option %s, so profile %q refuses it; drop the option or run the command directly", name, quote(argv[i].text), w.c.profile)
		return
	case scanRefused:
		w.c.emit(RuleShellWrapper, argv[i].line, "%q with %s runs a string of commands profile %q can't check; run the commands directly instead", name, quote(argv[i].text), w.c.profile)
		return
	}
	if noCmd {
		return
	}
	if name == "env" {
		for ; i < len(argv); i++ {
			a := argv[i]
			n, _, ok := strings.Cut(a.prefix, "=")
			if !ok || !isName(n) {
				break
			}
			w.assigned(n, a.line)
		}
	}
	i += spec.lead
	if i >= len(argv) {
		return // no command: env prints the environment, xargs runs echo
	}
	if name == "flock" && argv[i].static && (argv[i].val == "-c" || argv[i].val == "--command") {
		if i+1 < len(argv) {
			w.shellString("flock -c", argv[i+1], syntax.LangBash)
		}
		return
	}
	inner := argv[i:]
	if name == "xargs" {
		if replaceBad {
			w.undetermined(name, a0)
			return
		}
		x.redirs = nil // xargs reads stdin itself
		if replace != "" {
			// Input lines replace these words: they are not known in advance.
			inner = append([]arg(nil), inner...)
			for k := range inner {
				if inner[k].static && strings.Contains(inner[k].val, replace) {
					inner[k].static = false
					inner[k].prefix = inner[k].val[:strings.Index(inner[k].val, replace)]
				}
			}
		}
	}
	w.run(inner, x.next(name))
}

// posixShells are parsed as POSIX sh; bash and rbash as bash.
var posixShells = map[string]bool{"sh": true, "dash": true, "ash": true, "posh": true}

// shell checks sh and bash: a -c string is parsed and checked, a here-document on
// stdin too; a script file or unknown stdin can't be checked.
func (w *walker) shell(name string, argv []arg, x execCtx) {
	lang := syntax.LangBash
	if posixShells[name] {
		lang = syntax.LangPOSIX
	}
	p := w.c.profile
	cflag, info, startup := false, false, false
	i := 1
loop:
	for i < len(argv) {
		a := argv[i]
		if !a.static {
			if cflag || a.prefix != "" && a.prefix[0] != '-' && a.prefix[0] != '+' {
				break // the script string, or a script file
			}
			w.undetermined(name, a)
			return
		}
		v := a.val
		switch {
		case v == "--" || v == "-":
			i++
			break loop
		case strings.HasPrefix(v, "--"):
			switch v[2:] {
			case "rcfile", "init-file":
				startup = true
				i++
			case "login":
				startup = true
			case "help", "version":
				info = true
			}
		case len(v) > 1 && (v[0] == '-' || v[0] == '+'):
			for k := 1; k < len(v); k++ {
				switch v[k] {
				case 'c':
					cflag = true
				case 'i', 'l':
					startup = true
				case 'o', 'O':
					i++ // option name
				}
			}
		default:
			break loop
		}
		i++
	}
	switch {
	case startup:
		w.c.emit(RuleShellWrapper, argv[0].line, "%q started as a login or interactive shell reads startup files profile %q can't check; drop -i, -l, --login and --rcfile", name, p)
	case info:
	case cflag:
		if i < len(argv) {
			w.shellString(name+" -c", argv[i], lang)
		}
	case i < len(argv):
		w.c.emit(RuleShellWrapper, argv[i].line, "%q would run the script file %s, which profile %q can't check; run its commands directly or pass them with %s -c", name, quote(argv[i].text), p, name)
	default:
		text, line, static, found := w.stdinScript(x.redirs)
		switch {
		case found && static:
			w.nested(text, line, lang, name+" on standard input", false)
		case found:
			w.c.emit(RuleShellWrapper, line, "the here-document given to %q is computed at run time, so profile %q can't check it; quote its delimiter (<<'EOF') or run the commands directly", name, p)
		default:
			w.c.emit(RuleShellWrapper, argv[0].line, "%q reading commands from standard input can't be checked by profile %q; pass the commands with %s -c '...' instead", name, p, name)
		}
	}
}

// shellString checks a string a shell will run (bash -c STR, flock -c STR).
func (w *walker) shellString(label string, a arg, lang syntax.LangVariant) {
	if !a.static {
		w.c.emit(RuleShellWrapper, a.line, "the script given to %s is computed at run time (%s), so profile %q can't check it; write the commands literally", label, quote(a.text), w.c.profile)
		return
	}
	w.nested(a.val, a.line, lang, label, false)
}

// interpSpec describes how an interpreter takes inline code.
type interpSpec struct {
	lang     string   // for the message: "python"
	inline   string   // short options whose value is code (-c, -e)
	args     string   // short options taking a value (attached or the next word)
	attached string   // short options whose value is the rest of the cluster
	stop     string   // short options after which the program is named (python -m)
	long     []string // long options whose value is code (--eval)
	longArgs []string // long options taking a value
	sub      []string // subcommands that run inline code (deno eval)
}

var interpreters = map[string]*interpSpec{
	"python":  {lang: "python", inline: "c", args: "WX", stop: "m"},
	"pypy":    {lang: "python", inline: "c", args: "WX", stop: "m"},
	"perl":    {inline: "eE", attached: "MmIl0ixCdDV"},
	"ruby":    {inline: "e", args: "ICEFr", attached: "KTWx0"},
	"irb":     {},
	"node":    {inline: "ep", args: "r", long: []string{"eval", "print"}, longArgs: []string{"require", "import", "loader", "experimental-loader"}},
	"nodejs":  {inline: "ep", args: "r", long: []string{"eval", "print"}, longArgs: []string{"require", "import", "loader", "experimental-loader"}},
	"bun":     {inline: "e", long: []string{"eval", "print"}},
	"deno":    {sub: []string{"eval", "repl"}},
	"php":     {inline: "rBRE", args: "cdz", stop: "fF"},
	"lua":     {inline: "e", args: "l"},
	"luajit":  {inline: "e", args: "l"},
	"Rscript": {inline: "e"},
	"R":       {inline: "e"},
	"julia":   {inline: "eE", long: []string{"eval", "print"}},
	"tclsh":   {},
	"wish":    {},
	"guile":   {inline: "c"},
}

// interpreterOf finds the spec of an interpreter name such as python3.12 or php8.2.
func interpreterOf(base string) *interpSpec {
	if s := interpreters[base]; s != nil {
		return s
	}
	return interpreters[strings.TrimRight(base, "0123456789.")]
}

// inline reports whether an interpreter command line runs code given on the command
// line or on standard input, and the option that does.
func (s *interpSpec) inlineCode(argv []arg, x execCtx) (string, bool) {
	info := false
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if !a.static {
			return "", false // taken as the script's path
		}
		v := a.val
		switch {
		case v == "-":
			return "-", true
		case v == "--":
			return "", i+1 >= len(argv) && !info && readsStdin(x)
		case v == "--version" || v == "--help" || v == "-V" || v == "-v" || v == "-h":
			info = true
		case strings.HasPrefix(v, "--"):
			name, _, hasVal := strings.Cut(v[2:], "=")
			for _, l := range s.long {
				if l == name {
					return v, true
				}
			}
			for _, l := range s.longArgs {
				if l == name && !hasVal {
					i++
				}
			}
		case len(v) > 1 && v[0] == '-':
			for j := 1; j < len(v); j++ {
				c := v[j]
				if strings.IndexByte(s.inline, c) >= 0 {
					return v, true
				}
				if strings.IndexByte(s.stop, c) >= 0 {
					return "", false
				}
				if strings.IndexByte(s.attached, c) >= 0 {
					break
				}
				if strings.IndexByte(s.args, c) >= 0 {
					if j+1 == len(v) {
						i++
					}
					break
				}
			}
		default:
			for _, sub := range s.sub {
				if v == sub {
					return v, true
				}
			}
			return "", false // the script
		}
	}
	if info {
		return "", false
	}
	return "standard input", readsStdin(x)
}

// readsStdin: with no script named, an interpreter reads its program from standard
// input, which may be a here-document or a pipe (echo CODE | python3). Only
// input redirected from a file counts as running a script file.
func readsStdin(x execCtx) bool {
	return !stdinFromFile(x.redirs)
}

func (w *walker) inlineCode(base, how string, a0 arg) {
	what := fmt.Sprintf("%q with %s runs inline code", base, quote(how))
	if how == "standard input" {
		what = fmt.Sprintf("%q reading code from standard input runs code", base)
	}
	todo := "do this step with allowed commands instead"
	if s := interpreterOf(base); s != nil && s.lang == "python" {
		todo = "send Python code as language python instead"
	}
	w.c.emit(RuleShellWrapper, a0.line, "%s that profile %q can't check; %s", what, w.c.profile, todo)
}

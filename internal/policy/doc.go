// Package policy is the policy stage of the pipeline (gate -> policy -> box -> filter
// -> audit): language-level rules from the profile that refuse code before it runs,
// with messages an LLM can act on ("command "curl" is blocked by profile
// "default""). Each refusal is a box.Violation{Rule, Detail, Line}; the engine turns
// any violation into StatusBlocked.
//
// The box is the security boundary. Policy is defence in depth and a source of clear,
// early errors; no test that proves the host safe may depend on it. Python has its own
// sub-package (policy/python), which runs inside the box; shell scripts are checked
// here, in the engine, before a box starts.
//
// # Shell
//
// CheckShell parses a bash script with mvdan.cc/sh/v3/syntax and checks every command
// in it: pipelines, lists, subshells, blocks, command and process substitutions
// (also inside arithmetic, [[ ]], parameter expansions such as ${x:-$(cmd)},
// here-documents, here-strings, redirection targets and assignment values),
// if/while/until/for/case, coproc and time, and function bodies.
//
//	vs := policy.CheckShell(script, policy.ShellRules{Profile: "strict", Allow: []string{"ls", "cat"}})
//	// [{Rule: "shell.command", Detail: `command "curl" is not allowed by profile
//	//   "strict" (allowed: cat, ls)`, Line: 3}]
//
// A command is judged by its base name: /usr/bin/curl and ./curl are curl. With an
// allowlist (Allow non-empty) only listed commands and the harmless builtins run; in
// denylist mode everything but Deny runs. Deny wins over Allow. Rules:
//
//   - shell.command: a denied command, or one not on the allowlist.
//   - shell.dynamic: a command name computed at run time ($cmd, "$(echo curl)", a glob
//     such as /usr/bin/cur?, $'\x63url'), or a computed variable name given to read,
//     printf -v, declare. Refused in both modes: a denylist that "c=curl; $c" gets
//     around is worth nothing.
//   - shell.wrapper: code the check can't see (below).
//   - shell.parse: the script, or a script nested in it, does not parse.
//
// A profile with neither Allow nor Deny has no shell rules: CheckShell returns nil.
//
// Builtins always allowed (unless denied by name): : true false cd pwd echo printf
// test [ read export local declare typeset readonly set unset shift return exit
// break continue let type hash getopts wait umask shopt pushd popd dirs times jobs
// caller help ulimit mapfile readarray. Refused as shell.wrapper in every profile:
// eval, source and ., alias with arguments, enable, fc, trap with a computed action,
// hash -p, mapfile -C, compgen -C/-F. command -v/-V and type don't run anything;
// command X, builtin X, exec X check X.
//
// Wrappers are seen through: env, nohup, timeout, nice, ionice, stdbuf, setsid, time
// (the binary), flock, xargs, exec, command, builtin, busybox APPLET, and find's
// -exec, -execdir, -ok and -okdir. Their options are parsed from tables (GNU option
// abbreviations included); an unknown option or a computed word where an option or
// the command may be makes the command unknown, which is refused (shell.wrapper). The
// wrapper itself need not be on the allowlist, except find, which is a tool of its
// own. Words that xargs -I or find replace ({}) count as computed. sh/dash/ash/posh
// (parsed as POSIX sh) and bash -c 'STRING' are parsed and checked recursively, up to
// 8 levels; so are trap actions and a literal here-document or here-string fed to a
// shell. A computed -c string, a script file, standard input from anything else, and
// -i/-l/--rcfile (startup files) are refused.
//
// Refused in every profile as shell.wrapper: shells that are not bash or sh (zsh,
// ksh, fish, csh, pwsh, ...), privilege, namespace and tracing wrappers (sudo, su,
// doas, chroot, unshare, nsenter, strace, gdb, ...), parallel, watch, script, screen,
// tmux, ssh, at, vi and vim. In allowlist mode, an interpreter (python, perl, ruby,
// node, php, lua, Rscript, julia, ...) with inline code (-c, -e, -r, --eval, "-",
// or code on standard input) is refused too: send Python as language python.
//
// Tools on most allowlists that can run commands are read:
//
//   - awk, gawk, mawk: the program may not call system(), pipe to or from a command
//     (print | "cmd", "cmd" | getline, |&) or use @ (gawk's @load, indirect calls).
//     A small lexer skips strings, regex literals and comments; '/' starts a regex
//     where an operand is expected. A program from a file (-f) or computed at run
//     time is refused; pass values with -v name=value.
//   - sed: a small parser of GNU sed's grammar finds the e command and the e flag of
//     s. A script file, a computed script or one the parser can't read is refused,
//     unless --sandbox is given (GNU sed then refuses e, r and w itself).
//   - sort --compress-program, split --filter, tar --to-command (and -I, -F and the
//     other program options), rg --pre.
//
// Variables that make bash, the loader or common tools run code may not be set:
// BASH_ENV, ENV, PS0-PS4, PROMPT_COMMAND, SHELLOPTS, BASHOPTS, BASH_ALIASES,
// BASH_CMDS, LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, SHELL, PAGER, EDITOR, LESSOPEN,
// GIT_SSH_COMMAND, NODE_OPTIONS, PERL5OPT, BASH_FUNC_* and a few more; also through
// env NAME=..., declare -n, read and printf -v. ${x@P} (prompt expansion runs $(...))
// is refused.
//
// Functions: a call to a function defined in the script is checked by its body, not
// as a command, so curl() { ...; } may be defined and called. The definition must
// certainly have run: it is a statement of its own, earlier in the same list of
// statements. Calls in a body are settled at each call of the function, so main()
// may call helpers defined after it. command, env, exec and the other wrappers run
// the real program and ignore functions. If the script uses unset or POSIX mode
// anywhere, calls resolved as functions are checked as commands as well.
//
// Violations are deduplicated (same rule, detail and line) and ordered by line.
// CheckShell is linear in the size of the script; the work spent following
// function calls and find -exec actions is capped. A 100-line script takes about
// 0.3 ms, half of it parsing (BenchmarkCheckShell100Lines).
//
// What the check can't see: what a file contains (./run.sh, python3 x.py, make, a
// PATH that points at the workspace: a name on the allowlist may be a file the code
// wrote), options computed at run time that GNU tools accept after operands (sort
// "$f" with f=--compress-program=sh), code bash evaluates from data (array subscripts
// in arithmetic: x='a[$(cmd)]'; $((x))), and programs outside the lists above that
// run other programs (git aliases, less, zip -TT, rsync -e, dc). Redirections to
// /dev/tcp/HOST/PORT (bash's own network client) are not commands and pass. Where
// mvdan.cc/sh and bash disagree on a parse, the box still holds.
package policy

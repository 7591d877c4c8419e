package policy

import (
	"strings"
)

// Common tools that can run other programs. awk, sed and find are on most
// allowlists, so their programs and expressions are read; a few others have options
// that name a program to run.

var gawkLong = []string{
	"assign", "bignum", "characters-as-bytes", "copyright", "csv", "debug", "dump-variables",
	"exec", "field-separator", "file", "gen-pot", "help", "include", "lint", "lint-old", "load",
	"no-optimize", "non-decimal-data", "optimize", "persist", "posix", "pretty-print", "profile",
	"re-interval", "sandbox", "source", "trace", "traditional", "use-lc-numeric", "version",
}

// awk checks the program of awk, gawk or mawk: a program from a file can't be read,
// a computed one can't be checked, and a literal one must not run commands.
func (w *walker) awk(name string, argv []arg) {
	p := w.c.profile
	var progs []arg
	fileOpt := ""
	i := 1
	// value returns the value of an option: the rest of the cluster or the next word.
	value := func(v string, j int) arg {
		if rest := v[j+1:]; rest != "" {
			return literal(rest, argv[i])
		}
		if i+1 < len(argv) {
			i++
			return argv[i]
		}
		return arg{static: true}
	}
loop:
	for ; i < len(argv); i++ {
		a := argv[i]
		if !a.static || a.val == "-" || !strings.HasPrefix(a.val, "-") {
			break
		}
		v := a.val
		if v == "--" {
			i++
			break
		}
		if strings.HasPrefix(v, "--") {
			n, val, has := strings.Cut(v[2:], "=")
			switch matchLong(n, gawkLong) {
			case "file", "exec", "include", "load":
				fileOpt = v
				if !has {
					i++
				}
			case "source":
				if has {
					progs = append(progs, literal(val, a))
				} else if i+1 < len(argv) {
					i++
					progs = append(progs, argv[i])
				}
			case "assign", "field-separator":
				if !has {
					i++
				}
			}
			continue
		}
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case 'f', 'E', 'i', 'l':
				fileOpt = v
				value(v, j)
				continue loop
			case 'e':
				progs = append(progs, value(v, j))
				continue loop
			case 'v', 'F':
				value(v, j)
				continue loop
			case 'W':
				wv := value(v, j)
				n, _, _ := strings.Cut(wv.val, "=")
				if !wv.static || matchLong(n, []string{"exec", "file", "include", "load", "source"}) != "" {
					fileOpt = v
				}
				continue loop
			case 'd', 'D', 'L', 'o', 'p':
				continue loop // optional attached value
			}
		}
	}
	if fileOpt != "" {
		w.c.emit(RuleShellWrapper, argv[0].line, "%q reading its program from a file (%s) can't be checked by profile %q; give the program inline in single quotes", name, quote(fileOpt), p)
		return
	}
	if len(progs) == 0 {
		if i >= len(argv) {
			return
		}
		progs = append(progs, argv[i])
	}
	for _, prog := range progs {
		switch {
		case !prog.static:
			w.c.emit(RuleShellWrapper, prog.line, "the %q program %s is computed at run time, so profile %q can't check it for system() or pipes; keep the program in single quotes and pass values with -v name=value", name, quote(prog.text), p)
		case awkRunsCommands(prog.val):
			w.c.emit(RuleShellWrapper, prog.line, "the %q program calls system(), pipes to or from a command, or loads an extension, which runs code profile %q can't check; do that step in the shell with allowed commands", name, p)
		}
	}
}

// awkKeywords are followed by an operand, so a '/' after them starts a regex.
var awkKeywords = map[string]bool{
	"print": true, "printf": true, "return": true, "in": true, "if": true, "while": true,
	"for": true, "do": true, "else": true, "case": true, "delete": true, "exit": true,
	"getline": true, "next": true, "nextfile": true, "BEGIN": true, "END": true,
	"BEGINFILE": true, "ENDFILE": true, "function": true, "func": true, "switch": true,
}

// awkRunsCommands reports whether an awk program can run a command: a call of
// system(), a pipe to or from a command (print | "cmd", "cmd" | getline, |&), or a
// gawk directive or indirect call starting with @ (@load loads a shared object,
// @f() can call system by name). It skips strings, regex literals and comments; a
// '/' is a regex where an operand is expected and a division after one.
func awkRunsCommands(prog string) bool {
	n := len(prog)
	operand := false
	for i := 0; i < n; i++ {
		c := prog[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r':
		case c == '\n' || c == ';' || c == '{' || c == '}':
			operand = false
		case c == '\\':
			i++ // line continuation
		case c == '#':
			for i+1 < n && prog[i+1] != '\n' {
				i++
			}
		case c == '"':
			i = skipDelimited(prog, i+1, '"', false)
			operand = true
		case c == '/':
			if !operand {
				if j := skipDelimited(prog, i+1, '/', true); j < n && prog[j] == '/' {
					i = j
					operand = true
					continue
				}
			}
			operand = false // division, or not a complete regex
		case c == '|':
			if i+1 < n && prog[i+1] == '|' {
				i++
				operand = false
				continue
			}
			return true
		case c == '@':
			j := i + 1
			for j < n && isIdentByte(prog[j]) {
				j++
			}
			if prog[i+1:j] != "namespace" {
				return true
			}
			i = j - 1
			operand = false
		case isIdentByte(c) && !(c >= '0' && c <= '9'):
			j := i
			for j < n && isIdentByte(prog[j]) {
				j++
			}
			word := prog[i:j]
			if word == "system" {
				k := j
				for k < n && (prog[k] == ' ' || prog[k] == '\t') {
					k++
				}
				if k < n && prog[k] == '(' {
					return true
				}
			}
			operand = !awkKeywords[word]
			i = j - 1
		case c >= '0' && c <= '9' || c == '.':
			for i+1 < n && (isIdentByte(prog[i+1]) || prog[i+1] == '.') {
				i++
			}
			operand = true
		case c == ')' || c == ']':
			operand = true
		case (c == '+' || c == '-') && i+1 < n && prog[i+1] == c:
			i++ // ++ and -- leave the operand state as it was
		default:
			operand = false
		}
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// skipDelimited returns the index of the delimiter d that ends a string or regex
// starting at i, skipping backslash escapes (and, for a regex, bracket
// expressions), or the index of the newline or end where it is left unterminated.
func skipDelimited(s string, i int, d byte, regex bool) int {
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			i += 2
			continue
		case c == d, c == '\n':
			return i
		case regex && c == '[':
			i++
			if i < len(s) && s[i] == '^' {
				i++
			}
			if i < len(s) && s[i] == ']' {
				i++
			}
			for i < len(s) && s[i] != ']' && s[i] != '\n' {
				if s[i] == '[' && i+1 < len(s) && (s[i+1] == ':' || s[i+1] == '.' || s[i+1] == '=') {
					if k := strings.Index(s[i+2:], string(s[i+1])+"]"); k >= 0 {
						i += k + 4
						continue
					}
				}
				i++
			}
			if i < len(s) && s[i] == ']' {
				i++
			}
			continue
		}
		i++
	}
	if i > len(s) {
		i = len(s)
	}
	return i
}

var sedLong = []string{
	"binary", "debug", "expression", "file", "follow-symlinks", "help", "in-place", "line-length",
	"null-data", "posix", "quiet", "regexp-extended", "sandbox", "separate", "silent",
	"unbuffered", "version", "zero-terminated",
}

// sed checks a GNU sed script for the e command and the e flag of s, which run the
// pattern space or a string as a shell command. --sandbox turns them off.
func (w *walker) sed(name string, argv []arg) {
	p := w.c.profile
	var exprs, operands []arg
	scriptOpt, sandbox, dynOpt := false, false, false
	fileOpt := ""
	endOpts := false
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if !a.static && strings.HasPrefix(a.prefix, "-") && !endOpts {
			dynOpt = true // an option with a computed value, such as -e"$x"
			continue
		}
		// GNU sed takes options after operands too; a computed word is taken as an
		// operand (see the package documentation).
		if endOpts || !a.static || a.val == "-" || !strings.HasPrefix(a.val, "-") {
			operands = append(operands, a)
			continue
		}
		v := a.val
		if v == "--" {
			endOpts = true
			continue
		}
		if strings.HasPrefix(v, "--") {
			n, val, has := strings.Cut(v[2:], "=")
			switch matchLong(n, sedLong) {
			case "expression":
				scriptOpt = true
				if has {
					exprs = append(exprs, literal(val, a))
				} else if i+1 < len(argv) {
					i++
					exprs = append(exprs, argv[i])
				}
			case "file":
				scriptOpt = true
				fileOpt = v
				if !has {
					i++
				}
			case "line-length":
				if !has {
					i++
				}
			case "sandbox":
				sandbox = true
			}
			continue
		}
	cluster:
		for j := 1; j < len(v); j++ {
			switch v[j] {
			case 'e', 'f', 'l':
				var val arg
				if rest := v[j+1:]; rest != "" {
					val = literal(rest, a)
				} else if i+1 < len(argv) {
					i++
					val = argv[i]
				}
				switch v[j] {
				case 'e':
					scriptOpt = true
					exprs = append(exprs, val)
				case 'f':
					scriptOpt = true
					fileOpt = v
				}
				break cluster
			case 'i':
				break cluster // optional attached suffix
			}
		}
	}
	if sandbox {
		return
	}
	line := argv[0].line
	switch {
	case fileOpt != "":
		w.c.emit(RuleShellWrapper, line, "%q reading its script from a file (%s) can't be checked by profile %q, and GNU sed can run commands from it; pass the script with -e or add --sandbox", name, quote(fileOpt), p)
		return
	case dynOpt:
		w.c.emit(RuleShellWrapper, line, "%q with a computed option can't be checked by profile %q, and GNU sed can run commands from its script; write the options literally or add --sandbox", name, p)
		return
	}
	if !scriptOpt {
		if len(operands) == 0 {
			return
		}
		exprs = operands[:1]
	}
	parts := make([]string, 0, len(exprs))
	for _, e := range exprs {
		if !e.static {
			w.c.emit(RuleShellWrapper, e.line, "the %q script %s is computed at run time and GNU sed can run commands from it (e, s///e), so profile %q refuses it; add --sandbox or write the script literally", name, quote(e.text), p)
			return
		}
		parts = append(parts, e.val)
	}
	runs, ok := sedRunsCommands(strings.Join(parts, "\n"))
	switch {
	case runs:
		w.c.emit(RuleShellWrapper, line, "the %q script uses the e command or the e flag of s, which run shell commands profile %q can't check; do that step in the shell with allowed commands", name, p)
	case !ok:
		w.c.emit(RuleShellWrapper, line, "profile %q can't read the %q script well enough to rule out the e command; simplify the script or add --sandbox", p, name)
	}
}

// sedParser reads just enough of GNU sed's grammar to find commands.
type sedParser struct {
	s string
	i int
}

// sedRunsCommands reports whether a GNU sed script runs shell commands (the e
// command, or the e flag of s). ok is false when the script can't be read; sed
// would reject most such scripts, but the check refuses them all.
func sedRunsCommands(s string) (runs, ok bool) {
	p := &sedParser{s: s}
	for {
		for p.i < len(p.s) && strings.IndexByte(" \t\r\n;", p.s[p.i]) >= 0 {
			p.i++
		}
		if p.i >= len(p.s) {
			return false, true
		}
		if p.peek() == '#' {
			p.toEOL()
			continue
		}
		if !p.addr(false) {
			return false, false
		}
		p.spaces()
		if p.peek() == ',' {
			p.i++
			p.spaces()
			if !p.addr(true) {
				return false, false
			}
		}
		p.spaces()
		for p.peek() == '!' {
			p.i++
			p.spaces()
		}
		if p.i >= len(p.s) {
			return false, false
		}
		c := p.s[p.i]
		p.i++
		switch c {
		case '{', '}':
			continue
		case '=', 'd', 'D', 'g', 'G', 'h', 'H', 'n', 'N', 'p', 'P', 'x', 'z', 'F':
		case 'l', 'L', 'q', 'Q':
			p.spaces()
			p.digits()
		case ':', 'b', 't', 'T', 'v':
			p.spaces()
			p.label()
			continue
		case 'a', 'i', 'c':
			p.text()
			continue
		case 'r', 'R', 'w', 'W':
			p.toEOL()
			continue
		case 'e':
			return true, true
		case 's', 'y':
			d := p.peek()
			if d == 0 || d == '\n' || d == '\\' {
				return false, false
			}
			p.i++
			if !p.delimited(d) || !p.delimited(d) {
				return false, false
			}
			if c == 's' {
				if p.sflags() {
					return true, true
				}
			}
		default:
			return false, false
		}
		p.spaces()
		switch p.peek() {
		case 0, ';', '\n', '\r', '}', '#':
		default:
			return false, false
		}
	}
}

func (p *sedParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sedParser) spaces() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sedParser) digits() {
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
}

func (p *sedParser) toEOL() {
	for p.i < len(p.s) && p.s[p.i] != '\n' {
		p.i++
	}
}

func (p *sedParser) label() {
	for p.i < len(p.s) && p.s[p.i] != '\n' && p.s[p.i] != ';' {
		p.i++
	}
}

// text skips the text of a, i and c: to the end of the line, continued by lines
// ending in a backslash.
func (p *sedParser) text() {
	p.spaces()
	if p.peek() == '\\' {
		p.i++
		if p.peek() == '\n' {
			p.i++
		}
	}
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '\\':
			p.i += 2
			continue
		case '\n':
			return
		}
		p.i++
	}
}

// delimited skips past the unescaped delimiter d; false if the line ends first.
// GNU sed does not treat brackets specially when looking for the delimiter.
func (p *sedParser) delimited(d byte) bool {
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '\\':
			p.i += 2
			continue
		case c == d:
			p.i++
			return true
		case c == '\n':
			return false
		}
		p.i++
	}
	return false
}

// addr skips an optional address; second allows the forms only valid after a comma.
func (p *sedParser) addr(second bool) bool {
	c := p.peek()
	switch {
	case c >= '0' && c <= '9':
		p.digits()
		if p.peek() == '~' {
			p.i++
			p.digits()
		}
	case c == '$':
		p.i++
	case c == '/':
		p.i++
		if !p.delimited('/') {
			return false
		}
		p.regexFlags()
	case c == '\\':
		p.i++
		d := p.peek()
		if d == 0 || d == '\n' || d == '\\' {
			return false
		}
		p.i++
		if !p.delimited(d) {
			return false
		}
		p.regexFlags()
	case second && (c == '+' || c == '~'):
		p.i++
		p.digits()
	case second:
		return false
	}
	return true
}

func (p *sedParser) regexFlags() {
	for p.peek() == 'I' || p.peek() == 'M' {
		p.i++
	}
}

// sflags skips the flags of s and reports whether one of them is e.
func (p *sedParser) sflags() bool {
	for {
		f := p.peek()
		switch {
		case f == 'e':
			return true
		case f == 'w':
			p.toEOL()
			return false
		case f != 0 && strings.IndexByte("gpiImM0123456789", f) >= 0:
			p.i++
		default:
			return false
		}
	}
}

// find

var findExecs = map[string]bool{"-exec": true, "-execdir": true, "-ok": true, "-okdir": true}

// findArgs are the find primaries that take arguments, with how many.
var findArgs = map[string]int{
	"-amin": 1, "-anewer": 1, "-atime": 1, "-cmin": 1, "-cnewer": 1, "-context": 1, "-ctime": 1,
	"-files0-from": 1, "-fls": 1, "-fprint": 1, "-fprint0": 1, "-fprintf": 2, "-fstype": 1,
	"-gid": 1, "-group": 1, "-ilname": 1, "-iname": 1, "-inum": 1, "-ipath": 1, "-iregex": 1,
	"-iwholename": 1, "-links": 1, "-lname": 1, "-maxdepth": 1, "-mindepth": 1, "-mmin": 1,
	"-mtime": 1, "-name": 1, "-newer": 1, "-path": 1, "-perm": 1, "-printf": 1, "-regex": 1,
	"-regextype": 1, "-samefile": 1, "-size": 1, "-type": 1, "-uid": 1, "-used": 1, "-user": 1,
	"-wholename": 1, "-xtype": 1,
}

func findArgCount(v string) int {
	if n, ok := findArgs[v]; ok {
		return n
	}
	if len(v) == len("-newerXY") && strings.HasPrefix(v, "-newer") {
		return 1
	}
	return 0
}

// find checks the commands of -exec, -execdir, -ok and -okdir. find reads its own
// expression, so a computed word could turn into -exec: computed words are accepted
// only where they can't (see the package documentation).
func (w *walker) find(name string, argv []arg, x execCtx) {
	args := argv[1:]
	p := w.c.profile
	for _, a := range args {
		if !a.static && a.split {
			w.c.emit(RuleShellWrapper, a.line, "%q can't be checked by profile %q with the unquoted computed word %s, which could expand to -exec and a command; put it in double quotes", name, p, quote(a.text))
			return
		}
	}
	i := 0
	for i < len(args) && args[i].static {
		v := args[i].val
		if v == "-H" || v == "-L" || v == "-P" || strings.HasPrefix(v, "-O") {
			i++
			continue
		}
		if v == "-D" {
			i += 2
			continue
		}
		break
	}
	// Starting points. A computed one could be -exec; then the next word would be
	// the command, so it must not be followed by another starting point.
	prevDyn := false
	for i < len(args) {
		a := args[i]
		if a.static && (strings.HasPrefix(a.val, "-") || a.val == "(" || a.val == "!") {
			break
		}
		if prevDyn {
			w.c.emit(RuleShellWrapper, a.line, "%q can't be checked by profile %q with a computed start path followed by more paths; give the computed path last or write the paths literally", name, p)
			return
		}
		prevDyn = !a.static
		i++
	}
	// Every literal -exec is checked wherever it is, even inside another -exec: a
	// computed word there could end it early (";") and make the words after it a
	// new action.
	next := findTerminators(args)
	// In the commands of -exec, find replaces {} with file names.
	subst := append([]arg(nil), args...)
	for k := range subst {
		if a := &subst[k]; a.static && strings.Contains(a.val, "{}") {
			a.static = false
			a.prefix = a.val[:strings.Index(a.val, "{}")]
		}
	}
	execs := 0
	for k := i; k < len(args); k++ {
		a := args[k]
		if k == i {
			if !a.static {
				w.c.emit(RuleShellWrapper, a.line, "%q can't be checked by profile %q with the computed word %s where a test or action is expected; write the expression literally", name, p, quote(a.text))
				return
			}
			// the expression as find reads it: skip the arguments of tests
			if !findExecs[a.val] {
				i += 1 + findArgCount(a.val)
			} else if end := findExecEnd(args, next, k+1); end < len(args) {
				i = end + 1
			} else {
				i = end
			}
		}
		if !a.static || !findExecs[a.val] {
			continue
		}
		if execs++; execs > maxExecs {
			w.c.emit(RuleShellWrapper, a.line, "%q with more than %d -exec actions can't be checked by profile %q; split the command", name, maxExecs, p)
			return
		}
		end := findExecEnd(args, next, k+1)
		w.findExec(name, a.val, args[k+1:end], subst[k+1:end], x)
	}
}

// findTerminators returns, for each index, the index of the first word from there
// that can end an -exec: ";", or "+" after "{}".
func findTerminators(args []arg) []int {
	next := make([]int, len(args)+1)
	next[len(args)] = len(args)
	for j := len(args) - 1; j >= 0; j-- {
		a := args[j]
		if a.static && (a.val == ";" || a.val == "+" && j > 0 && args[j-1].static && args[j-1].val == "{}") {
			next[j] = j
		} else {
			next[j] = next[j+1]
		}
	}
	return next
}

// findExecEnd returns the index of the word that ends an -exec whose command
// starts at start ("+" only counts after a "{}" that belongs to the -exec).
func findExecEnd(args []arg, next []int, start int) int {
	e := next[start]
	if e == start && e < len(args) && args[e].val == "+" {
		e = next[start+1]
	}
	return e
}

// findExec checks the command of one -exec: inner as written, subst with {} taken
// as computed.
func (w *walker) findExec(name, prim string, inner, subst []arg, x execCtx) {
	if len(inner) == 0 {
		return
	}
	p := w.c.profile
	via := name + " " + prim
	dyn := 0
	for _, a := range inner[1:] {
		if !a.static {
			dyn++
		}
	}
	if dyn > 1 {
		w.c.emit(RuleShellWrapper, inner[0].line, "the %s command has more than one computed word, which could end it and start another action, so profile %q refuses it; compute the values into one word or use a loop", quote(via), p)
		return
	}
	c := inner[0]
	if !c.static || strings.Contains(c.val, "{}") {
		w.c.emit(RuleShellWrapper, c.line, "the command %q runs is %s, which is not known before it runs, so profile %q refuses it; write the command name literally", via, quote(c.text), p)
		return
	}
	x.redirs = nil
	w.run(subst, x.next(via))
}

// runOptSpec lists the options of a tool that run a program.
type runOptSpec struct {
	long    []string // long options that run a program
	abbrev  bool     // the tool accepts unambiguous prefixes of long options
	exact   []string // other options that are prefixes of those
	short   string   // short options that run a program
	stop    string   // short options whose value is the rest of the cluster
	oldArgs bool     // the first argument is an option cluster without a dash (tar xf)
}

var tarRunOpts = &runOptSpec{
	long:    []string{"to-command", "use-compress-program", "info-script", "new-volume-script", "rsh-command", "checkpoint-action"},
	abbrev:  true,
	exact:   []string{"checkpoint"},
	short:   "IF",
	stop:    "fCTXbgHKLNV",
	oldArgs: true,
}

var runOptSpecs = map[string]*runOptSpec{
	"sort":  {long: []string{"compress-program"}, abbrev: true},
	"split": {long: []string{"filter"}, abbrev: true},
	"tar":   tarRunOpts,
	"gtar":  tarRunOpts,
	"rg":    {long: []string{"pre"}},
}

// runOpts flags options that make a tool run another program (sort
// --compress-program, split --filter, tar --to-command, rg --pre).
func (w *walker) runOpts(name string, argv []arg) {
	s := runOptSpecs[name]
	for i, a := range argv[1:] {
		if !a.static {
			continue
		}
		v := a.val
		if v == "--" {
			return
		}
		hit := false
		switch {
		case strings.HasPrefix(v, "--"):
			n, _, _ := strings.Cut(v[2:], "=")
			hit = s.longHit(n)
		case len(v) > 1 && v[0] == '-', i == 0 && s.oldArgs && v != "":
			for _, c := range []byte(strings.TrimPrefix(v, "-")) {
				if strings.IndexByte(s.stop, c) >= 0 {
					break
				}
				if strings.IndexByte(s.short, c) >= 0 {
					hit = true
					break
				}
			}
		}
		if hit {
			w.c.emit(RuleShellWrapper, a.line, "%q with %s runs another program, which profile %q can't check; drop that option", name, quote(a.text), w.c.profile)
		}
	}
}

func (s *runOptSpec) longHit(n string) bool {
	if n == "" {
		return false
	}
	for _, e := range s.exact {
		if n == e {
			return false
		}
	}
	for _, l := range s.long {
		if n == l || s.abbrev && strings.HasPrefix(l, n) {
			return true
		}
	}
	return false
}

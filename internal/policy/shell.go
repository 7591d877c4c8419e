package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"

	"github.com/moat-sandbox/moat/internal/box"
)

// The rules CheckShell reports. They are part of the result contract.
const (
	// RuleShellParse: the script (or a script nested in it, such as the string of
	// bash -c) does not parse as bash.
	RuleShellParse = "shell.parse"
	// RuleShellCommand: a command the profile denies, or one missing from its allowlist.
	RuleShellCommand = "shell.command"
	// RuleShellDynamic: a command name (or a variable name given to a builtin) that is
	// computed at run time, so it can't be checked.
	RuleShellDynamic = "shell.dynamic"
	// RuleShellWrapper: something that runs code the check can't see: eval, source,
	// a wrapper whose command can't be determined, inline interpreter code, awk's
	// system(), sed's e command, variables such as BASH_ENV.
	RuleShellWrapper = "shell.wrapper"
)

// ShellRules is the shell part of a policy profile.
type ShellRules struct {
	Profile string   // profile name, used in messages
	Allow   []string // when non-empty: ONLY these command names may run (allowlist)
	Deny    []string // these command names may never run (checked in both modes)
}

// CheckShell parses script as bash (mvdan.cc/sh/v3/syntax, LangBash) and returns every
// violation; nil means the script may run. A script that does not parse yields one
// violation with Rule "shell.parse" carrying the parse error and its line.
//
// A profile with neither Allow nor Deny has no shell rules, and CheckShell returns
// nil without parsing. Otherwise eval, source, computed command names and the other
// things the package documentation lists under "# Shell" are refused in both modes.
//
// CheckShell is defence in depth and a source of clear early errors; the box is
// what keeps the host safe.
func CheckShell(script string, r ShellRules) []box.Violation {
	c := newShellChecker(r)
	if c.allow == nil && len(c.deny) == 0 {
		return nil // no shell rules (the "off" profile): nothing to enforce
	}
	w := &walker{c: c, src: script, base: 1, fs: &funcState{}}
	w.file(syntax.LangBash, "", true)
	return c.result()
}

const (
	maxNest = 8  // scripts nested in strings (bash -c 'bash -c ...')
	maxHops = 32 // wrappers around one command (env nice timeout ... cmd)

	maxVisits = 100000 // function bodies settled at call sites, per script
	maxExecs  = 64     // -exec actions of one find
)

// shellChecker holds the profile and collects violations for one CheckShell call.
type shellChecker struct {
	profile string
	allow   map[string]bool // nil in denylist mode
	deny    map[string]bool
	allowed string // the allowlist, sorted, for messages
	out     []box.Violation
	visits  int // work done settling function calls, bounded by maxVisits
}

func newShellChecker(r ShellRules) *shellChecker {
	c := &shellChecker{profile: r.Profile, deny: map[string]bool{}}
	for _, n := range r.Deny {
		if b := normName(n); b != "" {
			c.deny[b] = true
		}
	}
	var names []string
	for _, n := range r.Allow {
		b := normName(n)
		if b == "" {
			continue
		}
		if c.allow == nil {
			c.allow = map[string]bool{}
		}
		if !c.allow[b] {
			c.allow[b] = true
			names = append(names, b)
		}
	}
	sort.Strings(names)
	c.allowed = strings.Join(names, ", ")
	return c
}

// normName turns a profile entry into the name commands are judged by.
func normName(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	b, _ := commandBase(s)
	return b
}

func (c *shellChecker) emit(rule string, line int, format string, a ...any) {
	if line < 0 {
		line = 0
	}
	c.out = append(c.out, box.Violation{Rule: rule, Detail: fmt.Sprintf(format, a...), Line: line})
}

// capture runs f and returns what it reported instead of keeping it.
func (c *shellChecker) capture(f func()) []box.Violation {
	saved := c.out
	c.out = nil
	f()
	got := c.out
	c.out = saved
	return got
}

// result removes duplicates and orders violations by line.
func (c *shellChecker) result() []box.Violation {
	if len(c.out) == 0 {
		return nil
	}
	seen := make(map[box.Violation]bool, len(c.out))
	var vs []box.Violation
	for _, v := range c.out {
		if !seen[v] {
			seen[v] = true
			vs = append(vs, v)
		}
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].Line < vs[j].Line })
	return vs
}

// walker walks one parsed script: the one given to CheckShell or one nested in it.
type walker struct {
	c     *shellChecker
	src   string // the source that positions refer to
	base  int    // line of the top-level script where src's first line is
	depth int    // how deeply src is nested in strings
	fs    *funcState
	cur   *funcDef // function whose body is being walked; nil in the main flow

	visitFn func(syntax.Node) bool // w.visit1, kept to allocate it once
}

func (w *walker) line(p syntax.Pos) int {
	if !p.IsValid() {
		return w.base
	}
	return w.base + int(p.Line()) - 1
}

// snippet is the source text of n, shortened for a message.
func (w *walker) snippet(n syntax.Node) string {
	s, e := n.Pos(), n.End()
	if !s.IsValid() || !e.IsValid() {
		return ""
	}
	so, eo := int(s.Offset()), int(e.Offset())
	if so < 0 || eo > len(w.src) || so >= eo {
		return ""
	}
	return shorten(w.src[so:eo])
}

func shorten(s string) string {
	const max = 60
	if len(s) <= max {
		return s
	}
	cut := max - 3
	for cut > 0 && s[cut]&0xC0 == 0x80 { // don't split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "..."
}

// file parses w.src in lang and walks it. label names where a nested script came
// from ("bash -c"); it is empty for the top-level script. own says w owns w.fs and
// must settle its function calls at the end.
func (w *walker) file(lang syntax.LangVariant, label string, own bool) {
	f, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(w.src), "")
	if err != nil {
		w.parseError(err, label)
		return
	}
	w.stmts(f.Stmts)
	if own {
		w.finish()
	}
}

func (w *walker) parseError(err error, label string) {
	line, text := w.base, err.Error()
	var pe syntax.ParseError
	var le syntax.LangError
	switch {
	case errors.As(err, &pe):
		line, text = w.line(pe.Pos), pe.Text
	case errors.As(err, &le):
		line = w.line(le.Pos)
		text = le.Feature + " is not supported in " + le.LangUsed.String()
	}
	if label == "" {
		w.c.emit(RuleShellParse, line, "script does not parse as bash: %s; fix the syntax", text)
		return
	}
	w.c.emit(RuleShellParse, line, "the script given to %s does not parse: %s; fix its syntax", label, text)
}

// nested walks src, a script found in a string of this one (bash -c, trap, a
// here-document fed to a shell). share says it runs in this shell (trap), so it
// sees and can change this shell's functions.
func (w *walker) nested(src string, line int, lang syntax.LangVariant, label string, share bool) {
	if w.depth >= maxNest {
		w.c.emit(RuleShellWrapper, line, "scripts nested in strings more than %d deep can't be checked by profile %q; run the commands directly", maxNest, w.c.profile)
		return
	}
	n := &walker{c: w.c, src: src, base: line, depth: w.depth + 1}
	if share {
		n.fs, n.cur = w.fs, w.cur
	} else {
		n.fs = &funcState{}
	}
	n.file(lang, label, !share)
}

// stmts walks a list of statements run one after the other. A function defined by
// one of them (not in the background) is defined for the statements after it, until
// the list ends.
func (w *walker) stmts(list []*syntax.Stmt) {
	mark := len(w.fs.scope)
	for _, s := range list {
		if fd, ok := s.Cmd.(*syntax.FuncDecl); ok && !s.Background && !s.Coprocess && !s.Disown {
			d := w.funcDecl(fd)
			w.redirs(s.Redirs)
			if d.name != "" {
				w.fs.push(d)
			}
			continue
		}
		w.stmt(s)
	}
	w.fs.popTo(mark)
}

func (w *walker) stmt(s *syntax.Stmt) {
	if s == nil {
		return
	}
	if s.Cmd != nil {
		w.command(s.Cmd, s)
	}
	w.redirs(s.Redirs)
}

func (w *walker) redirs(rs []*syntax.Redirect) {
	for _, r := range rs {
		if r.Word != nil {
			w.node(r.Word)
		}
		if r.Hdoc != nil {
			w.node(r.Hdoc)
		}
	}
}

func (w *walker) command(cmd syntax.Command, s *syntax.Stmt) {
	switch x := cmd.(type) {
	case *syntax.CallExpr:
		w.call(x, s.Redirs)
	case *syntax.IfClause:
		for ; x != nil; x = x.Else {
			w.stmts(x.Cond)
			w.stmts(x.Then)
		}
	case *syntax.WhileClause:
		w.stmts(x.Cond)
		w.stmts(x.Do)
	case *syntax.ForClause:
		switch l := x.Loop.(type) {
		case *syntax.WordIter:
			if l.Name != nil {
				w.assigned(l.Name.Value, w.line(l.Name.Pos()))
			}
			for _, it := range l.Items {
				w.node(it)
			}
		case *syntax.CStyleLoop:
			w.arithm(l.Init)
			w.arithm(l.Cond)
			w.arithm(l.Post)
		}
		w.stmts(x.Do)
	case *syntax.CaseClause:
		w.node(x.Word)
		for _, it := range x.Items {
			for _, p := range it.Patterns {
				w.node(p)
			}
			w.stmts(it.Stmts)
		}
	case *syntax.Block:
		w.stmts(x.Stmts)
	case *syntax.Subshell:
		w.stmts(x.Stmts)
	case *syntax.BinaryCmd:
		w.stmt(x.X)
		w.stmt(x.Y)
	case *syntax.FuncDecl:
		// Defined inside a pipeline or a list such as "true && f() {...}": the body
		// is checked, but the name is not trusted to be defined afterwards.
		w.funcDecl(x)
	case *syntax.ArithmCmd:
		w.arithm(x.X)
	case *syntax.TestClause:
		w.node(x.X)
	case *syntax.DeclClause:
		w.decl(x)
	case *syntax.LetClause:
		for _, e := range x.Exprs {
			w.arithm(e)
		}
	case *syntax.TimeClause:
		w.stmt(x.Stmt)
	case *syntax.CoprocClause:
		if x.Name != nil {
			w.node(x.Name)
		}
		w.stmt(x.Stmt)
	case *syntax.TestDecl:
		w.node(x.Description)
		w.stmt(x.Body)
	default:
		w.c.emit(RuleShellParse, w.line(cmd.Pos()), "profile %q can't check a %T statement; rewrite it with plain commands", w.c.profile, cmd)
	}
}

func (w *walker) arithm(e syntax.ArithmExpr) {
	if e != nil {
		w.node(e)
	}
}

// node walks anything that is not a statement (words, arithmetic, [[ ]] tests),
// handing the statements of command and process substitutions back to stmts.
func (w *walker) node(n syntax.Node) {
	if word, ok := n.(*syntax.Word); ok && plainWord(word) {
		return
	}
	if w.visitFn == nil {
		w.visitFn = w.visit1
	}
	syntax.Walk(n, w.visitFn)
}

// plainWord reports whether word is only literal text (nothing to walk).
func plainWord(word *syntax.Word) bool {
	for _, p := range word.Parts {
		switch p.(type) {
		case *syntax.Lit, *syntax.SglQuoted:
		default:
			return false
		}
	}
	return true
}

func (w *walker) visit1(n syntax.Node) bool {
	switch x := n.(type) {
	case *syntax.CmdSubst:
		w.stmts(x.Stmts)
		return false
	case *syntax.ProcSubst:
		w.stmts(x.Stmts)
		return false
	case *syntax.ParamExp:
		// ${x@P} expands x as a prompt string, and prompt strings run
		// command substitutions: x='$(curl ...)'; echo "${x@P}".
		if x.Exp != nil && x.Exp.Op == syntax.OtherParamOps && x.Exp.Word != nil && strings.Contains(x.Exp.Word.Lit(), "P") {
			w.c.emit(RuleShellWrapper, w.line(x.Pos()), "%s expands a variable as a prompt string, which can run commands profile %q can't check; use the plain expansion instead", quote(w.snippet(x)), w.c.profile)
		}
	}
	return true
}

func (w *walker) assign(a *syntax.Assign) {
	if a.Name != nil {
		w.assigned(a.Name.Value, w.line(a.Name.Pos()))
	}
	w.arithm(a.Index)
	if a.Value != nil {
		w.node(a.Value)
	}
	if a.Array != nil {
		w.node(a.Array)
	}
}

func (w *walker) call(x *syntax.CallExpr, redirs []*syntax.Redirect) {
	for _, a := range x.Assigns {
		w.assign(a)
	}
	for _, a := range x.Args {
		w.node(a)
	}
	if len(x.Args) == 0 {
		return // assignments only
	}
	argv := make([]arg, len(x.Args))
	for i, word := range x.Args {
		argv[i] = w.arg(word)
	}
	ctx := execCtx{redirs: redirs}
	if !argv[0].static {
		w.run(argv, ctx)
		return
	}
	name := argv[0].val
	if d := w.fs.lookup(name); d != nil {
		// A function: its body runs instead. What the call would break as a
		// command is kept aside in case the function can be undefined (see finish).
		vs := w.c.capture(func() { w.run(argv, ctx) })
		w.fs.shadowed = append(w.fs.shadowed, vs...)
		if w.cur != nil {
			w.cur.edges = append(w.cur.edges, d)
		} else {
			w.visit(d)
		}
		return
	}
	if w.cur != nil {
		// In a function body: name may be a function defined later, before the
		// function is called. Decide at each call (visit).
		vs := w.c.capture(func() { w.run(argv, ctx) })
		w.cur.cands = append(w.cur.cands, funcCand{name: name, vs: vs})
		return
	}
	w.run(argv, ctx)
}

// decl checks declare, local, export, readonly, typeset and nameref.
func (w *walker) decl(x *syntax.DeclClause) {
	variant := x.Variant.Value
	nameref := variant == "nameref"
	for _, a := range x.Args {
		if variant == "export" || variant == "readonly" {
			break // their -n is not a nameref
		}
		if a.Naked && a.Name == nil && a.Value != nil {
			if v := w.arg(a.Value); v.static && len(v.val) > 1 && v.val[0] == '-' && strings.Contains(v.val, "n") {
				nameref = true
			}
		}
	}
	for _, a := range x.Args {
		w.assign(a)
		switch {
		case a.Naked && a.Name == nil && a.Value != nil:
			v := w.arg(a.Value)
			if v.static && (strings.HasPrefix(v.val, "-") || strings.HasPrefix(v.val, "+")) {
				continue // options
			}
			w.varName(v, variant)
		case nameref && a.Value != nil:
			// declare -n r=PS4 makes r an alias of PS4.
			v := w.arg(a.Value)
			if !v.static || !isVarRef(v.val) {
				w.c.emit(RuleShellDynamic, v.line, "nameref target %s can't be checked by profile %q; point the reference at a plain variable name", quote(v.text), w.c.profile)
				continue
			}
			w.assigned(varBase(v.val), v.line)
		}
	}
}

// varName checks a word used as a variable name by a builtin (read, printf -v,
// declare "NAME=..."): it must be static, must not be a variable that runs code,
// and must not hide a command substitution in an array subscript.
func (w *walker) varName(a arg, by string) {
	if !a.static {
		w.c.emit(RuleShellDynamic, a.line, "variable name %s given to %q is computed at run time, so profile %q can't check it; write the name literally", quote(a.text), by, w.c.profile)
		return
	}
	if strings.Contains(a.val, "$(") || strings.Contains(a.val, "`") {
		w.c.emit(RuleShellDynamic, a.line, "variable name %s given to %q contains a command substitution that bash would run, which profile %q refuses; use a plain name", quote(a.text), by, w.c.profile)
		return
	}
	w.assigned(varBase(a.val), a.line)
}

// assigned checks the name of a variable being set.
func (w *walker) assigned(name string, line int) {
	if name == "POSIXLY_CORRECT" {
		w.fs.unsafe = true // POSIX mode changes how functions are looked up
	}
	if dangerousVar(name) {
		w.c.emit(RuleShellWrapper, line, "setting %q is refused by profile %q because it makes the shell or other programs run code that can't be checked; remove the assignment", name, w.c.profile)
	}
}

// varBase is the variable name in NAME, NAME=value or NAME[i]=value.
func varBase(s string) string {
	if i := strings.IndexAny(s, "=[+"); i >= 0 {
		return s[:i]
	}
	return s
}

func isVarRef(s string) bool {
	name, sub, hasSub := strings.Cut(s, "[")
	if !isName(name) {
		return false
	}
	return !hasSub || (strings.HasSuffix(sub, "]") && !strings.ContainsAny(sub, "$`"))
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// dangerousVars make bash, the dynamic loader or common tools run code or files
// named in their value.
var dangerousVars = map[string]bool{
	"BASH_ENV": true, "ENV": true, // sourced by non-interactive bash / sh
	"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true, // prompt expansion runs $(...); PS4 with set -x
	"PROMPT_COMMAND": true, "SHELLOPTS": true, "BASHOPTS": true, "BASH_LOADABLES_PATH": true,
	"BASH_ALIASES": true, "BASH_CMDS": true, // define aliases; map names to files (like hash -p)
	"LD_PRELOAD": true, "LD_AUDIT": true, "LD_LIBRARY_PATH": true, "GCONV_PATH": true,
	"SHELL": true, // flock -c, script and others run $SHELL -c
	"PAGER": true, "MANPAGER": true, "GIT_PAGER": true, "LESSOPEN": true, "LESSCLOSE": true,
	"EDITOR": true, "VISUAL": true, "GIT_EDITOR": true, "BROWSER": true,
	"GIT_SSH": true, "GIT_SSH_COMMAND": true, "GIT_EXTERNAL_DIFF": true, "GIT_ASKPASS": true, "SSH_ASKPASS": true,
	"PERL5OPT": true, "PERL5DB": true, "NODE_OPTIONS": true, "RUBYOPT": true, "PYTHONSTARTUP": true,
	"TAR_OPTIONS": true,
}

func dangerousVar(name string) bool {
	return dangerousVars[name] || strings.HasPrefix(name, "BASH_FUNC_")
}

// quote renders source text for a message: in backquotes when that is unambiguous,
// else as a Go string literal (control characters and invalid UTF-8 escaped).
func quote(s string) string {
	if s != "" && utf8.ValidString(s) && !strings.ContainsAny(s, "`") && !strings.ContainsFunc(s, unicode.IsControl) {
		return "`" + s + "`"
	}
	return fmt.Sprintf("%q", s)
}

package policy

import (
	"mvdan.cc/sh/v3/syntax"

	"github.com/moat-sandbox/moat/internal/box"
)

// Shell functions.
//
// A call to a function defined in the script is checked by the function's body,
// not as a command; that lets a script define curl() { ...; } and call it. This is
// only safe while the name really is the function when the call runs, otherwise the
// real curl runs. So a name counts as a function only where its definition has
// certainly run:
//
//   - the definition is a statement of its own (not in a pipeline, not in the
//     background, not after && or ||), and
//   - the call comes later in the same list of statements, at any depth (a
//     subshell, a substitution or a nested block inherits the function).
//
// Calls inside a function body run when the function is called, so a body may call
// a function defined after it (main() { helper; }; helper() {...}; main). Such calls
// are decided at each call of the enclosing function, against the functions defined
// at that point (visit). A body that is never called is checked as commands.
//
// unset -f and POSIX mode (where functions can't shadow special builtins and odd
// names are refused) can make a name stop being a function. If the script uses
// either anywhere, every call that was let through as a function call is also
// checked as a command (finish).

type funcState struct {
	scope    []*funcDef            // functions defined at this point, innermost last
	byName   map[string][]*funcDef // the same, by name
	gen      int                   // changes whenever scope changes
	defs     []*funcDef
	shadowed []box.Violation // what calls resolved as functions would break as commands
	unsafe   bool            // the script uses unset, or POSIX mode
}

type funcDef struct {
	name    string
	edges   []*funcDef // functions the body calls that were already defined
	cands   []funcCand // other calls of the body: functions defined later, or commands
	called  bool
	seenGen int // fs.gen+1 at the last visit
}

type funcCand struct {
	name string
	vs   []box.Violation // what the call breaks if name is a command
}

func (fs *funcState) lookup(name string) *funcDef {
	if ds := fs.byName[name]; len(ds) > 0 {
		return ds[len(ds)-1]
	}
	return nil
}

func (fs *funcState) push(d *funcDef) {
	if fs.byName == nil {
		fs.byName = map[string][]*funcDef{}
	}
	fs.scope = append(fs.scope, d)
	fs.byName[d.name] = append(fs.byName[d.name], d)
	fs.gen++
}

func (fs *funcState) popTo(n int) {
	if len(fs.scope) <= n {
		return
	}
	for _, d := range fs.scope[n:] {
		ds := fs.byName[d.name]
		fs.byName[d.name] = ds[:len(ds)-1]
	}
	clear(fs.scope[n:])
	fs.scope = fs.scope[:n]
	fs.gen++
}

// funcDecl checks the body of a function definition and returns the function.
// The function is defined inside its own body, for recursion.
func (w *walker) funcDecl(fd *syntax.FuncDecl) *funcDef {
	d := &funcDef{}
	if fd.Name != nil {
		d.name = fd.Name.Value
	}
	w.fs.defs = append(w.fs.defs, d)
	mark := len(w.fs.scope)
	if d.name != "" {
		w.fs.push(d)
	}
	saved := w.cur
	w.cur = d
	w.stmt(fd.Body)
	w.cur = saved
	w.fs.popTo(mark)
	return d
}

// visit settles a call of d made in the main flow: the calls of its body are
// resolved against the functions defined now, recursively.
func (w *walker) visit(d *funcDef) {
	fs := w.fs
	if d.seenGen == fs.gen+1 {
		return // already settled against this same scope
	}
	d.seenGen = fs.gen + 1
	d.called = true
	if w.c.visits++; w.c.visits > maxVisits {
		// A pathological web of functions: stop following calls and check the
		// body's calls as commands.
		if w.c.visits == maxVisits+1 {
			w.c.emit(RuleShellWrapper, w.base, "the script calls functions in too many ways for profile %q to follow; simplify how its functions call each other", w.c.profile)
		}
		for _, c := range d.cands {
			w.c.out = append(w.c.out, c.vs...)
		}
		return
	}
	for _, e := range d.edges {
		w.visit(e)
	}
	for _, c := range d.cands {
		if t := fs.lookup(c.name); t != nil {
			fs.shadowed = append(fs.shadowed, c.vs...)
			w.visit(t)
			continue
		}
		w.c.out = append(w.c.out, c.vs...)
	}
}

// finish reports what is still open when a script ends: bodies never called are
// checked as commands, and if functions can be undefined, so are the calls that
// were resolved as function calls.
func (w *walker) finish() {
	fs := w.fs
	for _, d := range fs.defs {
		if d.called {
			continue
		}
		for _, c := range d.cands {
			w.c.out = append(w.c.out, c.vs...)
		}
	}
	if fs.unsafe {
		w.c.out = append(w.c.out, fs.shadowed...)
	}
}

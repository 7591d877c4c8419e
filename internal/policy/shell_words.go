package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// arg is one word of a command line as the check sees it.
type arg struct {
	val    string // the word after quote removal; meaningful only when static
	prefix string // the static text before the first expansion or glob
	static bool   // the word's value is known before the script runs
	split  bool   // has an unquoted expansion, so it may become several words
	text   string // source text, for messages
	line   int
}

func (w *walker) arg(word *syntax.Word) arg {
	a := wordValue(word)
	a.text = w.snippet(word)
	a.line = w.line(word.Pos())
	return a
}

// literal makes an arg for a value cut out of a static word (sed -e's/x/y/).
func literal(val string, from arg) arg {
	from.val, from.prefix, from.static, from.split = val, val, true, false
	return from
}

// wordValue performs quote removal on word when it has no expansions. Globs and
// brace expansions make a word non-static; tildes are kept as they are (they only
// change the directory part of a path, never its base name).
func wordValue(word *syntax.Word) arg {
	if len(word.Parts) == 1 { // the common cases, without copying
		switch p := word.Parts[0].(type) {
		case *syntax.Lit:
			if !strings.ContainsAny(p.Value, "\\*?[{") {
				return arg{val: p.Value, prefix: p.Value, static: true}
			}
		case *syntax.SglQuoted:
			if !p.Dollar {
				return arg{val: p.Value, prefix: p.Value, static: true}
			}
		}
	}
	var sb strings.Builder
	a := arg{static: true}
	dyn := func() {
		if a.static {
			a.prefix = sb.String()
			a.static = false
		}
	}
	for _, p := range word.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			s, glob := unquotedLit(p.Value)
			if glob >= 0 && a.static {
				a.prefix = sb.String() + s[:glob]
				a.static = false
			}
			sb.WriteString(s)
		case *syntax.SglQuoted:
			if p.Dollar {
				dyn() // $'...' escapes could spell anything; treat as computed
				continue
			}
			sb.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				dyn()
				continue
			}
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					sb.WriteString(unescape(l.Value, "$`\"\\\n"))
				} else {
					dyn()
				}
			}
		case *syntax.ParamExp, *syntax.CmdSubst, *syntax.ArithmExp:
			dyn()
			a.split = true
		default: // process substitution, extended glob, brace expansion
			dyn()
		}
	}
	if a.static {
		a.val = sb.String()
		a.prefix = a.val
	}
	return a
}

// unquotedLit removes backslash quoting from an unquoted literal and returns the
// index in the result of the first unescaped glob or brace expansion, or -1.
func unquotedLit(raw string) (string, int) {
	if !strings.ContainsAny(raw, "\\*?[{") {
		return raw, -1
	}
	var sb strings.Builder
	glob := -1
	lastClose := strings.LastIndexByte(raw, ']')
	brace, braceList := -1, false // an open '{' in the output, and whether a ',' or '..' followed it
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\\' && i+1 < len(raw) {
			i++
			sb.WriteByte(raw[i])
			continue
		}
		if glob < 0 {
			switch c {
			case '*', '?':
				glob = sb.Len()
			case '[':
				if lastClose > i {
					glob = sb.Len()
				}
			case '{':
				brace, braceList = sb.Len(), false
			case ',':
				braceList = braceList || brace >= 0
			case '.':
				braceList = braceList || brace >= 0 && i+1 < len(raw) && raw[i+1] == '.'
			case '}':
				if brace >= 0 && braceList {
					glob = brace
				}
				brace = -1
			}
		}
		sb.WriteByte(c)
	}
	return sb.String(), glob
}

// unescape removes the backslash before the characters in special, as bash does
// inside double quotes and unquoted here-documents; a backslash-newline vanishes.
func unescape(raw, special string) string {
	if !strings.Contains(raw, "\\") {
		return raw
	}
	var sb strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\\' && i+1 < len(raw) && strings.IndexByte(special, raw[i+1]) >= 0 {
			i++
			if raw[i] != '\n' {
				sb.WriteByte(raw[i])
			}
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// commandBase returns the name a command word is judged by, and whether the word
// is a path. /usr/bin/curl and ./curl are judged as curl.
func commandBase(name string) (string, bool) {
	if !strings.Contains(name, "/") {
		return name, false
	}
	t := strings.TrimRight(name, "/")
	if t == "" {
		return name, true
	}
	return t[strings.LastIndexByte(t, '/')+1:], true
}

// stdinScript returns what the command reads on standard input when the statement
// gives it a here-document or here-string: its text, the line of the text, and
// whether that text is known before the script runs. found is false when standard
// input is anything else (a file, a pipe, the caller's input).
func (w *walker) stdinScript(redirs []*syntax.Redirect) (text string, line int, static, found bool) {
	var last *syntax.Redirect
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			last = r
		}
	}
	if last == nil {
		return "", 0, false, false
	}
	switch last.Op {
	case syntax.WordHdoc:
		a := w.arg(last.Word)
		return a.val + "\n", a.line, a.static, true
	case syntax.Hdoc, syntax.DashHdoc:
		if last.Hdoc == nil {
			return "", w.line(last.OpPos), true, true // empty here-document
		}
		quoted := false
		for _, p := range last.Word.Parts {
			if l, ok := p.(*syntax.Lit); !ok || strings.Contains(l.Value, "\\") {
				quoted = true
			}
		}
		var sb strings.Builder
		for _, p := range last.Hdoc.Parts {
			l, ok := p.(*syntax.Lit)
			if !ok {
				return "", w.line(last.Hdoc.Pos()), false, true
			}
			if quoted {
				sb.WriteString(l.Value)
			} else {
				sb.WriteString(unescape(l.Value, "$`\\\n"))
			}
		}
		return sb.String(), w.line(last.Hdoc.Pos()), true, true
	}
	return "", 0, false, false
}

// stdinFromFile reports whether the last redirection of standard input reads a
// file (< f, <> f, <&3) rather than a here-document or the caller's input.
func stdinFromFile(redirs []*syntax.Redirect) bool {
	file := false
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn:
			file = true
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			file = false
		}
	}
	return file
}

package filter

import (
	"bytes"
	"regexp"
)

// rule is a Rule ready to run.
type rule struct {
	name     string
	marker   string
	parts    []part
	notAfter [256]bool
	checkPre bool // notAfter has a byte in it
	tail     *regexp.Regexp
	// wholeFrame marks user rules: their Pattern is matched with FindAll over the
	// whole frame, so that assertions such as \b see their real context.
	wholeFrame bool
}

// part is one regexp of a built-in rule, with what makes finding it fast. Which
// matches it has is defined by findReference (in the tests) and found by findPart.
type part struct {
	re     *regexp.Regexp
	secret int // index of the "secret" group in re, or -1

	// starts, when set, are literals one of which begins every match (ASCII case
	// folded if fold, and then written in lower case). The part is tried, with
	// anchored = `\A(?:re)`, only where one occurs; id numbers it among such parts.
	starts   []string
	fold     bool
	anchored *regexp.Regexp
	id       int
	// pre, if set, is a cheap necessary condition for a match at f[i:].
	pre func(f []byte, i int) bool

	// infix, when around is set, is a byte every match contains exactly once, with
	// only bytes of around[0] before it and only bytes of around[1] after it.
	infix  byte
	around *[2][256]bool
}

// defaultTail continues an overflowing match of a user rule: to the next white space.
var defaultTail = regexp.MustCompile(`\A\S*`)

func compileRule(ru Rule) rule {
	name := ru.Name
	if name == "" {
		name = "unnamed"
	}
	out := rule{name: name, marker: "[REDACTED:" + name + "]"}
	impl := ru.impl
	if impl == nil || impl.pattern != ru.Pattern {
		out.parts = []part{{re: ru.Pattern, secret: ru.Pattern.SubexpIndex("secret")}}
		out.tail = defaultTail
		out.wholeFrame = true
		return out
	}
	for i := 0; i < len(impl.notAfter); i++ {
		out.notAfter[impl.notAfter[i]] = true
		out.checkPre = true
	}
	out.tail = impl.tail
	for i, re := range impl.parts {
		h := impl.hints[i]
		p := part{re: re, secret: re.SubexpIndex("secret"), starts: h.starts, fold: h.fold, pre: h.pre}
		if p.starts == nil {
			if prefix, _ := re.LiteralPrefix(); prefix != "" {
				p.starts = []string{prefix}
			}
		}
		switch {
		case p.starts != nil:
			p.anchored = regexp.MustCompile(`\A(?:` + re.String() + `)`)
		case h.infix != 0:
			p.infix, p.around = h.infix, new([2][256]bool)
			for j := 0; j < len(h.before); j++ {
				p.around[0][h.before[j]] = true
			}
			for j := 0; j < len(h.after); j++ {
				p.around[1][h.after[j]] = true
			}
		}
		if p.anchored == nil && (out.checkPre || p.pre != nil) {
			panic("filter: built-in part " + re.String() + " has notAfter or pre but no start")
		}
		out.parts = append(out.parts, p)
	}
	return out
}

// startIndex finds the starts of every part in one pass over a frame: bigram maps the
// first two bytes of a start (in every case, if folded) to 1 + an index in groups,
// which lists the entries to compare there; lastByte lists one-byte starts, for the
// last byte of a frame.
type startIndex struct {
	entries  []startEntry
	bigram   *[1 << 16]uint16
	groups   [][]int
	lastByte [256][]int
	parts    int
}

type startEntry struct {
	s    string
	fold bool
	id   int
}

func indexStarts(rules []rule) startIndex {
	var x startIndex
	lists := map[int][]int{}
	for k := range rules {
		for pi := range rules[k].parts {
			p := &rules[k].parts[pi]
			if p.anchored == nil {
				continue
			}
			p.id = x.parts
			x.parts++
			for _, s := range p.starts {
				e := len(x.entries)
				x.entries = append(x.entries, startEntry{s: s, fold: p.fold, id: p.id})
				for _, c0 := range cases(s[0], p.fold) {
					if len(s) == 1 {
						x.lastByte[c0] = append(x.lastByte[c0], e)
						for c1 := 0; c1 < 256; c1++ {
							lists[int(c0)<<8|c1] = append(lists[int(c0)<<8|c1], e)
						}
						continue
					}
					for _, c1 := range cases(s[1], p.fold) {
						lists[int(c0)<<8|int(c1)] = append(lists[int(c0)<<8|int(c1)], e)
					}
				}
			}
		}
	}
	if len(lists) > 0 {
		x.bigram = new([1 << 16]uint16)
		for bg, es := range lists {
			x.groups = append(x.groups, es)
			x.bigram[bg] = uint16(len(x.groups))
		}
	}
	return x
}

// cases returns c, and its other ASCII case if fold.
func cases(c byte, fold bool) []byte {
	switch {
	case fold && 'a' <= c && c <= 'z':
		return []byte{c, c - 'a' + 'A'}
	case fold && 'A' <= c && c <= 'Z':
		return []byte{c, c - 'A' + 'a'}
	}
	return []byte{c}
}

// scanStarts records in sc.occ, by part id and in order, where the parts' starts
// occur in f: one table lookup per byte, and a comparison only where the first two
// bytes of a start occur. That is several times faster than one bytes.Index per start.
func (sc *scanner) scanStarts(f []byte) {
	x := &sc.r.starts
	if x.bigram == nil {
		return
	}
	if sc.occ == nil {
		sc.occ = make([][]int, x.parts)
	}
	for id := range sc.occ {
		sc.occ[id] = sc.occ[id][:0]
	}
	tbl := x.bigram
	for i := 0; i+1 < len(f); i++ {
		g := tbl[uint16(f[i])<<8|uint16(f[i+1])]
		if g == 0 {
			continue
		}
		for _, e := range x.groups[g-1] {
			if ent := &x.entries[e]; hasStart(f[i:], ent.s, ent.fold) {
				sc.found(ent.id, i)
			}
		}
	}
	if n := len(f); n > 0 {
		for _, e := range x.lastByte[f[n-1]] {
			sc.found(x.entries[e].id, n-1)
		}
	}
}

func (sc *scanner) found(id, i int) {
	o := sc.occ[id]
	if len(o) == 0 || o[len(o)-1] != i {
		sc.occ[id] = append(o, i)
	}
}

// hasStart reports whether b begins with s (a lower-case s, ASCII case folded, if fold).
func hasStart(b []byte, s string, fold bool) bool {
	if len(b) < len(s) {
		return false
	}
	if !fold {
		return string(b[:len(s)]) == s
	}
	for i := 0; i < len(s); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// findRule adds the matches of rule k in f to the candidates.
func (sc *scanner) findRule(k int, f []byte) {
	ru := &sc.r.rules[k]
	pri := len(sc.r.secrets) + k
	for pi := range ru.parts {
		p := &ru.parts[pi]
		switch {
		case ru.wholeFrame:
			if p.secret >= 0 {
				for _, loc := range p.re.FindAllSubmatchIndex(f, -1) {
					sc.addLoc(0, loc, p.secret, pri, k)
				}
			} else {
				for _, loc := range p.re.FindAllIndex(f, -1) {
					sc.addLoc(0, loc, -1, pri, k)
				}
			}
		case p.anchored != nil:
			sc.findAnchored(ru, p, f, pri, k)
		case p.around != nil:
			sc.findInfix(p, f, pri, k)
		default:
			sc.findPlain(p, f, pri, k)
		}
	}
}

// The matches of a built-in part are: the leftmost match at or after q (at first 0);
// if a byte of notAfter precedes it, it is dropped and the search starts again one
// byte after its start; otherwise it is kept and the search goes on from its end.
// A part never starts with an assertion, so searching f[q:] finds what searching f
// from q would. findPlain implements this as written; findAnchored and findInfix find
// the same matches faster.
//
// Cost: Go's regexp engine is linear in the text it is given. findPlain and findInfix
// give it each byte once. findAnchored gives it the text from each start that passes
// notAfter and pre, and stops at the end of a match; a try that fails costs at most
// the part's match length (every built-in part fails within a bounded prefix), except
// for jwt, whose unbounded first run is in its notAfter set, so that a start inside
// the run is never tried. So a frame costs time linear in its length, whatever the
// output.

func (sc *scanner) findPlain(p *part, f []byte, pri, k int) {
	for q := 0; q < len(f); {
		loc := find(p, p.re, f[q:])
		if loc == nil {
			return
		}
		sc.addLoc(q, loc, p.secret, pri, k)
		q += max(loc[1], loc[0]+1)
	}
}

// findAnchored tries the part at each of its starts where the byte before is allowed
// and pre holds: "task-..." is not even tried as "sk-...".
func (sc *scanner) findAnchored(ru *rule, p *part, f []byte, pri, k int) {
	q := 0
	for _, i := range sc.occ[p.id] {
		if i < q || (ru.checkPre && sc.before(f, i, ru)) || (p.pre != nil && !p.pre(f, i)) {
			continue
		}
		if loc := find(p, p.anchored, f[i:]); loc != nil {
			sc.addLoc(i, loc, p.secret, pri, k)
			q = i + max(loc[1], 1)
		}
	}
}

// findInfix searches around each infix byte only: a match using the infix at a lies
// in the run of around[0] bytes before a (not before q) and the run of around[1]
// bytes after it, and no match can start before that run without an earlier infix.
func (sc *scanner) findInfix(p *part, f []byte, pri, k int) {
	q := 0
	for a := 0; a < len(f); a++ {
		j := bytes.IndexByte(f[a:], p.infix)
		if j < 0 {
			return
		}
		a += j
		s, e := a, a+1
		for s > q && p.around[0][f[s-1]] {
			s--
		}
		for e < len(f) && p.around[1][f[e]] {
			e++
		}
		if loc := find(p, p.re, f[s:e]); loc != nil {
			sc.addLoc(s, loc, p.secret, pri, k)
			q = s + loc[1]
			a = max(a, q-1)
		}
	}
}

// find runs re on b, with submatches if the part redacts a group.
func find(p *part, re *regexp.Regexp, b []byte) []int {
	if p.secret >= 0 {
		return re.FindSubmatchIndex(b)
	}
	return re.FindIndex(b)
}

// addLoc records the match loc found in f[off:]; secret is the index of the group to
// redact, or -1.
func (sc *scanner) addLoc(off int, loc []int, secret, pri, k int) {
	rs, re := -1, -1
	if secret >= 0 && loc[2*secret] >= 0 {
		rs, re = off+loc[2*secret], off+loc[2*secret+1]
	}
	sc.add(off+loc[0], off+loc[1], rs, re, pri, k)
}

// before reports whether the byte before position a of f is one the rule's matches
// may not follow.
func (sc *scanner) before(f []byte, a int, ru *rule) bool {
	if a > 0 {
		return ru.notAfter[f[a-1]]
	}
	return sc.prev >= 0 && ru.notAfter[sc.prev]
}

// add records a candidate; rs < 0 means the whole match is redacted.
func (sc *scanner) add(ms, me, rs, re, pri, k int) {
	if rs < 0 {
		rs, re = ms, me
	}
	if rs >= re {
		return
	}
	sc.cands = append(sc.cands, cand{ms: ms, me: me, rs: rs, re: re, pri: pri, rule: k})
}

package filter

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"unicode/utf8"
)

const (
	// MinSecretLen is the shortest exact secret New accepts: shorter values ("true",
	// "admin", a port number) would redact ordinary output everywhere.
	MinSecretLen = 8

	// windowSlack is added to the longest MaxLen to make the window.
	windowSlack = 64
	// minStep is the smallest step; see Redactor.
	minStep = 16 << 10
)

// Redactor applies redaction rules and exact secret values. It is immutable and safe
// for concurrent use.
//
// Its input is cut into frames of step+window bytes, where window is the longest
// MaxLen among its rules and secrets plus windowSlack, and step is max(16 KiB,
// 2*window). Redact and Stream run the same frame machine (see the package
// documentation), which is why they agree byte for byte.
type Redactor struct {
	rules   []rule
	secrets [][]byte
	window  int
	step    int
	starts  startIndex
}

// New builds a Redactor from rules and exact secret values (API tokens the server
// holds, values of secret environment variables). Every occurrence of a secret is
// replaced by "[REDACTED:secret]". Secrets shorter than MinSecretLen (8 bytes) are
// ignored: they would match ordinary output too often. Rules with a nil Pattern are
// ignored.
func New(rules []Rule, secrets []string) *Redactor {
	return newRedactor(rules, secrets, 0, 0)
}

// newRedactor is New with the frame geometry given; zero values take the defaults.
// Tests use tiny frames to exercise frame boundaries on short inputs.
func newRedactor(rules []Rule, secrets []string, step, window int) *Redactor {
	r := &Redactor{}
	longest := 0
	for _, ru := range rules {
		if ru.Pattern == nil {
			continue
		}
		n := ru.MaxLen
		if n <= 0 {
			n = DefaultMaxLen
		}
		longest = max(longest, min(n, MaxRuleLen))
		r.rules = append(r.rules, compileRule(ru))
	}
	seen := map[string]bool{}
	for _, s := range secrets {
		if len(s) < MinSecretLen || seen[s] {
			continue
		}
		seen[s] = true
		r.secrets = append(r.secrets, []byte(s))
		longest = max(longest, len(s))
	}
	r.starts = indexStarts(r.rules)
	r.window = longest + windowSlack
	r.step = max(minStep, 2*r.window)
	if window > 0 {
		r.window = window
	}
	if step > 0 {
		r.step = step
	}
	return r
}

// frameSize is the number of bytes a non-final frame holds.
func (r *Redactor) frameSize() int { return r.step + r.window }

// Redact returns s with every match replaced, and the number of replacements.
func (r *Redactor) Redact(s string) (string, int) {
	if len(s) == 0 {
		return s, 0
	}
	var b strings.Builder
	n := r.run(r.newScanner(), []byte(s), func(p []byte) {
		if b.Cap() == 0 {
			b.Grow(len(s) + 64)
		}
		b.Write(p)
	})
	if n == 0 {
		return s, 0 // no marker, so no byte changed: a continuation follows a marker
	}
	return b.String(), n
}

// RedactByRule is Redact, with the replacements counted by rule name ("secret" for
// exact secret values); the map is nil when nothing was replaced.
func (r *Redactor) RedactByRule(s string) (string, map[string]int) {
	if len(s) == 0 {
		return s, nil
	}
	sc := r.newScanner()
	var b strings.Builder
	n := r.run(sc, []byte(s), func(p []byte) { b.Write(p) })
	if n == 0 {
		return s, nil
	}
	return b.String(), sc.byRule()
}

// byRule names the scanner's counts.
func (sc *scanner) byRule() map[string]int {
	var out map[string]int
	for i, c := range sc.counts {
		if c == 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		name := SecretRuleName
		if i < len(sc.r.rules) {
			name = sc.r.rules[i].name
		}
		out[name] += c
	}
	return out
}

// SecretRuleName is the rule name counted for exact secret values.
const SecretRuleName = "secret"

// run runs the frame machine over b, calls emit with each frame's output, and
// returns the number of replacements.
func (r *Redactor) run(sc *scanner, b []byte, emit func([]byte)) int {
	var out []byte
	total := 0
	for fs := r.frameSize(); len(b) >= fs; {
		var used, n int
		out, used, n = sc.step(b[:fs], false, out[:0])
		emit(out)
		b = b[used:]
		total += n
	}
	out, _, n := sc.step(b, true, out[:0])
	emit(out)
	return total + n
}

// scanner is the frame machine: the state carried from one frame to the next.
type scanner struct {
	r *Redactor
	// prev is the byte before the frame, or -1 at the start of the input.
	prev int
	// over is the rule whose match ran to the end of the last frame and continues
	// into this one, or -1.
	over int

	cands []cand
	occ   [][]int // by part id: where its starts occur in the frame
	// counts are the markers written, by rule index; the last counts secrets.
	counts []int
}

// cand is one candidate redaction.
type cand struct {
	ms, me int // the whole match
	rs, re int // the bytes to replace
	pri    int // precedence between equal spans: continuation, secrets, rules
	rule   int // index in Redactor.rules, or -1 for a secret
	cont   bool
}

func (r *Redactor) newScanner() *scanner {
	return &scanner{r: r, prev: -1, over: -1}
}

// step processes frame f: it finds every candidate in f, chooses how many bytes of f
// are final (all of them if final is set, which the last frame of the input is),
// appends those bytes to out with their candidates replaced, and returns out, the
// number of bytes consumed and the number of markers written. A non-final frame is
// always exactly frameSize bytes long, so what step decides depends only on the
// input, never on how it was chunked.
func (sc *scanner) step(f []byte, final bool, out []byte) ([]byte, int, int) {
	r := sc.r
	sc.cands = sc.cands[:0]

	// A match that overflowed the last frame goes on as long as its tail does.
	if k := sc.over; k >= 0 {
		sc.over = -1
		n := 0
		if t := r.rules[k].tail; t != nil {
			if loc := t.FindIndex(f); loc != nil {
				n = loc[1]
			}
		}
		if n > 0 && n == len(f) && !final {
			sc.over = k
			sc.prev = int(f[n-1])
			return out, n, 0
		}
		if n > 0 {
			sc.cands = append(sc.cands, cand{ms: 0, me: n, rs: 0, re: n, pri: -1, rule: k, cont: true})
		}
	}
	for i, s := range r.secrets {
		for off := 0; ; {
			j := bytes.Index(f[off:], s)
			if j < 0 {
				break
			}
			a := off + j
			sc.cands = append(sc.cands, cand{ms: a, me: a + len(s), rs: a, re: a + len(s), pri: i, rule: -1})
			off = a + len(s)
		}
	}
	sc.scanStarts(f)
	for k := range r.rules {
		sc.findRule(k, f)
	}

	cut := len(f)
	if !final {
		cut = sc.cut(f)
	}
	out, n := sc.emit(f, cut, out)
	if cut > 0 {
		sc.prev = int(f[cut-1])
	}
	return out, cut, n
}

// cut chooses where a non-final frame ends. It starts from the preferred cut c0
// (step, or just after a newline in the last quarter of the step). If a match, or a
// chain of overlapping matches (a component), spans c0, the cut moves back to the
// component's start, so the next frame sees it whole; a component that starts in the
// first quarter of the step is too long for that and the cut moves forward to its
// end instead. A component that reaches the end of the frame may be a match cut
// short: its rule's tail continues it in the next frame (overflow).
func (sc *scanner) cut(f []byte) int {
	step := sc.r.step
	c0 := preferredCut(f, step)
	slices.SortFunc(sc.cands, func(a, b cand) int { return cmp.Compare(a.ms, b.ms) })
	s, e := -1, -1
	for _, c := range sc.cands {
		if c.ms < e {
			e = max(e, c.me)
			continue
		}
		if s < c0 && c0 < e {
			break
		}
		if c.ms >= c0 {
			s, e = -1, -1
			break
		}
		s, e = c.ms, c.me
	}
	if !(s < c0 && c0 < e) {
		return c0
	}
	if s >= max(1, step/4) {
		return s
	}
	if e == len(f) {
		best := -1
		for i, c := range sc.cands {
			if c.rule >= 0 && !c.cont && c.re == len(f) && c.ms >= s {
				if best < 0 || c.rs < sc.cands[best].rs || (c.rs == sc.cands[best].rs && c.pri < sc.cands[best].pri) {
					best = i
				}
			}
		}
		if best >= 0 {
			sc.over = sc.cands[best].rule
		}
	}
	return e
}

// preferredCut is where a frame ends if no match is in the way: just after the last
// newline in the last quarter of the step (so that (?m)^ in user rules sees the real
// start of a line), else at the step, moved back to the start of a UTF-8 sequence.
func preferredCut(f []byte, step int) int {
	c := min(step, len(f)-1)
	lo := c - c/4
	if i := bytes.LastIndexByte(f[lo:c], '\n'); i >= 0 {
		return lo + i + 1
	}
	for k := 0; k < 3 && c > 1 && !utf8.RuneStart(f[c]); k++ {
		c--
	}
	return max(c, 1)
}

// emit appends f[:cut] to out with the candidates that start before cut replaced.
// Overlapping candidates merge into one redaction, named after the candidate that
// starts first (then the longest, then the first secret, then the first rule).
func (sc *scanner) emit(f []byte, cut int, out []byte) ([]byte, int) {
	slices.SortFunc(sc.cands, func(a, b cand) int {
		if c := cmp.Compare(a.rs, b.rs); c != 0 {
			return c
		}
		if c := cmp.Compare(b.re, a.re); c != 0 {
			return c
		}
		return cmp.Compare(a.pri, b.pri)
	})
	pos, n := 0, 0
	for i := 0; i < len(sc.cands); {
		first := sc.cands[i]
		if first.rs >= cut {
			break
		}
		end, cont := first.re, first.cont
		j := i + 1
		for ; j < len(sc.cands) && sc.cands[j].rs < end; j++ {
			end = max(end, sc.cands[j].re)
			cont = cont || sc.cands[j].cont
		}
		end = min(end, cut) // cut never falls inside a candidate; keep it so
		out = append(out, f[pos:first.rs]...)
		if !cont {
			idx := len(sc.r.rules)
			if first.rule >= 0 {
				out = append(out, sc.r.rules[first.rule].marker...)
				idx = first.rule
			} else {
				out = append(out, "[REDACTED:secret]"...)
			}
			if sc.counts == nil {
				sc.counts = make([]int, len(sc.r.rules)+1)
			}
			sc.counts[idx]++
			n++
		}
		pos, i = end, j
	}
	return append(out, f[pos:cut]...), n
}

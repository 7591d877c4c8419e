package filter

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// referenceFind is the definition findPart implements, written plainly: the leftmost
// match at or after q; dropped, and searched again one byte later, if a byte of
// notAfter precedes it; kept otherwise, and searched again from its end.
func referenceFind(ru *rule, p *part, f []byte, prev int) []cand {
	var out []cand
	for q := 0; q < len(f); {
		loc := p.re.FindSubmatchIndex(f[q:])
		if loc == nil {
			break
		}
		ms, me := q+loc[0], q+loc[1]
		b := prev
		if ms > 0 {
			b = int(f[ms-1])
		}
		if ru.checkPre && b >= 0 && ru.notAfter[b] {
			q = ms + 1
			continue
		}
		rs, re := ms, me
		if p.secret >= 0 && loc[2*p.secret] >= 0 {
			rs, re = q+loc[2*p.secret], q+loc[2*p.secret+1]
		}
		if rs < re {
			out = append(out, cand{ms: ms, me: me, rs: rs, re: re})
		}
		q = max(me, ms+1)
	}
	return out
}

// checkFind compares findRule with referenceFind on f, for every built-in rule.
func checkFind(t *testing.T, r *Redactor, f []byte, prev int) {
	t.Helper()
	for k := range r.rules {
		ru := &r.rules[k]
		sc := r.newScanner()
		sc.prev = prev
		sc.scanStarts(f)
		sc.findRule(k, f)
		got := sc.cands
		for i := range got {
			got[i].pri, got[i].rule = 0, 0
		}
		var want []cand
		for pi := range ru.parts {
			want = append(want, referenceFind(ru, &ru.parts[pi], f, prev)...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s on %.200q (prev %d):\n got %v\nwant %v", ru.name, f, prev, got, want)
		}
	}
}

var allRules = New(append(DefaultRules(), OptInRules()...), nil)

func TestFindMatchesReference(t *testing.T) {
	inputs := []string{
		corpus(),
		strings.Repeat("x"+anthropicKey, 20),
		strings.Repeat("eyJ-", 500) + "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.a",
		strings.Repeat("eyJ", 400) + "." + strings.Repeat(".eyJhbGciOiJIUzI1NiJ9.eyJab", 20),
		strings.Repeat("aAKIAIOSFODNN7EXAMPLE ", 50) + awsAccess,
		strings.Repeat("/x/home/a ", 50) + "/home/b",
		"é" + githubPAT + "\xc3" + githubOAuth + "_" + githubPAT,
		"://a:b@ ://:@ ://x:y ://u:p:q@h :// x:y@ http://u:p@h/ ftp://:pw@h ://@",
		"sk-sk-sk-proj-sk-proj-aaaaaaaaaaaaaaaaaaaaaaaaaaaa sk-ant-sk-ant-bbbbbbbbbbbbbbbbbbbbbbbbbbbb",
		"a@b.co @@ x@y @x.io a.b@c.d.ef@g.hi ..@..aa user@@host.com é@x.org Q@W.E.RT",
		"PassWord=abcdefgh123 ſecret=abcdefghijk Api_Key: 'zzzzzzzzzz' TOKEN=x client-secret:=yyyyyyyyyyyy",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 30; i++ {
		inputs = append(inputs, randomOutput(rng, 20<<10))
	}
	for _, in := range inputs {
		for _, prev := range []int{-1, 'a', ' '} {
			checkFind(t, allRules, []byte(in), prev)
		}
	}
}

func FuzzFindMatchesReference(f *testing.F) {
	for _, s := range corpusLines() {
		f.Add([]byte(s), byte(' '))
	}
	f.Add([]byte("://x:y@ eyJ-eyJaaaaaaaa.eyJaaaaaaaa. xsk-"+openaiLegacy), byte('x'))
	f.Fuzz(func(t *testing.T, data []byte, prev byte) {
		p := int(prev)
		if prev == 0 {
			p = -1
		}
		checkFind(t, allRules, data, p)
	})
}

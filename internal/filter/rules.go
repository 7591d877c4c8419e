package filter

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
)

// DefaultMaxLen is the MaxLen NewRule gives a rule configured with max_len 0.
const DefaultMaxLen = 256

// MaxRuleLen bounds Rule.MaxLen: the longest match a stream must see whole decides how
// much output every stream holds back (see Redactor.Stream).
const MaxRuleLen = 1 << 20

// Rule is one redaction rule: every match of Pattern is replaced by
// "[REDACTED:<Name>]". If Pattern has a capture group named "secret", only the text
// of that group is replaced and the rest of the match (the context that identified
// the secret, such as "aws_secret_access_key=") is kept.
//
// MaxLen is the longest match, in bytes, that a Stream is guaranteed to see whole
// however the output is chunked; a longer match is redacted up to the edge of the
// window and continued from there (see "Overflow" in the package documentation). A
// MaxLen of 0 or less counts as DefaultMaxLen.
//
// Build rules with NewRule, or take them from DefaultRules, OptInRules or RuleByName.
// The built-in rules carry tuning that is not visible in Pattern (a required
// boundary before the match, fast literal prefixes, the overflow continuation); it is
// dropped if Pattern is replaced.
type Rule struct {
	Name    string
	Pattern *regexp.Regexp
	MaxLen  int

	impl *ruleImpl
}

// ruleImpl is the tuning of a built-in rule.
type ruleImpl struct {
	// pattern is the Pattern the tuning was made for.
	pattern *regexp.Regexp
	// parts are matched one by one instead of Pattern (their alternation), each
	// with its hint. No part starts with an assertion, so a part matches the same
	// wherever a search begins.
	parts []*regexp.Regexp
	hints []partHint
	// notAfter lists the ASCII bytes that may not directly precede a match, so that
	// "task-..." is not read as an OpenAI key "sk-...". Empty means no constraint.
	notAfter string
	// tail matches the continuation of a match that overflowed the window, at the
	// start of the next frame. Nil means the rule's matches cannot overflow.
	tail *regexp.Regexp
}

// partHint tells the matcher how to find a part fast (see match.go). The zero hint
// uses the regexp's literal prefix, if it has one.
type partHint struct {
	// starts are literals one of which begins every match; fold: compared
	// ASCII-case-insensitively (written in lower case).
	starts []string
	fold   bool
	// pre is a cheap necessary condition for a match at f[i:] (a start is at i).
	pre func(f []byte, i int) bool
	// infix is a byte every match contains once, with only bytes of before before
	// it and only bytes of after after it.
	infix         byte
	before, after string
}

// wordBytes are the bytes of a "word" in the sense of \b: a built-in rule with
// notAfter = wordBytes only matches at the start of a word.
const wordBytes = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"

// builtin describes one rule of DefaultRules or OptInRules.
type builtin struct {
	name     string
	parts    []string
	hints    []partHint // by part; missing entries are zero
	maxLen   int
	notAfter string
	tail     string // "" for rules whose matches are bounded
}

// pemBody matches the inside of a PEM block: base64, headers such as
// "Proc-Type: 4,ENCRYPTED" and "DEK-Info: AES-128-CBC,...", and the escaped "\n" of a
// key embedded in JSON. A '-' must be followed by a letter or digit, so the body stops
// at "-----END".
const pemBody = `(?:[A-Za-z0-9+/=\s:,.\\]|-[A-Za-z0-9])*`

// pemEnd is the optional footer: a block without one (truncated, or longer than the
// window) is still redacted, up to the first byte that cannot be in a body.
const pemEnd = `(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?`

// awsSecretValue follows one of the key names of an AWS secret access key, as written
// in ~/.aws/credentials, env output, JSON (STS) and Python or YAML dicts.
const awsSecretValue = `["']?\s{0,8}(?:=>|=|:)\s{0,8}["']?(?P<secret>[A-Za-z0-9/+]{40}[A-Za-z0-9/+=]{0,60})`

// defaultRules, in precedence order: when two matches start at the same byte and are
// as long, the earlier rule names the redaction. Specific token formats come before
// url_credentials, so "https://x:ghp_...@github.com" reads [REDACTED:github_token].
var defaultRules = []builtin{
	{
		name:   "private_key",
		parts:  []string{`-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----` + pemBody + pemEnd},
		maxLen: 4096, // a 4096-bit RSA key in PEM is about 3.3 KB; longer ones overflow safely
		tail:   pemBody + pemEnd,
	},
	{
		name:     "anthropic_key",
		parts:    []string{`sk-ant-[A-Za-z0-9_-]{20,}`},
		maxLen:   256,
		notAfter: wordBytes,
		tail:     `[A-Za-z0-9_-]*`,
	},
	{
		// Legacy keys are "sk-" and 48 letters and digits; project, service-account
		// and admin keys carry a prefix and may contain '-' and '_'. "sk-ant-" does
		// not match (it is anthropic_key): "ant" is followed by '-'.
		name:     "openai_key",
		parts:    []string{`sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20,})`},
		maxLen:   512,
		notAfter: wordBytes,
		tail:     `[A-Za-z0-9_-]*`,
	},
	{
		name:     "github_token",
		parts:    []string{`gh[pousr]_[A-Za-z0-9]{36,}`, `github_pat_[A-Za-z0-9_]{22,}`},
		maxLen:   255,
		notAfter: wordBytes,
		tail:     `[A-Za-z0-9_]*`,
	},
	{
		name:     "gitlab_token",
		parts:    []string{`gl(?:pat|ptt|dt|rt)-[A-Za-z0-9_-]{20,}(?:\.[A-Za-z0-9_-]+)*`},
		maxLen:   256,
		notAfter: wordBytes,
		tail:     `[A-Za-z0-9_.-]*`,
	},
	{
		name: "slack_token",
		parts: []string{
			`xox[abprs]-[A-Za-z0-9-]{10,}`,
			`hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{8,}`,
		},
		maxLen:   256,
		notAfter: wordBytes,
		tail:     `[A-Za-z0-9_/-]*`,
	},
	{
		// Secret and restricted keys, live or test, and live publishable keys
		// (pk_test_ keys are meant to be public).
		name: "stripe_key",
		parts: []string{
			`sk_(?:live|test)_[A-Za-z0-9]{16,}`,
			`rk_(?:live|test)_[A-Za-z0-9]{16,}`,
			`pk_live_[A-Za-z0-9]{16,}`,
		},
		maxLen:   256,
		notAfter: wordBytes,
		tail:     `[A-Za-z0-9]*`,
	},
	{
		name:     "google_api_key",
		parts:    []string{`AIza[0-9A-Za-z_-]{35}`},
		maxLen:   39,
		notAfter: wordBytes,
	},
	{
		name:     "aws_access_key",
		parts:    []string{`AKIA[0-9A-Z]{16}`, `ASIA[0-9A-Z]{16}`},
		maxLen:   20,
		notAfter: wordBytes,
	},
	{
		// A secret access key is 40 base64 characters with nothing to recognise it
		// by, so the rule needs its name before it; only the value is redacted.
		// No boundary: the name is often inside a longer one (TF_VAR_aws_secret_...).
		name: "aws_secret_key",
		parts: []string{
			`secret(?:_?[Aa]ccess)?_?[Kk]ey` + awsSecretValue,
			`SECRET(?:_?ACCESS)?_?KEY` + awsSecretValue,
			`Secret(?:_?Access)?_?Key` + awsSecretValue,
		},
		maxLen: 192,
	},
	{
		// Header and payload are base64url JSON objects, so both start "eyJ"; the
		// signature may be empty (alg "none") or missing (a token cut short, or
		// with a payload longer than the window: it is redacted all the same).
		// notAfter has '-' too, so an "eyJ" inside a base64url run is never tried:
		// a failed try scans the run after "eyJ", which must not happen once per
		// occurrence in "eyJ-eyJ-eyJ-...".
		name:     "jwt",
		parts:    []string{`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?`},
		maxLen:   4096,
		notAfter: wordBytes + "-",
		tail:     `[A-Za-z0-9_.-]*`,
	},
	{
		// scheme://user:password@host: only the password is redacted. The user part
		// may be empty (redis://:pass@host).
		name:   "url_credentials",
		parts:  []string{`://[^\s/?#@:"'<>]*:(?P<secret>[^\s/?#@"'<>]+)@`},
		hints:  []partHint{{pre: userinfoFollows}},
		maxLen: 512,
		tail:   `[^\s/?#@"'<>]*`,
	},
}

// optInRules are known but off by default: what they match is often legitimate output.
var optInRules = []builtin{
	{
		name:   "email",
		parts:  []string{emailLocal + `+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`},
		hints:  []partHint{{infix: '@', before: emailLocalBytes, after: emailDomainBytes}},
		maxLen: 254,
	},
	{
		// 10/8, 172.16/12, 192.168/16 and fc00::/7 (written in one case).
		name: "private_ip",
		parts: []string{
			`10(?:\.[0-9]{1,3}){3}\b`,
			`172\.(?:1[6-9]|2[0-9]|3[01])(?:\.[0-9]{1,3}){2}\b`,
			`192\.168(?:\.[0-9]{1,3}){2}\b`,
			`fc[0-9a-f]{2}:[0-9a-f:]*[0-9a-f]`,
			`fd[0-9a-f]{2}:[0-9a-f:]*[0-9a-f]`,
			`FC[0-9A-F]{2}:[0-9A-F:]*[0-9A-F]`,
			`FD[0-9A-F]{2}:[0-9A-F:]*[0-9A-F]`,
		},
		maxLen:   64,
		notAfter: wordBytes + ".",
	},
	{
		// Absolute paths under the host's system and home directories; not /tmp or
		// /workspace, which are the box's own.
		name:     "system_path",
		parts:    []string{`/(?:home|root|etc|var|usr|opt|srv|mnt|media|Users|private|proc|sys|boot|run|snap)\b(?:/[A-Za-z0-9._@%+=,~-]*)*`},
		maxLen:   4096,
		notAfter: wordBytes + "/.~-",
		tail:     `[A-Za-z0-9._@%+=,~/-]*`,
	},
	{
		// key = value where the key's name says it is a secret. Only the value is
		// redacted. Noisy ("tokenizer: bert-base"), hence opt-in.
		name:   "generic_secret_assignment",
		parts:  []string{`(?:` + asciiFold(secretWords...) + `)[A-Za-z0-9_-]{0,20}["']?\s{0,8}[:=]\s{0,8}["']?(?P<secret>[^\s"',;]{8,200})`},
		hints:  []partHint{{starts: secretStarts, fold: true}},
		maxLen: 300,
	},
}

// userinfoFollows reports whether the "://" at f[i:] is followed by bytes that may be
// in a userinfo and then '@': url_credentials cannot match otherwise, and most URLs
// fail this test at their first '/'. The scan stops at the next "://" (its '/'), so
// scans never overlap.
func userinfoFollows(f []byte, i int) bool {
	for _, c := range f[i+3:] {
		switch c {
		case '@':
			return true
		case ' ', '\t', '\n', '\f', '\r', '/', '?', '#', '"', '\'', '<', '>':
			return false
		}
	}
	return false
}

// The local part and the domain of an email address.
const (
	emailLocal       = `[A-Za-z0-9._%+-]`
	emailLocalBytes  = wordBytes + ".%+-"
	emailDomainBytes = wordBytes + ".-"
)

// secretWords name a secret in generic_secret_assignment (a '-' is an optional
// separator); secretStarts are their first words.
var (
	secretWords  = []string{"password", "passwd", "pwd", "secret", "token", "api-key", "access-key", "auth-key", "private-key", "client-secret"}
	secretStarts = []string{"passw", "pwd", "secret", "token", "api", "access", "auth", "private", "client"}
)

// asciiFold is the alternation of words, matched ASCII-case-insensitively ((?i)
// would also match "ſecret" with a long s, which the fast path does not look for);
// a '-' in a word is an optional '_' or '-'.
func asciiFold(words ...string) string {
	var alts []string
	for _, w := range words {
		var b strings.Builder
		for _, c := range []byte(w) {
			switch {
			case c == '-':
				b.WriteString(`[_-]?`)
			case 'a' <= c && c <= 'z':
				b.WriteString("[" + string(c) + string(c-'a'+'A') + "]")
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		alts = append(alts, b.String())
	}
	return strings.Join(alts, "|")
}

// The rules are compiled on first use, not at package init: every process of the
// moat binary (the box's init among them) would otherwise pay ~3 ms for regexes only
// the engine needs.
var (
	builtDefault = sync.OnceValue(func() []Rule { return buildAll(defaultRules) })
	builtOptIn   = sync.OnceValue(func() []Rule { return buildAll(optInRules) })
)

func buildAll(bs []builtin) []Rule {
	out := make([]Rule, len(bs))
	for i, b := range bs {
		out[i] = b.build()
	}
	return out
}

func (b builtin) build() Rule {
	alts := make([]string, len(b.parts))
	parts := make([]*regexp.Regexp, len(b.parts))
	for i, p := range b.parts {
		alts[i] = "(?:" + p + ")"
		parts[i] = regexp.MustCompile(p)
	}
	pat := regexp.MustCompile(strings.Join(alts, "|"))
	impl := &ruleImpl{pattern: pat, parts: parts, hints: make([]partHint, len(parts)), notAfter: b.notAfter}
	copy(impl.hints, b.hints)
	if b.tail != "" {
		impl.tail = regexp.MustCompile(`\A(?:` + b.tail + `)`)
	}
	return Rule{Name: b.name, Pattern: pat, MaxLen: b.maxLen, impl: impl}
}

// DefaultRules returns the rules that are on unless configured off, in precedence
// order:
//
//   - private_key: a PEM "-----BEGIN ... PRIVATE KEY-----" block through its END line
//     (RSA, EC, DSA, OpenSSH, PKCS#8, encrypted, PGP), also with the escaped "\n" of
//     JSON; a block without an END line is redacted to the end of its body.
//   - anthropic_key: sk-ant-...
//   - openai_key: sk-... (48 characters) and sk-proj-, sk-svcacct-, sk-admin-...
//   - github_token: ghp_, gho_, ghu_, ghs_, ghr_ and github_pat_ tokens.
//   - gitlab_token: glpat-, glptt-, gldt-, glrt- tokens.
//   - slack_token: xoxa-, xoxb-, xoxp-, xoxr-, xoxs- tokens and the path of
//     hooks.slack.com webhook URLs.
//   - stripe_key: sk_live_, sk_test_, rk_live_, rk_test_, pk_live_ keys.
//   - google_api_key: AIza and 35 characters.
//   - aws_access_key: AKIA or ASIA and 16 characters.
//   - aws_secret_key: a 40-character base64 value after aws_secret_access_key,
//     AWS_SECRET_ACCESS_KEY, SecretAccessKey, secret_key (and spellings) and '=' or
//     ':'; a 40-character string alone (a git SHA) is left alone.
//   - jwt: base64url segments joined by dots, the first two starting "eyJ" (the
//     signature may be empty or missing).
//   - url_credentials: the password of scheme://user:password@host, as in
//     https, postgres://, mongodb+srv:// or redis://:password@host URLs.
//
// All rules but private_key, aws_secret_key and url_credentials also require that the
// match not directly follow a letter, digit or underscore (nor '-', for jwt). The returned slice is a
// copy; its Patterns are shared and safe for concurrent use.
func DefaultRules() []Rule { return slices.Clone(builtDefault()) }

// OptInRules returns the rules that are known but off by default because what they
// match is often legitimate output:
//
//   - email: addresses such as alice@example.com.
//   - private_ip: addresses in 10/8, 172.16/12, 192.168/16 and fc00::/7.
//   - system_path: absolute paths under /home, /root, /etc, /var, /usr, /opt, /srv,
//     /mnt, /media, /Users, /private, /proc, /sys, /boot, /run and /snap.
//   - generic_secret_assignment: the value in "password = ...", "api_key: ...",
//     "TOKEN=..." and similar (8 to 200 characters).
func OptInRules() []Rule { return slices.Clone(builtOptIn()) }

// DefaultRuleNames and OptInRuleNames are the names of DefaultRules and OptInRules,
// in the same order, without compiling any rule.
func DefaultRuleNames() []string { return builtinNames(defaultRules) }

// OptInRuleNames: see DefaultRuleNames.
func OptInRuleNames() []string { return builtinNames(optInRules) }

func builtinNames(bs []builtin) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.name
	}
	return out
}

// RuleByName finds a rule among DefaultRules and OptInRules. Only the set that holds
// the rule is compiled.
func RuleByName(name string) (Rule, bool) {
	for _, set := range []func() []Rule{builtDefault, builtOptIn} {
		for _, r := range set() {
			if r.Name == name {
				return r, true
			}
		}
	}
	return Rule{}, false
}

// NewRule compiles a user-configured rule. pattern is Go (RE2) syntax. NewRule
// refuses a pattern that can match the empty string, and one that uses \A, \z, or ^
// and $ without the m flag: output is a stream, and the start or end of the whole
// text is not something a stream can know; write (?m)^ and (?m)$ for line anchors.
// maxLen 0 means DefaultMaxLen (256 bytes); otherwise it must be in 1..MaxRuleLen.
//
// The name, which appears in markers, is 1 to 64 letters, digits, '_', '-' or '.'.
// A capture group named "secret", if present, is the part that is redacted.
func NewRule(name, pattern string, maxLen int) (Rule, error) {
	if !validName(name) {
		return Rule{}, fmt.Errorf("%w %q: want 1 to 64 of [A-Za-z0-9_.-]", ErrRuleName, name)
	}
	switch {
	case maxLen == 0:
		maxLen = DefaultMaxLen
	case maxLen < 0 || maxLen > MaxRuleLen:
		return Rule{}, fmt.Errorf("%w %d for rule %s: want 1 to %d, or 0 for %d", ErrRuleMaxLen, maxLen, name, MaxRuleLen, DefaultMaxLen)
	}
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return Rule{}, fmt.Errorf("%w for rule %s: %w", ErrRulePattern, name, err)
	}
	if textAnchored(tree) {
		return Rule{}, fmt.Errorf("%w for rule %s: \\A, \\z, ^ or $ without (?m) cannot be used on a stream", ErrRulePattern, name)
	}
	if nullable(tree) {
		return Rule{}, fmt.Errorf("%w for rule %s: pattern can match the empty string", ErrRulePattern, name)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Rule{}, fmt.Errorf("%w for rule %s: %w", ErrRulePattern, name, err)
	}
	return Rule{Name: name, Pattern: re, MaxLen: maxLen}, nil
}

func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(strings.IndexByte(wordBytes, c) >= 0 || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// nullable reports whether re can match the empty string in some context.
// Assertions count as empty: \b alone matches the empty string between "a" and " ".
func nullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpLiteral, syntax.OpCharClass, syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return re.Op == syntax.OpLiteral && len(re.Rune) == 0
	case syntax.OpCapture, syntax.OpPlus:
		return nullable(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest:
		return true
	case syntax.OpRepeat:
		return re.Min == 0 || nullable(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !nullable(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if nullable(s) {
				return true
			}
		}
		return false
	default: // OpEmptyMatch and the assertions
		return true
	}
}

// textAnchored reports whether re uses \A, \z, or ^ / $ without (?m).
func textAnchored(re *syntax.Regexp) bool {
	if re.Op == syntax.OpBeginText || re.Op == syntax.OpEndText {
		return true
	}
	for _, s := range re.Sub {
		if textAnchored(s) {
			return true
		}
	}
	return false
}

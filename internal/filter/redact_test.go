package filter

import (
	"regexp"
	"strings"
	"testing"
)

func TestExactSecrets(t *testing.T) {
	const (
		dbPass   = "Zq8!vR2#mLz5"
		apiToken = "tok_live_7f3a9c2e5b8d1f4a"
	)
	r := New(DefaultRules(), []string{dbPass, apiToken, "short7!", dbPass, ""})
	runCases(t, r, []redactCase{
		{"once", "password is " + dbPass + ".", "password is [REDACTED:secret].", 1},
		{"twice", dbPass + " and again " + dbPass, "[REDACTED:secret] and again [REDACTED:secret]", 2},
		{"back to back", dbPass + dbPass + apiToken, "[REDACTED:secret][REDACTED:secret][REDACTED:secret]", 3},
		{"inside a word", "xx" + apiToken + "yy", "xx[REDACTED:secret]yy", 1},
		{"shorter than 8 bytes is ignored", "short7! stays", "short7! stays", 0},
		{"prefix only", "Zq8!vR2#mLz stays", "Zq8!vR2#mLz stays", 0},
		{"in invalid UTF-8", "\xff\xfe" + apiToken + "\x80", "\xff\xfe[REDACTED:secret]\x80", 1},
	})
}

func TestOverlaps(t *testing.T) {
	// inKey lies inside anthropicKey; startsEarly starts before it and ends inside it.
	inKey := "Value9xQ2mZ7pL3k"
	startsEarly := "prefix-sk-ant-api03-R4nd"
	r := New(DefaultRules(), []string{githubPAT, inKey, startsEarly})
	runCases(t, r, []redactCase{
		{"secret equal to a rule match: secret names it", "t=" + githubPAT, "t=[REDACTED:secret]", 1},
		{"secret inside a rule match: one redaction, rule names it", "k=" + anthropicKey + "!", "k=[REDACTED:anthropic_key]!", 1},
		{"secret starting first: one redaction to the end of the key", "x" + startsEarly + anthropicKey[len("sk-ant-api03-R4nd"):] + " end", "x[REDACTED:secret] end", 1},
		{"token as URL password: the token rule names it", "https://x-access-token:" + githubOAuth + "@github.com/o/r", "https://x-access-token:[REDACTED:github_token]@github.com/o/r", 1},
		{"anthropic key is not also an openai key", anthropicKey, "[REDACTED:anthropic_key]", 1},
		{"JWT in a URL password", "https://u:" + jwtToken + "@h/", "https://u:[REDACTED:jwt]@h/", 1},
	})
}

func TestMarkersAreNotRematched(t *testing.T) {
	// The output of the first redaction contains the secret again; it must not be
	// redacted again (nor loop).
	runCases(t, New(nil, []string{"ACTED:secret]"}), []redactCase{
		{"marker contains the secret", "ACTED:secret]", "[REDACTED:secret]", 1},
	})
	runCases(t, New(nil, []string{"REDACTED"}), []redactCase{
		{"input contains a marker", "[REDACTED:secret]", "[[REDACTED:secret]:secret]", 1},
	})
	runCases(t, New(nil, []string{"ACTED:secret]", "REDACTED"}), []redactCase{
		{"overlapping secrets merge", "[REDACTED:secret]", "[[REDACTED:secret]", 1},
	})
}

func TestBinaryPassesThrough(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 4096; i++ {
		b.WriteByte(byte(i * 7))
	}
	bin := b.String()
	r := New(DefaultRules(), []string{"SuperSecretValue"})
	runCases(t, r, []redactCase{
		{"no match", bin, bin, 0},
		{"secret between binary", bin + "SuperSecretValue" + bin, bin + "[REDACTED:secret]" + bin, 1},
		{"key between invalid UTF-8", "\xc3" + awsAccess + "\xe2\x82", "\xc3[REDACTED:aws_access_key]\xe2\x82", 1},
	})
}

func TestNewIgnoresBadRules(t *testing.T) {
	r := New([]Rule{{Name: "nil"}, {Pattern: regexp.MustCompile(`xyz[0-9]+`)}}, nil)
	if got, n := r.Redact("a xyz123 b"); got != "a [REDACTED:unnamed] b" || n != 1 {
		t.Errorf("got %q, %d", got, n)
	}
	if got, n := New(nil, nil).Redact("nothing"); got != "nothing" || n != 0 {
		t.Errorf("empty redactor: %q, %d", got, n)
	}
}

func TestRedactConcurrent(t *testing.T) {
	r := New(DefaultRules(), []string{"SuperSecretValue"})
	in := strings.Repeat("x SuperSecretValue "+githubPAT+"\n", 2000)
	want, wantN := r.Redact(in)
	done := make(chan bool)
	for i := 0; i < 8; i++ {
		go func() {
			got, n := r.Redact(in)
			done <- got == want && n == wantN
		}()
	}
	for i := 0; i < 8; i++ {
		if !<-done {
			t.Error("concurrent Redact disagreed")
		}
	}
}

package filter

import (
	"errors"
	"regexp"
	"slices"
	"testing"
)

// Realistic-looking (but fake) credentials, shared by the tests.
const (
	openaiProj    = "sk-proj-Xq3T9vLm2Pz8Kd4Rw7Ny1Bc6Hf0Js5Ga-Qe_Ut2Vo9Ik4El7Wr3Ys8Zx1Cv6Bn0Mm5LlT3BlbkFJ"
	openaiLegacy  = "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"
	anthropicKey  = "sk-ant-api03-R4nd0mLooking_T0ken-Value9xQ2mZ7pL3kW8vN1bC5dF6gH0jK4sA2eU7iO9pY3tR6wE1qZ8xC5vB0nM4lK7jH2gF9dS3aQ-AA"
	githubPAT     = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
	githubOAuth   = "gho_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8N"
	githubFine    = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
	gitlabPAT     = "glpat-Ab3dE5fG7hJ9kL1mN3pQ"
	slackBot      = "xoxb-1234567890123-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	slackUser     = "xoxp-2345678901-2345678901234-3456789012345-0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"
	slackHookPath = "hooks.slack.com/services/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"
	stripeLive    = "sk_live_51H8aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
	stripeRestr   = "rk_test_51H8ZyXwVuTsRqPoNmLkJiHgFeDcBa"
	googleKey     = "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"
	awsAccess     = "AKIAIOSFODNN7EXAMPLE"
	awsSession    = "ASIAY34FZKBOKMUTVV7A"
	awsSecret     = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	jwtToken      = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	jwtNone       = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiIsInJvbGUiOiJyb290In0."
)

// pemRSA is a (truncated, fake) PKCS#1 key as `openssl genrsa` prints it.
const pemRSA = `-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB
aFDrBz9vFqU4yS3Yx8kC8iHhqw6Ho7j4pWd+2fXKoRk5Y9D7bQm3sFJ0tR5vKd2n
Proc-Type: 4,ENCRYPTED
DEK-Info: AES-128-CBC,8A2B4C6D8E0F1A3B5C7D9E1F3A5B7C9D
w6Ho7j4pWd+2fXKoRk5Y9D7bQm3sFJ0tR5vKd2nLq8Z1mP4xT7cV0bN3kJ6hG9fD
sA2eU7iO9pY3tR6wE1qZ8xC5vB0nM4lK7jH2gF9dS3aQ6wE1rT5yU8iO2pA==
-----END RSA PRIVATE KEY-----`

const pemOpenSSH = `-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACDc5QGCQm6Mq6kKRW4gWc2P9vv8TjNb0C6O8g7BzJ0W8QAAAJgQzQ8aEM0P
-----END OPENSSH PRIVATE KEY-----`

// pemJSON is a PKCS#8 key as it appears in a GCP service-account file.
const pemJSON = `"private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\nMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE KEY-----\n",`

type redactCase struct {
	name string
	in   string
	want string
	n    int
}

func runCases(t *testing.T, r *Redactor, cases []redactCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, n := r.Redact(tc.in)
			if got != tc.want || n != tc.n {
				t.Errorf("Redact(%q)\n got %q, %d\nwant %q, %d", tc.in, got, n, tc.want, tc.n)
			}
			// The stream, fed in awkward chunks, must agree.
			if sgot, sn := streamIn(r, []byte(tc.in), 3); sgot != got || sn != n {
				t.Errorf("Stream(%q) = %q, %d; Redact gave %q, %d", tc.in, sgot, sn, got, n)
			}
		})
	}
}

// unchanged is a negative case.
func unchanged(name, in string) redactCase { return redactCase{name, in, in, 0} }

func TestDefaultRules(t *testing.T) {
	r := New(DefaultRules(), nil)
	cases := map[string][]redactCase{
		"openai_key": {
			{"project key in env", "OPENAI_API_KEY=" + openaiProj + "\n", "OPENAI_API_KEY=[REDACTED:openai_key]\n", 1},
			{"legacy key in python repr", "client = OpenAI(api_key='" + openaiLegacy + "')", "client = OpenAI(api_key='[REDACTED:openai_key]')", 1},
			{"two keys", openaiLegacy + " " + openaiProj, "[REDACTED:openai_key] [REDACTED:openai_key]", 2},
			unchanged("prefix in prose", "OpenAI keys start with sk- and are secret."),
			unchanged("hyphenated words", "our risk-adjusted-return-on-capital-model and sk-learn-is-a-python-library"),
			unchanged("inside a word", "disk-0123456789abcdefghijklmnopqrstuv"),
			unchanged("too short", "sk-abc123"),
		},
		"anthropic_key": {
			{"env var", "ANTHROPIC_API_KEY=" + anthropicKey, "ANTHROPIC_API_KEY=[REDACTED:anthropic_key]", 1},
			{"header", "x-api-key: " + anthropicKey + "\r\n", "x-api-key: [REDACTED:anthropic_key]\r\n", 1},
			{"admin key", `{"key":"sk-ant-admin01-Q2w3E4r5T6y7U8i9O0p1A2s3D4f5G6h7J8k9L0"}`, `{"key":"[REDACTED:anthropic_key]"}`, 1},
			unchanged("too short", "sk-ant-api03-abc"),
			unchanged("inside a word", "mask-ant-api03-abcdefghijklmnopqrstuvwxyz0123"),
		},
		"github_token": {
			{"classic PAT in a remote URL", "https://" + githubPAT + "@github.com/o/r.git", "https://[REDACTED:github_token]@github.com/o/r.git", 1},
			{"oauth token", "GITHUB_TOKEN=" + githubOAuth, "GITHUB_TOKEN=[REDACTED:github_token]", 1},
			{"fine-grained PAT", "token: " + githubFine + "\n", "token: [REDACTED:github_token]\n", 1},
			unchanged("prefix in prose", "GitHub tokens start with ghp_ or github_pat_."),
			unchanged("too short", "ghp_abc123"),
			unchanged("inside a word", "xghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
		},
		"gitlab_token": {
			{"PAT", "PRIVATE-TOKEN: " + gitlabPAT, "PRIVATE-TOKEN: [REDACTED:gitlab_token]", 1},
			{"deploy token in URL", "git clone https://gitlab.com/x.git --token gldt-Xy9Zw8Vu7Ts6Rq5Po4Nm3L", "git clone https://gitlab.com/x.git --token [REDACTED:gitlab_token]", 1},
			unchanged("too short", "glpat-abc"),
			unchanged("prose", "gitlab personal access tokens (glpat-...) expire"),
		},
		"slack_token": {
			{"bot token", "SLACK_BOT_TOKEN=" + slackBot, "SLACK_BOT_TOKEN=[REDACTED:slack_token]", 1},
			{"user token", `{"token": "` + slackUser + `"}`, `{"token": "[REDACTED:slack_token]"}`, 1},
			{"webhook URL", "POST https://" + slackHookPath + " 200", "POST https://[REDACTED:slack_token] 200", 1},
			unchanged("xoxo", "see you soon xoxo-gossip-girl"),
			unchanged("slack docs URL", "https://hooks.slack.com/ and https://api.slack.com/messaging/webhooks"),
		},
		"stripe_key": {
			{"live secret key", "stripe.api_key = \"" + stripeLive + "\"", "stripe.api_key = \"[REDACTED:stripe_key]\"", 1},
			{"restricted test key", "STRIPE_KEY=" + stripeRestr, "STRIPE_KEY=[REDACTED:stripe_key]", 1},
			unchanged("publishable test key", "pk_test_TYooMQauvdEDq54NiTphI7jx"),
			unchanged("identifier", "if sk_live_mode: print(sk_test_count)"),
		},
		"google_api_key": {
			{"maps URL", "https://maps.googleapis.com/maps/api/geocode/json?key=" + googleKey, "https://maps.googleapis.com/maps/api/geocode/json?key=[REDACTED:google_api_key]", 1},
			{"env var", "GOOGLE_API_KEY=" + googleKey + "\n", "GOOGLE_API_KEY=[REDACTED:google_api_key]\n", 1},
			unchanged("too short", "AIzaSyShort"),
			unchanged("inside a word", "xAIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"),
		},
		"aws_access_key": {
			{"access key id", "aws_access_key_id = " + awsAccess, "aws_access_key_id = [REDACTED:aws_access_key]", 1},
			{"session key id in JSON", `{"AccessKeyId": "` + awsSession + `"}`, `{"AccessKeyId": "[REDACTED:aws_access_key]"}`, 1},
			unchanged("prose", "AKIA means a long-term key; ASIA a temporary one"),
			unchanged("too short", "AKIAIOSFODNN7EXAMP"),
			unchanged("lower case", "akiaiosfodnn7example"),
		},
		"aws_secret_key": {
			{"credentials file", "[default]\naws_secret_access_key = " + awsSecret + "\n", "[default]\naws_secret_access_key = [REDACTED:aws_secret_key]\n", 1},
			{"env", "export AWS_SECRET_ACCESS_KEY=" + awsSecret, "export AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_key]", 1},
			{"STS JSON", `"SecretAccessKey": "` + awsSecret + `",`, `"SecretAccessKey": "[REDACTED:aws_secret_key]",`, 1},
			{"python dict", `{'aws_secret_access_key': '` + awsSecret + `'}`, `{'aws_secret_access_key': '[REDACTED:aws_secret_key]'}`, 1},
			unchanged("git sha", "commit 9fceb02d0ae598e95dc970b74767f19372d61af8\nAuthor: a"),
			unchanged("40 base64 characters alone", "checksum "+awsSecret),
			unchanged("placeholder", "aws_secret_access_key = <your secret key here>"),
		},
		"jwt": {
			{"bearer header", "Authorization: Bearer " + jwtToken, "Authorization: Bearer [REDACTED:jwt]", 1},
			{"alg none", "token=" + jwtNone + " ok", "token=[REDACTED:jwt] ok", 1},
			unchanged("base64 JSON alone", "header eyJhbGciOiJIUzI1NiJ9 decoded"),
			unchanged("dotted version", "version 1.2.3 eyJ.eyJ."),
			unchanged("inside a word", "xeyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc"),
		},
		"private_key": {
			{"RSA block", "key:\n" + pemRSA + "\ndone", "key:\n[REDACTED:private_key]\ndone", 1},
			{"OpenSSH block", pemOpenSSH + "\n", "[REDACTED:private_key]\n", 1},
			{"JSON service account", pemJSON, `"private_key": "[REDACTED:private_key]\n",`, 1},
			{"no END line", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4Lz9m3VwK8f2\nYb2Hq9L", "[REDACTED:private_key]", 1},
			unchanged("certificate", "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBa\n-----END CERTIFICATE-----"),
			unchanged("public key", "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"),
		},
		"url_credentials": {
			{"postgres", "DATABASE_URL=postgres://app:s3cr3t-Pa55@db.internal:5432/prod", "DATABASE_URL=postgres://app:[REDACTED:url_credentials]@db.internal:5432/prod", 1},
			{"mongodb+srv", "mongodb+srv://admin:P%40ssw0rd!@cluster0.ab1cd.mongodb.net/test?retryWrites=true", "mongodb+srv://admin:[REDACTED:url_credentials]@cluster0.ab1cd.mongodb.net/test?retryWrites=true", 1},
			{"redis without user", "redis://:hunter2hunter2@cache:6379/0", "redis://:[REDACTED:url_credentials]@cache:6379/0", 1},
			{"https basic auth", "GET https://bob:correct-horse@example.com/x", "GET https://bob:[REDACTED:url_credentials]@example.com/x", 1},
			unchanged("plain URL", "see https://example.com/path?q=1&r=a:b#frag"),
			unchanged("host and port", "listening on http://localhost:8080/api and http://127.0.0.1:9000"),
			unchanged("user without password", "ssh://git@github.com:22/org/repo.git and alice@example.com"),
		},
	}
	for _, rule := range DefaultRules() {
		if len(cases[rule.Name]) == 0 {
			t.Errorf("no cases for default rule %s", rule.Name)
		}
	}
	for name, cs := range cases {
		t.Run(name, func(t *testing.T) { runCases(t, r, cs) })
	}
}

func TestOptInRules(t *testing.T) {
	cases := map[string][]redactCase{
		"email": {
			{"address", "contact alice.smith+tag@example.co.uk now", "contact [REDACTED:email] now", 1},
			{"two", "a@b.io,bob@mail.example.com", "[REDACTED:email],[REDACTED:email]", 2},
			unchanged("at sign alone", "meet @ 5pm, @mention"),
			unchanged("no domain dot", "user@localhost"),
		},
		"private_ip": {
			{"ten", "connect 10.0.12.7 ok", "connect [REDACTED:private_ip] ok", 1},
			{"172.16/12 and 192.168", "172.31.255.1 192.168.1.20", "[REDACTED:private_ip] [REDACTED:private_ip]", 2},
			{"ula", "addr fd12:3456:789a::1/64", "addr [REDACTED:private_ip]/64", 1},
			unchanged("public", "8.8.8.8 and 172.32.0.1 and 110.1.2.3"),
			unchanged("version", "v10.1.2"),
		},
		"system_path": {
			{"home", "open /home/alice/.ssh/id_rsa failed", "open [REDACTED:system_path] failed", 1},
			{"etc", "cat /etc/passwd", "cat [REDACTED:system_path]", 1},
			unchanged("workspace and tmp", "wrote /workspace/out.csv and /tmp/x"),
			unchanged("URL path", "https://example.com/etc/x and /etcetera"),
		},
		"generic_secret_assignment": {
			{"password", "db_password = 'Tr0ub4dor&3x'", "db_password = '[REDACTED:generic_secret_assignment]'", 1},
			{"api key", "API_KEY: abcdef0123456789", "API_KEY: [REDACTED:generic_secret_assignment]", 1},
			unchanged("short value", "password=hunter2"),
			unchanged("no assignment", "the token bucket refills"),
		},
	}
	for _, rule := range OptInRules() {
		if len(cases[rule.Name]) == 0 {
			t.Errorf("no cases for opt-in rule %s", rule.Name)
		}
	}
	for name, cs := range cases {
		rule, ok := RuleByName(name)
		if !ok {
			t.Fatalf("RuleByName(%q) not found", name)
		}
		t.Run(name, func(t *testing.T) { runCases(t, New([]Rule{rule}, nil), cs) })
	}
	t.Run("off by default", func(t *testing.T) {
		in := "alice@example.com 10.0.0.1 /etc/passwd password=Tr0ub4dor&3x"
		if got, n := New(DefaultRules(), nil).Redact(in); got != in || n != 0 {
			t.Errorf("default rules changed %q to %q", in, got)
		}
	})
}

func TestRuleByName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"openai_key", true},
		{"private_key", true},
		{"email", true},
		{"generic_secret_assignment", true},
		{"nope", false},
		{"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := RuleByName(tc.name)
			if ok != tc.ok || (ok && (r.Name != tc.name || r.Pattern == nil || r.MaxLen <= 0)) {
				t.Errorf("RuleByName(%q) = %+v, %v", tc.name, r, ok)
			}
		})
	}
	t.Run("names are unique", func(t *testing.T) {
		seen := map[string]bool{}
		for _, r := range append(DefaultRules(), OptInRules()...) {
			if seen[r.Name] {
				t.Errorf("duplicate rule %s", r.Name)
			}
			seen[r.Name] = true
		}
	})
}

func TestNewRule(t *testing.T) {
	for _, tc := range []struct {
		name, pattern string
		maxLen        int
		err           error
		wantMax       int
	}{
		{"internal_token", `itk_[0-9a-f]{32}`, 0, nil, DefaultMaxLen},
		{"with-secret.group", `session=(?P<secret>[0-9a-f]{16,})`, 64, nil, 64},
		{"line_anchor", `(?m)^SECRET .+$`, 100, nil, 100},
		{"bad name", `x+`, 0, ErrRuleName, 0},
		{"", `x+`, 0, ErrRuleName, 0},
		{"empty", `x*`, 0, ErrRulePattern, 0},
		{"optional", `(?:abc)?`, 0, ErrRulePattern, 0},
		{"assertion_only", `\b`, 0, ErrRulePattern, 0},
		{"empty_alternative", `abc|`, 0, ErrRulePattern, 0},
		{"zero_repeat", `a{0,3}`, 0, ErrRulePattern, 0},
		{"text_anchor", `^secret`, 0, ErrRulePattern, 0},
		{"end_anchor", `secret$`, 0, ErrRulePattern, 0},
		{"syntax", `a(b`, 0, ErrRulePattern, 0},
		{"negative", `abc`, -1, ErrRuleMaxLen, 0},
		{"huge", `abc`, MaxRuleLen + 1, ErrRuleMaxLen, 0},
	} {
		t.Run(tc.name+"/"+tc.pattern, func(t *testing.T) {
			r, err := NewRule(tc.name, tc.pattern, tc.maxLen)
			if !errors.Is(err, tc.err) {
				t.Fatalf("NewRule(%q, %q, %d) error = %v, want %v", tc.name, tc.pattern, tc.maxLen, err, tc.err)
			}
			if err == nil && (r.MaxLen != tc.wantMax || r.Name != tc.name || r.Pattern.String() != tc.pattern) {
				t.Errorf("NewRule = %+v", r)
			}
		})
	}
	t.Run("custom rule redacts", func(t *testing.T) {
		a, _ := NewRule("internal_token", `itk_[0-9a-f]{32}`, 0)
		b, _ := NewRule("session", `session=(?P<secret>[0-9a-f]{16,})`, 64)
		r := New([]Rule{a, b}, nil)
		runCases(t, r, []redactCase{
			{"whole match", "t=itk_0123456789abcdef0123456789abcdef.", "t=[REDACTED:internal_token].", 1},
			{"secret group", "cookie session=0123456789abcdef01; path=/", "cookie session=[REDACTED:session]; path=/", 1},
		})
	})
}

// TestBuiltinPartsStartWithLiteral checks what the matcher relies on: each part of
// a built-in rule starts with a literal (so the engine can skip to it, and no
// assertion depends on where a search starts).
func TestBuiltinPartsStartWithLiteral(t *testing.T) {
	for _, r := range append(DefaultRules(), OptInRules()...) {
		for i, p := range r.impl.parts {
			if h := r.impl.hints[i]; h.starts != nil || h.infix != 0 {
				continue
			}
			if prefix, _ := p.LiteralPrefix(); prefix == "" {
				t.Errorf("%s: part %q has no literal prefix", r.Name, p)
			}
		}
	}
}

func TestReplacedPatternDropsTuning(t *testing.T) {
	r, _ := RuleByName("openai_key")
	r.Pattern = regexp.MustCompile(`sk-[a-z]{4}`)
	got, n := New([]Rule{r}, nil).Redact("xsk-abcd")
	if got != "x[REDACTED:openai_key]" || n != 1 {
		t.Errorf("got %q, %d", got, n)
	}
}

// TestRuleNames: the names the config is checked against, taken without compiling
// any rule, are those of the compiled rules, in order.
func TestRuleNames(t *testing.T) {
	for _, c := range []struct {
		names []string
		rules []Rule
	}{{DefaultRuleNames(), DefaultRules()}, {OptInRuleNames(), OptInRules()}} {
		got := make([]string, len(c.rules))
		for i, r := range c.rules {
			got[i] = r.Name
		}
		if len(got) == 0 || !slices.Equal(got, c.names) {
			t.Errorf("names %v, rules named %v", c.names, got)
		}
	}
}

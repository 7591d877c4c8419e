package filter

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// streamIn writes in to a Stream of r in chunks of k bytes and returns what the
// stream wrote and its count.
func streamIn(r *Redactor, in []byte, k int) (string, int) {
	var buf bytes.Buffer
	s := r.Stream(&buf)
	for len(in) > 0 {
		n := min(k, len(in))
		if w, err := s.Write(in[:n]); err != nil || w != n {
			panic(fmt.Sprintf("Write = %d, %v", w, err))
		}
		in = in[n:]
	}
	if err := s.Close(); err != nil {
		panic(err)
	}
	return buf.String(), s.Count()
}

// streamChunks writes in to a Stream of r in the chunks given by sizes (cycled).
func streamChunks(t *testing.T, r *Redactor, in []byte, sizes []int) (string, int) {
	t.Helper()
	var buf bytes.Buffer
	s := r.Stream(&buf)
	for i := 0; len(in) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(in))
		if _, err := s.Write(in[:n]); err != nil {
			t.Fatal(err)
		}
		if len(s.buf) >= r.frameSize() || cap(s.buf) > r.frameSize() {
			t.Fatalf("stream holds %d bytes (cap %d), frame is %d", len(s.buf), cap(s.buf), r.frameSize())
		}
		in = in[n:]
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String(), s.Count()
}

// exactSecrets are configured as exact values in the stream tests.
var exactSecrets = []string{"Zq8!vR2#mLz5", "tok_live_7f3a9c2e5b8d1f4a", "hunter2hunter2"}

// leakProbes are substrings of the secrets in corpus that must never reach output.
var leakProbes = []string{
	"Xq3T9vLm2Pz8", "Tq8vR2mLz5Kp", "R4nd0mLooking", "a1B2c3D4e5F6", "Zz9Yy8Xx7Ww6", "11ABCDEFG0aB",
	"Ab3dE5fG7hJ9", "1234567890123-AbCd", "Xy7Zq2Wv9Lk4", "51H8aBcDeFgH", "51H8ZyXwVuTs",
	"SyDdI0hCZtE6", "IOSFODNN7EXA", "Y34FZKBOKMUT", "wJalrXUtnFEMI", "SflKxwRJSMeK", "eyJzdWIiOiJhZG1p",
	"MIIEowIBAAKCAQEA", "w6Ho7j4pWd", "b3BlbnNzaC1rZXkt", "MIIEvQIBADANBgkq", "s3cr3t-Pa55",
	"Zq8!vR2#mLz5", "tok_live_7f3a9c2e5b8d1f4a", "hunter2hunter2",
}

// corpus is program output with one of every kind of secret.
func corpus() string { return strings.Join(corpusLines(), "\n") }

// corpusLines are the lines of corpus, but a PEM block is one line.
func corpusLines() []string {
	return []string{
		"2024-05-01T12:00:00Z INFO starting worker pid=4242",
		"OPENAI_API_KEY=" + openaiProj,
		"client = OpenAI(api_key='" + openaiLegacy + "')",
		"x-api-key: " + anthropicKey,
		"remote: https://" + githubPAT + "@github.com/o/r.git",
		"GITHUB_TOKEN=" + githubOAuth + " FINE=" + githubFine,
		"PRIVATE-TOKEN: " + gitlabPAT,
		"SLACK=" + slackBot + " hook=https://" + slackHookPath,
		"stripe " + stripeLive + " " + stripeRestr,
		"maps key=" + googleKey,
		"aws_access_key_id = " + awsAccess + " session " + awsSession,
		"aws_secret_access_key = " + awsSecret,
		"Authorization: Bearer " + jwtToken + " none=" + jwtNone,
		pemRSA,
		pemOpenSSH,
		pemJSON,
		"DATABASE_URL=postgres://app:s3cr3t-Pa55@db.internal:5432/prod",
		"db pass Zq8!vR2#mLz5 token tok_live_7f3a9c2e5b8d1f4a redis://:hunter2hunter2@cache:6379",
		"commit 9fceb02d0ae598e95dc970b74767f19372d61af8 done: risk-adjusted sk- prose",
		"",
	}
}

func checkNoLeak(t *testing.T, out string) {
	t.Helper()
	for _, p := range leakProbes {
		if strings.Contains(out, p) {
			t.Errorf("output leaks %q", p)
		}
	}
}

func TestCorpusRedactsEverything(t *testing.T) {
	r := New(DefaultRules(), exactSecrets)
	out, n := r.Redact(corpus())
	checkNoLeak(t, out)
	if n != 24 {
		t.Errorf("count = %d, want 24; output:\n%s", n, out)
	}
	for _, keep := range []string{"9fceb02d0ae598e95dc970b74767f19372d61af8", "risk-adjusted sk- prose", "starting worker pid=4242"} {
		if !strings.Contains(out, keep) {
			t.Errorf("output lost %q", keep)
		}
	}
}

func TestStreamSplitAtEveryPosition(t *testing.T) {
	for _, cfg := range []struct {
		name string
		r    *Redactor
	}{
		{"default frames", New(DefaultRules(), exactSecrets)},
		{"small frames", newRedactor(DefaultRules(), exactSecrets, 700, 300)},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			in := corpus()
			want, wantN := cfg.r.Redact(in)
			for i := 0; i <= len(in); i++ {
				var buf bytes.Buffer
				s := cfg.r.Stream(&buf)
				s.Write([]byte(in[:i]))
				s.Write([]byte(in[i:]))
				s.Close()
				if buf.String() != want || s.Count() != wantN {
					t.Fatalf("split at %d: got %d markers\n%s\nwant %d\n%s", i, s.Count(), buf.String(), wantN, want)
				}
			}
		})
	}
}

func TestStreamOneByteWrites(t *testing.T) {
	r := New(DefaultRules(), exactSecrets)
	in := corpus()
	want, wantN := r.Redact(in)
	got, n := streamIn(r, []byte(in), 1)
	if got != want || n != wantN {
		t.Fatalf("1-byte writes: %d markers\n%s\nwant %d\n%s", n, got, wantN, want)
	}
	checkNoLeak(t, got)
}

func TestStreamPEMAcrossManyWrites(t *testing.T) {
	r := New(DefaultRules(), nil)
	step := r.step
	for _, lead := range []int{0, 100, step - 900, step - 300, step - 1, step, 2*step - 500} {
		for _, chunk := range []int{1, 7, 64, 1000} {
			t.Run(fmt.Sprintf("lead %d chunk %d", lead, chunk), func(t *testing.T) {
				in := strings.Repeat("log line\n", lead/9) + strings.Repeat("x", lead%9) + pemRSA + "\nafter\n"
				want, wantN := r.Redact(in)
				got, n := streamChunks(t, r, []byte(in), []int{chunk})
				if got != want || n != wantN {
					t.Fatalf("stream %d markers, Redact %d", n, wantN)
				}
				if wantN != 1 || !strings.HasSuffix(got, "[REDACTED:private_key]\nafter\n") {
					t.Errorf("PEM not redacted whole: %d markers, tail %q", wantN, got[max(0, len(got)-60):])
				}
				checkNoLeak(t, got)
			})
		}
	}
}

// TestStreamFrameBoundaries puts each kind of secret at every offset around the
// first frame's preferred end (the step: the filler has no newline), where a naive
// stream would cut it.
func TestStreamFrameBoundaries(t *testing.T) {
	r := New(DefaultRules(), exactSecrets)
	secrets := []string{openaiProj, githubPAT, awsAccess, "aws_secret_access_key=" + awsSecret, jwtToken,
		"postgres://u:s3cr3t-Pa55@h/db", "Zq8!vR2#mLz5", pemOpenSSH}
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 2*r.frameSize()/27+1)
	for _, sec := range secrets {
		for off := r.step - len(sec) - 8; off < r.step+8; off++ {
			in := filler[:off] + " " + sec + " " + filler[:3*r.step/2]
			want, wantN := r.Redact(in)
			if wantN != 1 {
				t.Fatalf("%.20s at %d: Redact count %d", sec, off, wantN)
			}
			checkNoLeak(t, want)
			for _, sizes := range [][]int{{len(in)}, {1, 2, 3, 500}, {4093}} {
				got, n := streamChunks(t, r, []byte(in), sizes)
				if got != want || n != wantN {
					t.Fatalf("%.20s at %d, chunks %v: stream differs", sec, off, sizes)
				}
			}
		}
	}
}

func TestStreamOverflow(t *testing.T) {
	r := New(DefaultRules(), nil)
	body := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString("MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n")
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"long PEM", "key:\n-----BEGIN RSA PRIVATE KEY-----\n" + body(70000) + "-----END RSA PRIVATE KEY-----\nafter",
			"key:\n[REDACTED:private_key]\nafter"},
		{"PEM without END", "-----BEGIN PRIVATE KEY-----\n" + body(50000) + "# the rest",
			"[REDACTED:private_key]# the rest"},
		{"very long token", "t=ghp_" + strings.Repeat("a1B2c3D4", 20000) + " ok",
			"t=[REDACTED:github_token] ok"},
		{"very long JWT", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJ" + strings.Repeat("YWJj", 10000) + ".sig" + strings.Repeat("Zz", 9000) + "\nnext",
			"Bearer [REDACTED:jwt]\nnext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := r.Redact(tc.in)
			if got != tc.want || n != 1 {
				t.Errorf("Redact = %.200q, %d; want %q, 1", got, n, tc.want)
			}
			for _, sizes := range [][]int{{1}, {3, 1000}, {65536}} {
				sgot, sn := streamChunks(t, r, []byte(tc.in), sizes)
				if sgot != got || sn != n {
					t.Errorf("chunks %v: stream %.200q, %d", sizes, sgot, sn)
				}
			}
		})
	}
	t.Run("custom rule", func(t *testing.T) {
		rule, err := NewRule("blob", `BLOB:[0-9a-f]+`, 16)
		if err != nil {
			t.Fatal(err)
		}
		r := New([]Rule{rule}, nil)
		in := "a BLOB:" + strings.Repeat("0123456789abcdef", 5000) + " z"
		got, n := r.Redact(in)
		if got != "a [REDACTED:blob] z" || n != 1 {
			t.Errorf("Redact = %.100q, %d", got, n)
		}
		if sgot, sn := streamIn(r, []byte(in), 5); sgot != got || sn != n {
			t.Errorf("stream = %.100q, %d", sgot, sn)
		}
	})
}

func TestStreamRandomChunking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := New(DefaultRules(), exactSecrets)
	small := newRedactor(DefaultRules(), exactSecrets, 300, 200)
	for round := 0; round < 20; round++ {
		in := randomOutput(rng, 200<<10)
		for _, red := range []*Redactor{r, small} {
			want, wantN := red.Redact(in)
			if red == r {
				checkNoLeak(t, want)
			}
			sizes := make([]int, 1+rng.IntN(8))
			for i := range sizes {
				sizes[i] = 1 + rng.IntN([]int{4, 100, 5000, 70000}[rng.IntN(4)])
			}
			got, n := streamChunks(t, red, []byte(in), sizes)
			if got != want || n != wantN {
				t.Fatalf("round %d, chunks %v: stream differs (%d vs %d markers)", round, sizes, n, wantN)
			}
		}
	}
}

// randomOutput is about n bytes of log lines, binary noise and secrets.
func randomOutput(rng *rand.Rand, n int) string {
	pieces := append(corpusLines(),
		"GET /api/v1/items?id=42 200 12ms", "\x00\x01\xfe\xff\xc3", "sk-", "eyJ", "-----BEGIN", "://", "AKIA",
		"ghp_", "xsk-ant-api03-", "é", "\n", "                ")
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(pieces[rng.IntN(len(pieces))])
		if rng.IntN(3) == 0 {
			b.WriteByte(" \n:=/@'\"x"[rng.IntN(9)])
		}
	}
	return b.String()
}

func TestStreamErrors(t *testing.T) {
	r := New(DefaultRules(), nil)
	t.Run("write after close", func(t *testing.T) {
		s := r.Stream(&bytes.Buffer{})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, ErrClosed) {
			t.Errorf("Write after Close = %v, want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
	t.Run("next fails", func(t *testing.T) {
		boom := errors.New("boom")
		s := r.Stream(failWriter{boom})
		if _, err := s.Write([]byte("small")); err != nil {
			t.Fatalf("buffered Write = %v", err)
		}
		if err := s.Close(); !errors.Is(err, boom) {
			t.Errorf("Close = %v, want boom", err)
		}
		s = r.Stream(failWriter{boom})
		if _, err := s.Write(make([]byte, 3*r.frameSize())); !errors.Is(err, boom) {
			t.Errorf("large Write = %v, want boom", err)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, boom) {
			t.Errorf("Write after failure = %v, want boom", err)
		}
	})
	t.Run("count so far", func(t *testing.T) {
		var buf bytes.Buffer
		s := r.Stream(&buf)
		line := "k=" + githubPAT + "\n"
		for i := 0; i < 2000; i++ {
			s.Write([]byte(line))
		}
		if s.Count() == 0 || s.Count() >= 2000 {
			t.Errorf("Count before Close = %d, want some but not all", s.Count())
		}
		s.Close()
		if s.Count() != 2000 || strings.Contains(buf.String(), githubPAT) {
			t.Errorf("Count after Close = %d, want 2000", s.Count())
		}
	})
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

func TestStreamBoundedMemory(t *testing.T) {
	r := New(DefaultRules(), nil)
	// No newline, no match: the worst case for a line-based filter.
	chunk := bytes.Repeat([]byte("abcdefgh"), 1<<16)
	s := r.Stream(discard{})
	for i := 0; i < 16; i++ {
		s.Write(chunk)
		if cap(s.buf) > r.frameSize() {
			t.Fatalf("buffer grew to %d, frame is %d", cap(s.buf), r.frameSize())
		}
	}
	s.Close()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestCountByRule: the markers are counted by the rule that wrote them, the same for
// a stream written a byte at a time as for the whole text.
func TestCountByRule(t *testing.T) {
	secret := "hunter2-hunter2-hunter2"
	r := New(DefaultRules(), []string{secret})
	text := "key AKIAABCDEFGHIJKLMNOP and " + secret + " and again AKIAQRSTUVWXYZ234567 done"
	want := map[string]int{"aws_access_key": 2, SecretRuleName: 1}
	if _, got := r.RedactByRule(text); !reflect.DeepEqual(got, want) {
		t.Fatalf("RedactByRule counts %v, want %v", got, want)
	}
	var out strings.Builder
	st := r.Stream(&out)
	for i := range len(text) {
		_, _ = st.Write([]byte{text[i]})
	}
	_ = st.Close()
	if got := st.CountByRule(); !reflect.DeepEqual(got, want) || st.Count() != 3 {
		t.Fatalf("stream counts %v (%d), want %v", got, st.Count(), want)
	}
	if _, got := r.RedactByRule("nothing to see"); got != nil {
		t.Fatalf("counts %v for clean text, want nil", got)
	}
}

package filter

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// logOutput is n bytes of typical program output: log lines, URLs, JSON, a stack
// of numbers, and a few secrets (one per 200 KiB or so).
func logOutput(n int) string {
	rng := rand.New(rand.NewPCG(7, 7))
	secrets := []string{
		"OPENAI_API_KEY=" + openaiProj, "remote: https://" + githubPAT + "@github.com/o/r.git",
		"aws_secret_access_key = " + awsSecret, "Authorization: Bearer " + jwtToken,
		"DATABASE_URL=postgres://app:s3cr3t-Pa55@db.internal:5432/prod", pemRSA,
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		switch rng.IntN(6) {
		case 0:
			fmt.Fprintf(&b, "2024-05-01T12:%02d:%02d.%03dZ INFO http: GET https://api.example.com/v1/items/%d?page=%d 200 %dms\n",
				i%60, i%60, i%1000, rng.IntN(100000), rng.IntN(50), rng.IntN(900))
		case 1:
			fmt.Fprintf(&b, `{"level":"debug","ts":%d.%d,"caller":"worker/pool.go:%d","msg":"task done","task_id":"%x","attempt":%d,"user":"user%d@example.com"}`+"\n",
				1714564800+i, rng.IntN(1000), rng.IntN(400), rng.Uint64(), rng.IntN(3), rng.IntN(1000))
		case 2:
			fmt.Fprintf(&b, "epoch %d/%d - loss: %.4f - accuracy: %.4f - val_loss: %.4f - val_accuracy: %.4f\n",
				i%100, 100, rng.Float64(), rng.Float64(), rng.Float64(), rng.Float64())
		case 3:
			fmt.Fprintf(&b, "  File \"/usr/lib/python3.11/site-packages/pandas/core/frame.py\", line %d, in __getitem__\n", rng.IntN(5000))
		case 4:
			fmt.Fprintf(&b, "commit %016x%016x%08x\nAuthor: Dev <dev@example.com>\n\n    Fix the task-scheduler risk-model sk- handling in disk-cache\n",
				rng.Uint64(), rng.Uint64(), rng.Uint32())
		case 5:
			if rng.IntN(400) == 0 {
				b.WriteString(secrets[rng.IntN(len(secrets))] + "\n")
			} else {
				fmt.Fprintf(&b, "%8d %8.3f %8.3f %8.3f ASIA-PACIFIC region eu-west-%d\n", i, rng.Float64(), rng.Float64(), rng.Float64(), rng.IntN(3))
			}
		}
	}
	return b.String()
}

func BenchmarkRedact(b *testing.B) {
	in := logOutput(1 << 20)
	r := New(DefaultRules(), []string{"Zq8!vR2#mLz5", "tok_live_7f3a9c2e5b8d1f4a", "hunter2hunter2"})
	_, n := r.Redact(in)
	b.ReportMetric(float64(n), "redactions")
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Redact(in)
	}
}

func BenchmarkStream(b *testing.B) {
	in := []byte(logOutput(1 << 20))
	r := New(DefaultRules(), []string{"Zq8!vR2#mLz5", "tok_live_7f3a9c2e5b8d1f4a", "hunter2hunter2"})
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := r.Stream(discard{})
		for p := in; len(p) > 0; {
			k := min(32<<10, len(p))
			s.Write(p[:k])
			p = p[k:]
		}
		s.Close()
	}
}

func BenchmarkRedactAllRules(b *testing.B) {
	in := logOutput(1 << 20)
	r := New(append(DefaultRules(), OptInRules()...), nil)
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Redact(in)
	}
}

// BenchmarkRedactAdversarial is output made of rule prefixes that never complete.
func BenchmarkRedactAdversarial(b *testing.B) {
	in := strings.Repeat("xsk-ant-aaaa eyJhbGciOiJIUzI1NiJ9. -----BEGIN ://x: AKIA ghp_ secret_key= ", 1<<20/72)
	r := New(DefaultRules(), nil)
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Redact(in)
	}
}

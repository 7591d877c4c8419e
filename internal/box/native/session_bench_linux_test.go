package native

import (
	"context"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/policy/python"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// BenchmarkSessionExec measures one session call's round trip on the native
// backend, from Exec to its result: the request down the pipe, the interpreter
// running `1+1` (Python: the policy runner in session mode, as the engine starts it),
// the end of the call back on the report channel, the output drained.
func BenchmarkSessionExec(b *testing.B) {
	testutil.RequireRoot(b)
	for _, c := range []struct {
		name string
		spec *box.SessionSpec
		code string
	}{
		{"python", &box.SessionSpec{
			Language:    "python",
			Interpreter: python.SessionInterpreter(python.RunnerPath),
			Support:     python.Support(python.DefaultPolicy(), nil),
		}, "1+1"},
		{"bash", &box.SessionSpec{Language: "bash"}, "true"},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s, err := (&Backend{}).StartSession(ctx, c.spec)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			call := &box.Call{Code: []byte(c.code), Timeout: 10 * time.Second}
			for b.Loop() {
				res, err := s.Exec(ctx, call)
				if err != nil || res.Status != box.StatusOK {
					b.Fatalf("exec: %v %+v", err, res)
				}
			}
		})
	}
}

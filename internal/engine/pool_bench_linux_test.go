package engine

import (
	"context"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// benchEngine is an engine on the native backend, with a pool of one box for the
// default profile when pooled.
func benchEngine(b *testing.B, pooled bool) *Engine {
	b.Helper()
	testutil.RequireRoot(b)
	e, err := New(config.Default(), &native.Backend{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close() })
	if pooled {
		if err := e.EnablePool(PoolOptions{Size: 1, Warm: []string{"default"}}); err != nil {
			b.Fatal(err)
		}
	}
	return e
}

// benchSettle lets the box of the previous execution go before the next one.
const benchSettle = 50 * time.Millisecond

func benchExecute(b *testing.B, e *Engine) {
	b.Helper()
	res, err := e.Execute(context.Background(), &Request{Language: "python", Code: []byte("print(1)")})
	if err != nil {
		b.Fatal(err)
	}
	if res.Status != box.StatusOK || res.Stdout != "1\n" {
		b.Fatalf("result %+v", res)
	}
}

// BenchmarkExecutePooled is one execution of print(1) that takes a ready box from
// the warm pool: the timer stops while the pool refills and the previous box is
// destroyed (in the background), so every run is a hit on an idle host.
func BenchmarkExecutePooled(b *testing.B) {
	e := benchEngine(b, true)
	for b.Loop() {
		b.StopTimer()
		deadline := time.Now().Add(30 * time.Second)
		for e.PoolStats().Ready < 1 {
			if time.Now().After(deadline) {
				b.Fatalf("the pool did not refill: %+v", e.PoolStats())
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(benchSettle)
		b.StartTimer()
		benchExecute(b, e)
	}
	st := e.PoolStats()
	b.ReportMetric(float64(st.Hits)/float64(max(1, st.Hits+st.Misses)), "hit-ratio")
}

// BenchmarkExecuteCold is the same execution in a box made for it.
func BenchmarkExecuteCold(b *testing.B) {
	e := benchEngine(b, false)
	for b.Loop() {
		benchExecute(b, e)
	}
}

// BenchmarkSessionExecute is one call of `1+1` in a live Python session through the
// engine (audit off): the policy stage, the box's round trip (BenchmarkSessionExec
// in package native measures that alone), the filter and the result.
func BenchmarkSessionExecute(b *testing.B) {
	e := benchEngine(b, false)
	if err := e.EnableSessions(SessionOptions{}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	info, err := e.CreateSession(ctx, &SessionRequest{Owner: "bench", Language: "python"})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := e.SessionExecute(ctx, "bench", info.ID, &CallRequest{Code: []byte("1+1")})
		if err != nil || res.Status != box.StatusOK {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

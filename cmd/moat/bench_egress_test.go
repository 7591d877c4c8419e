package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestEgressCost runs the egress part of moat bench, small: both cases of both
// tables are measured, the numbers are positive and the ratios finite, and the
// proxy's own counters show the traffic went through it (egressCost checks them).
// No timing is asserted.
func TestEgressCost(t *testing.T) {
	rep, err := egressCost(context.Background(), 5, 1, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	egressTables(&md, &rep)
	t.Logf("\n%s", md.String())
	if len(rep.Request) != 2 || len(rep.Download) != 2 || rep.DownloadMiB != 1 {
		t.Fatalf("report %+v, want two rows in each table", rep)
	}
	for _, r := range rep.Request {
		if r.Error != "" || r.Runs != 5 || r.P50MS <= 0 || r.P99MS < r.P50MS || !sane(r.Ratio) {
			t.Errorf("request row %+v", r)
		}
	}
	for _, d := range rep.Download {
		if d.Error != "" || d.Runs != 2 || !sane(d.MBps) || !sane(d.Ratio) {
			t.Errorf("download row %+v", d)
		}
	}
	if rep.Request[0].Ratio != 1 || rep.Download[0].Ratio != 1 {
		t.Errorf("the direct rows are the baseline: ratios %v and %v, want 1", rep.Request[0].Ratio, rep.Download[0].Ratio)
	}
}

// sane reports whether v is a positive, finite number.
func sane(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// TestEgressReport: the egress tables have their rows, a failure shows in its row,
// and the JSON has the egress lists even when empty.
func TestEgressReport(t *testing.T) {
	rep := &benchReport{Egress: egressReport{
		DownloadMiB: 100,
		Request: []benchRow{
			{ID: "direct", Name: "direct", Runs: 40, P50MS: 1.5, P90MS: 2, P99MS: 3, Ratio: 1},
			{ID: "proxy", Name: "through the egress proxy", Runs: 40, P50MS: 2.25, P90MS: 3, P99MS: 4, Ratio: 1.5},
		},
		Download: []downloadRow{
			{ID: "direct", Name: "direct", Runs: 5, MBps: 812.34, Ratio: 1},
			{ID: "proxy", Name: "through the egress proxy", Error: "502 Bad Gateway"},
		},
	}}
	var md bytes.Buffer
	writeBenchReport(&md, rep)
	for _, want := range []string{
		"| egress: one HTTPS GET, fresh connection | runs | p50 | p90 | p99 | ratio to direct (p50) |",
		"| through the egress proxy | 40 | 2.25 ms | 3.00 ms | 4.00 ms | 1.50× |",
		"| egress: 100 MiB HTTPS download | runs | MB/s (median) | ratio to direct |",
		"| direct | 5 | 812.3 | 1.00× |",
		"| through the egress proxy | – | – | failed: 502 Bad Gateway |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}

	rep = &benchReport{}
	rep.normalize()
	var js bytes.Buffer
	printJSON(&js, rep)
	var m struct {
		Egress map[string]any `json:"egress"`
	}
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"request", "download"} {
		if l, ok := m.Egress[k].([]any); !ok || l == nil {
			t.Errorf("JSON egress.%s = %v, want an empty list", k, m.Egress[k])
		}
	}
}

//go:build integration

package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testutil"
)

// Compare with: go test -tags integration -run - -bench . ./integration/
// The ratio of the two is what `moat bench` reports as "ratio to bare python3".

func BenchmarkBarePython(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/usr/bin/python3", "-c", "print(1)").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMoatRunCold(b *testing.B) {
	testutil.RequireRoot(b)
	bin := testutil.MoatBinary(b)
	for b.Loop() {
		cmd := exec.Command(bin, "run", "--lang", "python", "-")
		cmd.Stdin = strings.NewReader("print(1)\n")
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "1\n" {
			b.Fatalf("moat run: %v: %q", err, out)
		}
	}
}

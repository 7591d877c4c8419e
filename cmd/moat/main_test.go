package main

import (
	"os"
	"testing"

	"github.com/moat-sandbox/moat/internal/childproc"
)

// TestMain lets the test binary act as moat's child roles, as main does: a test that
// makes a box in this process (a backend re-executes its own binary as the box's init,
// agent or launcher) then gets that role, not a second run of every test.
func TestMain(m *testing.M) {
	childproc.Dispatch()
	os.Exit(m.Run())
}

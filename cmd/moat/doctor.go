package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/moat-sandbox/moat/internal/box/native"
)

func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print the checks as JSON")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	checks := native.Probe()
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(checks)
		return 0
	}
	fmt.Fprintln(stdout, "moat doctor: what this host supports")
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark = "no  "
		}
		fmt.Fprintf(stdout, "  %s %-16s %s\n", mark, c.Name, c.Detail)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "moat run (backend native) enforces here:")
	for _, line := range native.Enforced(checks) {
		fmt.Fprintf(stdout, "  - %s\n", line)
	}
	return 0
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/box/docker"
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
	backends := backendChecks(checks)
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(append(checks, backends...))
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
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "backends:")
	for _, c := range backends {
		mark := "ok  "
		if !c.OK {
			mark = "no  "
		}
		fmt.Fprintf(stdout, "  %s %-16s %s\n", mark, strings.TrimPrefix(c.Name, "backend "), c.Detail)
	}
	return 0
}

// doctorTimeout bounds each backend probe, so doctor answers in seconds even when a
// daemon hangs.
const doctorTimeout = 2 * time.Second

// backendChecks reports whether each backend can make boxes here, with its version, or
// why not and how to fix it. checks are the native probe's.
func backendChecks(checks []native.Check) []native.Check {
	out := []native.Check{{Name: "backend native", OK: true, Detail: "available (see above for what it enforces)"}}
	if enforced := native.Enforced(checks); len(enforced) > 0 && strings.HasPrefix(enforced[0], "nothing") {
		out[0] = native.Check{Name: "backend native", OK: false, Detail: "unavailable: " + enforced[0]}
	}

	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	if e, err := docker.Connect(ctx, ""); err != nil {
		out = append(out, native.Check{Name: "backend docker", OK: false, Detail: err.Error()})
	} else {
		version, verr := e.Version(ctx)
		runtimes, rerr := e.Runtimes(ctx)
		detail := fmt.Sprintf("engine %s at %s, API %s", version, e.Host(), e.APIVersion())
		switch {
		case verr != nil:
			detail = fmt.Sprintf("engine at %s answers ping but not version: %v", e.Host(), verr)
		case rerr != nil:
			detail += fmt.Sprintf("; runtimes unknown: %v", rerr)
		default:
			detail += "; runtimes " + strings.Join(runtimes, ", ")
			if !slices.Contains(runtimes, "runsc") {
				detail += " (no runsc: runtime runsc needs gVisor registered in /etc/docker/daemon.json; scripts/backends does it)"
			}
		}
		_ = e.Close()
		out = append(out, native.Check{Name: "backend docker", OK: verr == nil, Detail: detail})
	}

	if path, err := exec.LookPath("runsc"); err != nil {
		out = append(out, native.Check{Name: "backend gvisor", OK: false,
			Detail: "runsc not found in PATH (Debian: apt-get install runsc; scripts/backends installs it)"})
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
		defer cancel()
		v, err := exec.CommandContext(ctx, path, "--version").Output()
		first, _, _ := strings.Cut(strings.TrimSpace(string(v)), "\n")
		switch {
		case err != nil:
			out = append(out, native.Check{Name: "backend gvisor", OK: false, Detail: fmt.Sprintf("%s --version failed: %v", path, err)})
		case os.Geteuid() != 0:
			out = append(out, native.Check{Name: "backend gvisor", OK: false, Detail: fmt.Sprintf("%s (%s), but runsc needs root here", path, first)})
		default:
			out = append(out, native.Check{Name: "backend gvisor", OK: true, Detail: fmt.Sprintf("%s (%s; platform ptrace)", path, first)})
		}
	}
	return out
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/box/docker"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/config"
)

func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print the checks as JSON")
	configPath := fs.String("config", "", "config file whose backend to check (default: the first of "+strings.Join(config.SearchPath(), ", ")+")")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	checks := native.Probe()
	selected, rb := selectedBackend(*configPath)
	backends := backendChecks(checks, rb)
	if rb.Name != "" {
		selected = selectedCheck(selected, rb, backends)
	}
	backends = append(backends, selected)
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

// selectedBackend loads the config as moat run would and resolves its backend. When
// the config cannot be loaded, the check says why and rb is zero.
func selectedBackend(configPath string) (native.Check, config.ResolvedBackend) {
	c := native.Check{Name: "backend selected"}
	cfg, err := loadConfig(configPath)
	if err != nil {
		c.Detail = "the config is invalid: " + err.Error()
		return c, config.ResolvedBackend{}
	}
	rb, err := cfg.ResolveBackend("")
	if err != nil {
		c.Detail = "the config is invalid: " + err.Error()
		return c, config.ResolvedBackend{}
	}
	return c, rb
}

// selectedCheck says which backend the config selects (moat run, serve and mcp use
// it unless --backend says otherwise) and whether it is available, by the line of
// backends for it; with a fallback, which one would be used.
func selectedCheck(c native.Check, rb config.ResolvedBackend, backends []native.Check) native.Check {
	available := func(name string) (native.Check, bool) {
		for _, b := range backends {
			if b.Name == "backend "+name {
				return b, b.OK
			}
		}
		return native.Check{}, false
	}
	c.Detail = rb.String() + " (the config's backend.name; --backend overrides it)"
	line, ok := available(rb.Name)
	c.OK = ok
	if ok {
		return c
	}
	c.Detail += ": unavailable"
	for _, fb := range rb.Fallback {
		if _, ok := available(fb.Name); ok {
			c.Detail = rb.String() + ": unavailable; backend.fallback makes moat use " + fb.String()
			c.OK = true
			return c
		}
	}
	if line.Detail != "" {
		c.Detail += " (" + line.Detail + ")"
	}
	return c
}

// doctorTimeout bounds each backend probe, so doctor answers in seconds even when a
// daemon hangs.
const doctorTimeout = 2 * time.Second

// backendChecks reports whether each backend can make boxes here, with its version, or
// why not and how to fix it. checks are the native probe's; rb is the config's
// backend, whose daemon address and image are checked (zero: the defaults).
func backendChecks(checks []native.Check, rb config.ResolvedBackend) []native.Check {
	out := []native.Check{{Name: "backend native", OK: true, Detail: "available (see above for what it enforces)"}}
	if enforced := native.Enforced(checks); len(enforced) > 0 && strings.HasPrefix(enforced[0], "nothing") {
		out[0] = native.Check{Name: "backend native", OK: false, Detail: "unavailable: " + enforced[0]}
	}
	image := rb.Image
	if image == "" {
		image = config.DefaultDockerImage
	}

	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	e, err := docker.Connect(ctx, rb.Host)
	if err != nil {
		out = append(out,
			native.Check{Name: "backend docker", OK: false, Detail: err.Error()},
			native.Check{Name: "backend gvisor", OK: false, Detail: gvisorNeedsDocker})
		return out
	}
	defer e.Close()
	version, verr := e.Version(ctx)
	runtimes, rerr := e.Runtimes(ctx)
	ierr := e.ImageExists(ctx, image)
	detail := fmt.Sprintf("engine %s at %s, API %s", version, e.Host(), e.APIVersion())
	switch {
	case verr != nil:
		detail = fmt.Sprintf("engine at %s answers ping but not version: %v", e.Host(), verr)
	case rerr != nil:
		detail += fmt.Sprintf("; runtimes unknown: %v", rerr)
	default:
		detail += "; runtimes " + strings.Join(runtimes, ", ")
	}
	if ierr != nil {
		detail += "; " + ierr.Error()
	} else {
		detail += "; image " + image
	}
	dockerOK := verr == nil && ierr == nil
	out = append(out, native.Check{Name: "backend docker", OK: dockerOK, Detail: detail})

	gv := native.Check{Name: "backend gvisor", OK: dockerOK && rerr == nil && slices.Contains(runtimes, config.RuntimeRunsc)}
	switch {
	case !dockerOK:
		gv.Detail = gvisorNeedsDocker
	case rerr != nil:
		gv.Detail = fmt.Sprintf("docker with runtime runsc: the daemon's runtimes are unknown: %v", rerr)
	case !gv.OK:
		gv.Detail = "docker with runtime runsc, but the daemon has no runsc: install runsc (apt-get install runsc) and register it " +
			"under \"runtimes\" in /etc/docker/daemon.json with runtimeArgs --platform=ptrace --network=none --oci-seccomp; scripts/backends does both"
	default:
		gv.Detail = "docker with runtime runsc" + runscVersion()
	}
	return append(out, gv)
}

// gvisorNeedsDocker is the gvisor line of doctor when docker is unavailable.
const gvisorNeedsDocker = "docker with runtime runsc (running runsc directly is not built yet): the docker backend is unavailable"

// runscVersion returns ", runsc VERSION" for the runsc in PATH, or "" when there is
// none (the daemon may know runsc by a path of its own).
func runscVersion() string {
	path, err := exec.LookPath("runsc")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	v, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(v)), "\n")
	return " (" + path + ": " + first + "; platform ptrace)"
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/box/docker"
	"github.com/moat-sandbox/moat/internal/box/gvisor"
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
	selected, rb, cfg := selectedBackend(*configPath)
	backends := backendChecks(checks, cfg)
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
// the config cannot be loaded, the check says why, rb is zero and cfg nil.
func selectedBackend(configPath string) (native.Check, config.ResolvedBackend, *config.Config) {
	c := native.Check{Name: "backend selected"}
	cfg, err := loadConfig(configPath)
	if err != nil {
		c.Detail = "the config is invalid: " + err.Error()
		return c, config.ResolvedBackend{}, nil
	}
	rb, err := cfg.ResolveBackend("")
	if err != nil {
		c.Detail = "the config is invalid: " + err.Error()
		return c, config.ResolvedBackend{}, nil
	}
	return c, rb, cfg
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
// why not and how to fix it. checks are the native probe's; cfg is the config, whose
// settings of each backend are checked (nil: the defaults).
func backendChecks(checks []native.Check, cfg *config.Config) []native.Check {
	out := []native.Check{{Name: "backend native", OK: true, Detail: "available (see above for what it enforces)"}}
	if enforced := native.Enforced(checks); len(enforced) > 0 && strings.HasPrefix(enforced[0], "nothing") {
		out[0] = native.Check{Name: "backend native", OK: false, Detail: "unavailable: " + enforced[0]}
	}
	if cfg == nil {
		cfg = &config.Config{}
	}
	dockerB, _ := cfg.ResolveBackend(config.BackendDocker)
	gvisorB, _ := cfg.ResolveBackend(config.BackendGVisor)
	out = append(out, dockerCheck(dockerB))
	return append(out, gvisorCheck(gvisorB))
}

// dockerCheck reports whether the docker backend d can make boxes: its daemon, the
// daemon's version and runtimes, and the images.
func dockerCheck(d config.ResolvedBackend) native.Check {
	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	e, err := docker.Connect(ctx, d.Host)
	if err != nil {
		return native.Check{Name: "backend docker", OK: false, Detail: err.Error()}
	}
	defer e.Close()
	version, verr := e.Version(ctx)
	runtimes, rerr := e.Runtimes(ctx)
	images := []string{d.Image}
	for _, lang := range slices.Sorted(maps.Keys(d.Images)) {
		images = append(images, d.Images[lang])
	}
	slices.Sort(images)
	images = slices.Compact(images)
	var ierr error
	for _, img := range images {
		if ierr = e.ImageExists(ctx, img); ierr != nil {
			break
		}
	}
	detail := fmt.Sprintf("engine %s at %s, API %s", version, e.Host(), e.APIVersion())
	switch {
	case verr != nil:
		detail = fmt.Sprintf("engine at %s answers ping but not version: %v", e.Host(), verr)
	case rerr != nil:
		detail += fmt.Sprintf("; runtimes unknown: %v", rerr)
	case slices.Contains(runtimes, config.RuntimeRunsc):
		detail += "; runtimes " + strings.Join(runtimes, ", ")
	default:
		detail += "; runtimes " + strings.Join(runtimes, ", ") + " (for runtime runsc: install runsc and register it " +
			"under \"runtimes\" in /etc/docker/daemon.json with runtimeArgs --platform=ptrace --network=none --oci-seccomp; scripts/backends does both)"
	}
	if ierr != nil {
		detail += "; " + ierr.Error()
	} else {
		detail += "; image " + strings.Join(images, ", ")
	}
	return native.Check{Name: "backend docker", OK: verr == nil && ierr == nil, Detail: detail}
}

// gvisorCheck reports whether the gvisor backend g can make boxes here (root, runsc,
// cgroups, the configured root filesystem), with runsc's version.
func gvisorCheck(g config.ResolvedBackend) native.Check {
	ctx, cancel := context.WithTimeout(context.Background(), doctorTimeout)
	defer cancel()
	runsc, version, err := gvisor.Probe(ctx, gvisor.Options{Runsc: g.Runsc, Platform: g.Platform, Rootfs: g.Rootfs})
	if err != nil {
		return native.Check{Name: "backend gvisor", OK: false, Detail: err.Error()}
	}
	root := g.Rootfs
	if root == "" {
		root = "the host's runtime trees"
	}
	return native.Check{Name: "backend gvisor", OK: true, Detail: fmt.Sprintf("%s (%s), platform %s, root %s", runsc, version, g.Platform, root)}
}

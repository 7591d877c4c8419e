package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/filter"
)

// cmdConfig is `moat config check [FILE]`: validate a config file (or the one moat
// would use) and print its problems with line numbers, or its warnings. Exit 0 when
// valid, 1 when not, 2 for usage errors.
func cmdConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: moat config check [FILE]")
		return exitUsage
	}
	fs := flag.NewFlagSet("moat config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "usage: moat config check [FILE]")
		return exitUsage
	}
	path := fs.Arg(0)
	if path == "" {
		found, err := config.Find()
		if err != nil {
			fmt.Fprintf(stderr, "moat: %v\n", err)
			return 1
		}
		if found == "" {
			fmt.Fprintf(stdout, "no config file found (searched %s): the built-in defaults apply\n", strings.Join(config.SearchPath(), ", "))
			return 0
		}
		path = found
	}
	cfg, err := config.Load(path)
	if err == nil {
		_, err = engine.New(cfg, nil, nil, nil) // filter rules are checked by the engine
	}
	if err != nil {
		fmt.Fprintln(stderr, strings.TrimPrefix(err.Error(), engine.ErrBadRequest.Error()+": "))
		return 1
	}
	var names []string
	for n := range config.BuiltinProfiles() {
		names = append(names, n)
	}
	for n := range cfg.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(stdout, "%s: ok (profiles: %s; default: %s)\n", path, strings.Join(names, ", "), defaultName(cfg))
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return 0
}

func defaultName(c *config.Config) string {
	if c.Profile == "" {
		return "default"
	}
	return c.Profile
}

// cmdPolicy is `moat policy check [--profile P] [--lang L] [--config F] [--json] FILE`:
// report what the policy would block, without running the code. Exit 0 when nothing
// would be blocked, 1 when something would, 2 for usage errors.
func cmdPolicy(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: moat policy check [--profile P] [--lang L] [--config F] [--json] FILE|-")
		return exitUsage
	}
	fs := flag.NewFlagSet("moat policy check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	profile := fs.String("profile", "", "policy profile (default: the config's)")
	lang := fs.String("lang", "", "language: python|bash (default: from FILE's extension)")
	configPath := fs.String("config", "", "config file")
	jsonOut := fs.Bool("json", false, "print the violations as JSON")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return exitUsage
	}
	f := defaultRunFlags()
	f.lang, f.profile = *lang, *profile
	req, cleanup, err := buildRequest(&f, pos, stdin)
	defer cleanup()
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	eng, err := newEngine(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	name, vs, err := eng.Check(context.Background(), req)
	if errors.Is(err, engine.ErrBadRequest) {
		fmt.Fprintf(stderr, "moat: %v\n", strings.TrimPrefix(err.Error(), engine.ErrBadRequest.Error()+": "))
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "moat: %s\n", filter.SanitizeError(err.Error()))
		return exitInternal
	}
	if *jsonOut {
		if vs == nil {
			vs = []box.Violation{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(struct {
			Profile    string          `json:"profile"`
			Violations []box.Violation `json:"violations"`
		}{name, vs})
	} else if len(vs) == 0 {
		fmt.Fprintf(stdout, "ok: profile %q would not block this code\n", name)
	} else {
		for _, v := range vs {
			fmt.Fprintf(stdout, "line %d: %s: %s\n", v.Line, v.Rule, v.Detail)
		}
	}
	if len(vs) > 0 {
		return 1
	}
	return 0
}

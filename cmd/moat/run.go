package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/filter"
)

// Exit statuses of `moat run` without --json when the code did not exit by itself.
// With --json, moat exits 0 whenever it printed a result.
const (
	exitTimeout     = 124 // as timeout(1)
	exitMemoryLimit = 137 // as a SIGKILLed process (the OOM killer)
	exitOutputLimit = 141 // as SIGPIPE: the output was cut off
	exitBlocked     = 126 // as "cannot execute": the policy refused the code
)

const runUsage = `Usage: moat run [flags] [FILE|-]

Runs Python or bash code from FILE, or from stdin when FILE is - or absent, in a fresh
box that is destroyed afterwards. The language is inferred from FILE's extension
(.py, .sh, .bash) unless --lang is given.

With --server URL, the run goes to a moat server (POST /v1/execute) with the same
options, output and exit statuses; 69 when the server cannot be reached.

--backend docker (or gvisor: docker with the runsc runtime) runs the box in a hardened
container instead of the native box; the config's backend section gives the daemon,
image and runtime. A backend that cannot start (no daemon, image or runtime) is moat's
failure, 70, with what is missing and how to get it; moat uses another backend only
when the config's backend.fallback lists one, and never when --backend is given.

Exit status without --json: the code's own exit status; 124 on timeout, 137 at the
memory limit, 141 for an output flood, 126 when the policy blocked the code, 128+N when
killed by signal N; 2 for usage errors (and an invalid config) and 70 when moat itself
failed. With --json, moat prints one JSON result and exits 0 whenever it produced one.

Flags:
`

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type runFlags struct {
	lang, timeout, memory, cpus, pids, disk, tmp, output, network, backend string
	configPath, profile, server                                            string
	jsonOut                                                                bool
	files, env                                                             multiFlag
	set                                                                    map[string]bool // flags given on the command line
}

// defaultRunFlags are the flag values when none is given (the README's defaults).
func defaultRunFlags() runFlags {
	return runFlags{
		timeout: "30s", memory: "256MiB", cpus: "1", pids: "64", disk: "100MiB", tmp: "64MiB",
		output: "1MiB", set: map[string]bool{},
	}
}

func cmdRun(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := defaultRunFlags()
	fs.StringVar(&f.lang, "lang", "", "language: python|bash (default: from FILE's extension)")
	fs.BoolVar(&f.jsonOut, "json", false, "print one JSON result object on stdout")
	fs.StringVar(&f.timeout, "timeout", f.timeout, "wall-clock limit (Go duration)")
	fs.StringVar(&f.memory, "memory", f.memory, "memory limit")
	fs.StringVar(&f.cpus, "cpus", f.cpus, "CPU limit in cores (e.g. 0.5, 2)")
	fs.StringVar(&f.pids, "pids", f.pids, "limit on processes and threads")
	fs.StringVar(&f.disk, "disk", f.disk, "size of the writable workspace")
	fs.StringVar(&f.tmp, "tmp", f.tmp, "size of /tmp")
	fs.StringVar(&f.output, "output-limit", f.output, "bytes of output kept per stream (head and tail)")
	fs.StringVar(&f.network, "network", f.network, "network: none, allow:HOST[:PORT][,HOST[:PORT]...] or open (config network.allow_open); default the profile's, none unless the config gives it one")
	fs.StringVar(&f.backend, "backend", f.backend, backendFlagUsage)
	fs.Var(&f.files, "file", "copy host file SRC into the workspace, as DEST if given: SRC[:DEST] (repeatable)")
	fs.Var(&f.env, "env", "set KEY=VALUE in the code's environment (repeatable)")
	fs.StringVar(&f.configPath, "config", "", "config file (default: the first of "+strings.Join(config.SearchPath(), ", ")+")")
	fs.StringVar(&f.profile, "profile", "", "policy profile: strict, default, open or one of the config (default: the config's)")
	fs.StringVar(&f.server, "server", "", "run on the moat server at URL (moat serve) instead of in a local box; the token is $MOAT_TOKEN or the server's token file")
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }

	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return exitUsage // flag already printed the error
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	req, cleanup, err := buildRequest(&f, pos, stdin)
	defer cleanup()
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	if f.server != "" {
		return runRemote(&f, req, stdout, stderr)
	}
	cfg, err := loadConfig(f.configPath)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	rb, err := cfg.ResolveBackend(f.backend)
	if err != nil {
		fmt.Fprintf(stderr, "moat: --backend: %v\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	backend, closeBackend, err := openBackend(ctx, rb, log)
	if err != nil {
		// Not sanitized: the host's operator needs the daemon's address and socket.
		return runFailed(f.jsonOut, err.Error(), stdout, stderr)
	}
	defer closeBackend()
	// A moat run killed before it could destroy its box (kill -9) left its cgroups:
	// the next run removes them, as moat serve does at start.
	defer reapBoxesBehind(log, slog.LevelInfo)()
	eng, err := engine.New(cfg, backend, os.Environ(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	// The run is audited like any other: in the data directory's store.
	trail, err := openAudit(cfg, "", eng, nil, log, false)
	if err != nil {
		fmt.Fprintf(stderr, "moat: audit: %v\n", err)
		return exitInternal
	}
	defer trail.close(stderr)
	req.Caller = localCaller()
	if !f.jsonOut {
		req.Stdout, req.Stderr = stdout, stderr
	}

	res, err := eng.Execute(ctx, req)
	if errors.Is(err, engine.ErrBadRequest) {
		fmt.Fprintf(stderr, "moat: %v\n", strings.TrimPrefix(err.Error(), engine.ErrBadRequest.Error()+": "))
		return exitUsage
	}
	if err != nil {
		return runFailed(f.jsonOut, filter.SanitizeError(err.Error()), stdout, stderr)
	}
	if f.jsonOut {
		writeJSON(stdout, res)
		return 0
	}
	return reportLive(res, stderr)
}

// runFailed reports that moat itself failed with msg (with --json, also as a result
// of status internal_error) and returns exitInternal.
func runFailed(jsonOut bool, msg string, stdout, stderr io.Writer) int {
	if jsonOut {
		r := &box.Result{Status: box.StatusInternalError, ExitCode: -1, Error: msg}
		r.Normalize()
		writeJSON(stdout, r)
	}
	fmt.Fprintf(stderr, "moat: %s\n", msg)
	return exitInternal
}

// newEngine loads the config (the given file, or the first found on the search path,
// or the defaults) and builds the engine on the native backend, for the commands that
// run no box (policy check, bench policy). An invalid config is an error: moat never
// falls back to defaults silently.
func newEngine(configPath string) (*engine.Engine, error) {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return nil, err
	}
	return engine.New(cfg, &native.Backend{}, os.Environ(), nil)
}

func loadConfig(configPath string) (*config.Config, error) {
	if configPath == "" {
		found, err := config.Find()
		if err != nil {
			return nil, err
		}
		if found == "" {
			return config.Default(), nil
		}
		configPath = found
	}
	return config.Load(configPath)
}

func writeJSON(w io.Writer, r *box.Result) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(r)
}

// reportLive finishes a run whose output was already streamed: it says why the code was
// stopped, if it was, and maps the status to moat's exit status.
func reportLive(res *box.Result, stderr io.Writer) int {
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "moat: warning: %s\n", w)
	}
	if res.Truncated {
		fmt.Fprintln(stderr, "moat: output truncated at the output limit (--output-limit)")
	}
	switch res.Status {
	case box.StatusOK:
		return 0
	case box.StatusBlocked:
		for _, v := range res.Violations {
			if v.Line > 0 {
				fmt.Fprintf(stderr, "moat: blocked: %s (line %d)\n", v.Detail, v.Line)
			} else {
				fmt.Fprintf(stderr, "moat: blocked: %s\n", v.Detail)
			}
		}
		return exitBlocked
	case box.StatusError, box.StatusKilled:
		return res.ExitCode
	case box.StatusTimeout:
		fmt.Fprintln(stderr, "moat: timeout: the code was stopped at its time limit (--timeout)")
		return exitTimeout
	case box.StatusMemoryLimit:
		fmt.Fprintln(stderr, "moat: memory limit: the code was killed at the box's memory limit (--memory)")
		return exitMemoryLimit
	case box.StatusOutputLimit:
		fmt.Fprintln(stderr, "moat: output limit: killed for flooding output")
		return exitOutputLimit
	default:
		fmt.Fprintf(stderr, "moat: %s\n", res.Status)
		return exitInternal
	}
}

// parseInterleaved parses flags that may come before or after the FILE argument.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// buildRequest turns flags into an engine request; limits are set only for the flags
// given, so the profile's and the config's limits apply otherwise. The returned cleanup
// closes opened files and is always safe to call.
func buildRequest(f *runFlags, pos []string, stdin io.Reader) (*engine.Request, func(), error) {
	var opened []*os.File
	cleanup := func() {
		for _, o := range opened {
			o.Close()
		}
	}
	spec := &engine.Request{Profile: f.profile, Network: f.network}
	if f.set["network"] {
		if _, err := engine.ParseNetwork(f.network); err != nil {
			return nil, cleanup, err
		}
	}
	var err error
	if spec.Limits, err = parseLimits(f); err != nil {
		return nil, cleanup, err
	}
	disk := box.DefaultLimits.Disk // bounds --file sizes
	if f.set["disk"] {
		disk = spec.Limits.Disk
	}
	for _, kv := range f.env {
		if err := box.CheckEnv(kv); err != nil {
			return nil, cleanup, fmt.Errorf("--env: %w", err)
		}
		spec.Env = append(spec.Env, kv)
	}

	if len(pos) > 1 {
		return nil, cleanup, fmt.Errorf("expected at most one FILE, got %d: %s", len(pos), strings.Join(pos, " "))
	}
	src := "-"
	if len(pos) == 1 {
		src = pos[0]
	}
	var code []byte
	if src == "-" {
		code, err = io.ReadAll(io.LimitReader(stdin, box.MaxCodeBytes+1))
	} else {
		code, err = readCodeFile(src)
	}
	if err != nil {
		return nil, cleanup, err
	}
	if err := box.CheckCode(code); err != nil {
		return nil, cleanup, err
	}
	spec.Code = code
	switch {
	case f.lang != "":
		l, err := box.LookupLanguage(f.lang)
		if err != nil {
			return nil, cleanup, fmt.Errorf("--lang: %w", err)
		}
		spec.Language = l.Name
	case src == "-":
		return nil, cleanup, fmt.Errorf("cannot infer the language of code read from stdin; pass --lang %s", box.LanguageNames())
	default:
		l, err := box.LanguageForFile(src)
		if err != nil {
			return nil, cleanup, err
		}
		spec.Language = l.Name
	}

	seen := map[string]bool{}
	for _, fl := range f.files {
		file, err := openInputFile(fl, disk)
		if err != nil {
			return nil, cleanup, fmt.Errorf("--file %s: %w", fl, err)
		}
		opened = append(opened, file.Src)
		if seen[file.Dest] {
			return nil, cleanup, fmt.Errorf("--file %s: destination %s given twice", fl, file.Dest)
		}
		seen[file.Dest] = true
		spec.Files = append(spec.Files, file)
	}
	return spec, cleanup, nil
}

// parseLimits validates every limit flag (so a bad value is an error even when it is
// the default text) and returns those the user set.
func parseLimits(f *runFlags) (box.Limits, error) {
	var l box.Limits
	timeout, err := config.ParseDuration(f.timeout)
	if err != nil {
		return l, fmt.Errorf("--timeout: %w", err)
	}
	sizes := map[string]int64{}
	for _, s := range []struct{ name, val string }{
		{"memory", f.memory}, {"disk", f.disk}, {"tmp", f.tmp}, {"output-limit", f.output},
	} {
		v, err := config.ParseSize(s.val)
		if err != nil {
			return l, fmt.Errorf("--%s: %w", s.name, err)
		}
		sizes[s.name] = v
	}
	if sizes["memory"] < 16<<20 {
		return l, fmt.Errorf("--memory: %s is below the minimum of 16MiB", f.memory)
	}
	cpus, err := strconv.ParseFloat(f.cpus, 64)
	if err != nil || !(cpus >= 0.01 && cpus <= 1024) {
		return l, fmt.Errorf("--cpus: invalid value %q (want a number of cores between 0.01 and 1024)", f.cpus)
	}
	pids, err := strconv.ParseInt(f.pids, 10, 64)
	if err != nil || pids < 1 || pids > 1<<22 {
		return l, fmt.Errorf("--pids: invalid value %q (want a whole number from 1)", f.pids)
	}
	if f.set["timeout"] {
		l.Timeout = timeout
	}
	if f.set["memory"] {
		l.Memory = sizes["memory"]
	}
	if f.set["disk"] {
		l.Disk = sizes["disk"]
	}
	if f.set["tmp"] {
		l.Tmp = sizes["tmp"]
	}
	if f.set["output-limit"] {
		l.Output = sizes["output-limit"]
	}
	if f.set["cpus"] {
		l.CPUs = cpus
	}
	if f.set["pids"] {
		l.Pids = pids
	}
	return l, nil
}

func readCodeFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read code: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read code: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cannot read code: %s is not a regular file", path)
	}
	code, err := io.ReadAll(io.LimitReader(f, box.MaxCodeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read code: %w", err)
	}
	return code, nil
}

// openInputFile opens SRC of a --file SRC[:DEST] flag. The box's init copies from the
// open file; the path is never reopened.
func openInputFile(arg string, max int64) (box.File, error) {
	src, dest, hasDest := strings.Cut(arg, ":")
	if src == "" {
		return box.File{}, fmt.Errorf("want SRC[:DEST]")
	}
	if !hasDest {
		dest = lastElem(src)
	}
	dest, err := box.CleanDest(dest)
	if err != nil {
		return box.File{}, err
	}
	f, err := os.Open(src)
	if err != nil {
		return box.File{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return box.File{}, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return box.File{}, fmt.Errorf("%s is not a regular file", src)
	}
	if fi.Size() > max {
		f.Close()
		return box.File{}, fmt.Errorf("%s is %d bytes, larger than the workspace (%d bytes; see --disk)", src, fi.Size(), max)
	}
	return box.File{Dest: dest, Src: f}, nil
}

func lastElem(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

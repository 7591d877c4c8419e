package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/client"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
)

// exitUnavailable is moat's status when the server cannot be reached (EX_UNAVAILABLE).
const exitUnavailable = 69

// envServer names the variable that gives the server's URL to the client commands.
const envServer = "MOAT_SERVER"

// defaultServer is the server's URL when neither --server nor $MOAT_SERVER is given.
const defaultServer = "http://" + config.DefaultListen

const sessionUsage = `Usage: moat session COMMAND [flags] [args]

Sessions keep one box alive on a moat server (moat serve), with a persistent Python
interpreter or bash shell: variables, imports, the working directory and files
persist across calls until the session is removed or expires.

Commands:
  create [flags]              start a session; prints its id (--json: its description)
  exec ID [FILE|-]            run code from FILE or stdin in the session; output streams
                              live and moat exits as moat run does (--json: the result)
  put ID SRC [DEST]           upload SRC (- for stdin) to DEST in the workspace
                              (default: SRC's base name)
  get ID PATH [DEST|-]        download PATH to DEST (default: PATH's base name; -: stdout)
  ls [ID]                     list your sessions, or the files of session ID
  rm ID [PATH]                remove the session (destroying its box), or one file

Every command takes --server URL (default: $MOAT_SERVER, else ` + defaultServer + `).
The API token is $MOAT_TOKEN, else the token file that moat serve wrote in its data
directory (--data-dir; default: server.data_dir of the config, else ` + config.SystemDataDir + `
for root and ~/.local/share/moat for others).

Exit status: exec as moat run; otherwise 0 on success, 2 for usage errors and requests
the server refused, 69 when the server cannot be reached, 70 when it failed.
`

func cmdSession(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, sessionUsage)
		return exitUsage
	}
	cmds := map[string]func([]string, io.Reader, io.Writer, io.Writer) int{
		"create": sessionCreate, "exec": sessionExec, "put": sessionPut,
		"get": sessionGet, "ls": sessionList, "rm": sessionRemove,
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, sessionUsage)
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "moat session: unknown command %q\n\n%s", args[0], sessionUsage)
		return exitUsage
	}
	return cmd(args[1:], stdin, stdout, stderr)
}

// serverFlags are the flags of every client command.
type serverFlags struct {
	server, dataDir, configPath string
}

func (f *serverFlags) register(fs *flag.FlagSet) {
	def := os.Getenv(envServer)
	if def == "" {
		def = defaultServer
	}
	fs.StringVar(&f.server, "server", def, "URL of the moat server ($"+envServer+")")
	fs.StringVar(&f.dataDir, "data-dir", "", "the server's data directory, where its token file is (default: server.data_dir of the config, else moat serve's default)")
	fs.StringVar(&f.configPath, "config", "", "config file to read server.data_dir from (default: the search path of moat serve)")
}

// client returns a client of the server with the token found.
func (f *serverFlags) client() (*client.Client, error) {
	if os.Getenv("MOAT_TOKEN") == "" && f.dataDir == "" {
		f.dataDir = config.DefaultDataDir()
		cfg, err := loadConfig(f.configPath)
		if err != nil {
			return nil, err
		}
		if cfg.Server.DataDir != "" {
			f.dataDir = cfg.Server.DataDir
		}
	}
	return newClient(f.server, f.dataDir)
}

// connect makes the client of a subcommand, with a context that SIGINT and SIGTERM
// cancel (the caller calls stop); when it cannot, it says why on stderr and ok is
// false: a usage error.
func (f *serverFlags) connect(stderr io.Writer) (c *client.Client, ctx context.Context, stop context.CancelFunc, ok bool) {
	c, err := f.client()
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return nil, nil, nil, false
	}
	ctx, stop = signalContext()
	return c, ctx, stop, true
}

// newClient checks the server's URL and finds the token.
func newClient(server, dataDir string) (*client.Client, error) {
	if !strings.HasPrefix(server, "http://") && !strings.HasPrefix(server, "https://") {
		return nil, fmt.Errorf("--server %q: want an http:// or https:// URL", server)
	}
	token, err := client.Token(dataDir)
	if err != nil {
		return nil, err
	}
	return client.New(server, token), nil
}

// newFlagSet makes the flag set of one client command.
func newFlagSet(name, usage string, stderr io.Writer, sf *serverFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("moat session "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sf.register(fs)
	fs.Usage = func() { fmt.Fprintf(stderr, "Usage: moat session %s\n\nFlags:\n", usage); fs.PrintDefaults() }
	return fs
}

// parseArgs parses interleaved flags and positional arguments, and checks the
// number of the latter. It returns the exit status to use when it fails (-1: go on).
func parseArgs(fs *flag.FlagSet, args []string, min, max int, stderr io.Writer) ([]string, int) {
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0
	}
	if err != nil {
		return nil, exitUsage
	}
	if len(pos) < min || len(pos) > max {
		fmt.Fprintf(stderr, "moat: %s: wrong number of arguments\n", fs.Name())
		fs.Usage()
		return nil, exitUsage
	}
	return pos, -1
}

// parseFlags parses a command that takes flags only. It returns -1 to go on, or the
// exit status: 0 after --help, exitUsage for a bad flag or an argument (said on
// stderr as "<command>: unexpected argument").
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage
	}
	return -1
}

// clientError reports an error of a client call and returns moat's exit status.
func clientError(stderr io.Writer, c *client.Client, err error) int {
	var e *client.Error
	var ue *client.UnreachableError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "moat: %v\n", ue)
		return exitUnavailable
	case errors.As(err, &e) && e.Status == http.StatusUnauthorized:
		fmt.Fprintf(stderr, "moat: the server at %s refused the API token: %s (set $MOAT_TOKEN, or --data-dir to the server's data directory)\n", c.BaseURL(), e.Message)
		return exitUsage
	case errors.As(err, &e) && e.Status >= 500:
		fmt.Fprintf(stderr, "moat: server error: %s\n", e.Message)
		return exitInternal
	case errors.As(err, &e):
		fmt.Fprintf(stderr, "moat: %s\n", e.Message)
		if e.RetryAfter > 0 {
			fmt.Fprintf(stderr, "moat: retry in %v\n", e.RetryAfter)
		}
		return exitUsage
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "moat: interrupted")
		return exitInternal
	}
	fmt.Fprintf(stderr, "moat: %v\n", err)
	return exitInternal
}

// signalContext is cancelled by SIGINT and SIGTERM: a call in flight is abandoned
// and the server stops its box.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func sessionCreate(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("create", "create [flags]", stderr, &sf)
	f := defaultRunFlags()
	fs.StringVar(&f.lang, "lang", "python", "language: python|bash")
	fs.StringVar(&f.profile, "profile", "", "policy profile (default: your principal's)")
	fs.StringVar(&f.timeout, "timeout", f.timeout, "default per-call timeout")
	fs.StringVar(&f.memory, "memory", f.memory, "memory limit of the session's box")
	fs.StringVar(&f.cpus, "cpus", f.cpus, "CPU limit in cores")
	fs.StringVar(&f.pids, "pids", f.pids, "limit on processes and threads")
	fs.StringVar(&f.disk, "disk", f.disk, "size of the workspace")
	fs.StringVar(&f.tmp, "tmp", f.tmp, "size of /tmp")
	fs.StringVar(&f.output, "output-limit", f.output, "bytes of output kept per stream and call")
	fs.Var(&f.env, "env", "set KEY=VALUE in the session's environment (repeatable)")
	fs.StringVar(&f.network, "network", "", "narrow the profile's network: none or allow:HOST[:PORT],... (default: the profile's)")
	idle := fs.String("idle-ttl", "", "end the session after this long unused (default: the server's, 10m)")
	life := fs.String("max-lifetime", "", "end the session this long after it starts (default: the server's, 1h)")
	jsonOut := fs.Bool("json", false, "print the session's description as JSON")
	if _, code := parseArgs(fs, args, 0, 0, stderr); code >= 0 {
		return code
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	lim, err := parseLimits(&f)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	env, err := envMap(f.env)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	for name, v := range map[string]string{"idle-ttl": *idle, "max-lifetime": *life} {
		if v != "" {
			if _, err := config.ParseDuration(v); err != nil {
				fmt.Fprintf(stderr, "moat: --%s: %v\n", name, err)
				return exitUsage
			}
		}
	}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	info, err := c.CreateSession(ctx, &api.SessionRequest{
		Language: f.lang, Profile: f.profile, Limits: wireLimits(lim), Env: env, Network: f.network,
		IdleTTL: *idle, MaxLifetime: *life,
	})
	if err != nil {
		return clientError(stderr, c, err)
	}
	if *jsonOut {
		printJSON(stdout, info)
		return 0
	}
	fmt.Fprintln(stdout, info.ID)
	return 0
}

func sessionExec(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("exec", "exec [flags] ID [FILE|-]", stderr, &sf)
	timeout := fs.String("timeout", "", "bound this call (default: the session's timeout)")
	jsonOut := fs.Bool("json", false, "print one JSON result object on stdout")
	pos, code := parseArgs(fs, args, 1, 2, stderr)
	if code >= 0 {
		return code
	}
	if *timeout != "" {
		if _, err := config.ParseDuration(*timeout); err != nil {
			fmt.Fprintf(stderr, "moat: --timeout: %v\n", err)
			return exitUsage
		}
	}
	src := "-"
	if len(pos) == 2 {
		src = pos[1]
	}
	codeText, err := readCode(src, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	var out *client.Streams
	if !*jsonOut {
		out = &client.Streams{Stdout: stdout, Stderr: stderr}
	}
	res, err := c.SessionExecute(ctx, pos[0], &api.CallRequest{Code: string(codeText), Timeout: *timeout}, out)
	if err != nil {
		return clientError(stderr, c, err)
	}
	if *jsonOut {
		writeJSON(stdout, res)
		return 0
	}
	// As a notebook shows it: the value of a trailing expression, and a note for
	// each figure (the PNGs are in the --json result).
	if res.Result != nil {
		fmt.Fprintln(stdout, *res.Result)
	}
	for i, d := range res.Display {
		fmt.Fprintf(stderr, "moat: display %d: %s (%d bytes of base64; use --json to get it)\n", i+1, d.MIMEType, len(d.Data))
	}
	return reportLive(res, stderr)
}

// readCode reads code from a file or, for "-", from stdin, and checks it.
func readCode(src string, stdin io.Reader) ([]byte, error) {
	var code []byte
	var err error
	if src == "-" {
		code, err = io.ReadAll(io.LimitReader(stdin, box.MaxCodeBytes+1))
	} else {
		code, err = readCodeFile(src)
	}
	if err != nil {
		return nil, err
	}
	if err := box.CheckCode(code); err != nil {
		return nil, err
	}
	return code, nil
}

func sessionPut(args []string, stdin io.Reader, _, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("put", "put [flags] ID SRC [DEST]", stderr, &sf)
	pos, code := parseArgs(fs, args, 2, 3, stderr)
	if code >= 0 {
		return code
	}
	id, src := pos[0], pos[1]
	dest := lastElem(src)
	if len(pos) == 3 {
		dest = pos[2]
	} else if src == "-" {
		fmt.Fprintln(stderr, "moat: put: give DEST when SRC is - (stdin)")
		return exitUsage
	}
	var r io.Reader = stdin
	size := int64(-1)
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			fmt.Fprintf(stderr, "moat: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			fmt.Fprintf(stderr, "moat: %v\n", err)
			return exitUsage
		}
		if !fi.Mode().IsRegular() {
			fmt.Fprintf(stderr, "moat: %s is not a regular file\n", src)
			return exitUsage
		}
		r, size = f, fi.Size()
	}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	put, err := c.PutFile(ctx, id, dest, r, size)
	if err != nil {
		return clientError(stderr, c, err)
	}
	fmt.Fprintf(stderr, "moat: put %s (%d bytes)\n", put.Path, put.Size)
	return 0
}

func sessionGet(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("get", "get [flags] ID PATH [DEST|-]", stderr, &sf)
	pos, code := parseArgs(fs, args, 2, 3, stderr)
	if code >= 0 {
		return code
	}
	id, path := pos[0], pos[1]
	dest := lastElem(path)
	if len(pos) == 3 {
		dest = pos[2]
	}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	if dest == "-" {
		if _, err := c.GetFile(ctx, id, path, stdout); err != nil {
			return clientError(stderr, c, err)
		}
		return 0
	}
	// Download next to DEST and rename into place, so that a failed download leaves
	// no half file under DEST's name.
	dir := filepath.Dir(dest)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dest)+".moat-*")
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	n, err := c.GetFile(ctx, id, path, tmp)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return clientError(stderr, c, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	fmt.Fprintf(stderr, "moat: got %s (%d bytes)\n", dest, n)
	return 0
}

func sessionList(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("ls", "ls [flags] [ID]", stderr, &sf)
	jsonOut := fs.Bool("json", false, "print JSON")
	dir := fs.String("dir", "", "with ID: list below this workspace directory")
	pos, code := parseArgs(fs, args, 0, 1, stderr)
	if code >= 0 {
		return code
	}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if len(pos) == 0 {
		list, err := c.ListSessions(ctx)
		if err != nil {
			return clientError(stderr, c, err)
		}
		if *jsonOut {
			printJSON(stdout, api.SessionList{Sessions: list})
			return 0
		}
		fmt.Fprintln(tw, "ID\tLANGUAGE\tPROFILE\tSTATE\tCALLS\tCREATED\tEXPIRES")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Language, s.Profile, s.State, s.Calls,
				s.CreatedAt.Local().Format(time.DateTime), s.ExpiresAt.Local().Format(time.DateTime))
		}
		return 0
	}
	files, err := c.ListFiles(ctx, pos[0], *dir)
	cut := errors.Is(err, box.ErrListTruncated)
	if err != nil && !cut {
		return clientError(stderr, c, err)
	}
	if cut {
		fmt.Fprintf(stderr, "moat: the listing was cut after %d entries; give --dir to list a directory below\n", len(files))
	}
	if *jsonOut {
		printJSON(stdout, api.FileList{Files: files, Truncated: cut})
		return 0
	}
	for _, f := range files {
		size := strconv.FormatInt(f.Size, 10)
		if f.Dir {
			size = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Mode, size, f.ModTime.Local().Format(time.DateTime), f.Path)
	}
	return 0
}

func sessionRemove(args []string, _ io.Reader, _, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("rm", "rm [flags] ID [PATH]", stderr, &sf)
	pos, code := parseArgs(fs, args, 1, 2, stderr)
	if code >= 0 {
		return code
	}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	var err error
	if len(pos) == 2 {
		err = c.RemoveFile(ctx, pos[0], pos[1])
	} else {
		err = c.DeleteSession(ctx, pos[0])
	}
	if err != nil {
		return clientError(stderr, c, err)
	}
	return 0
}

// envMap checks KEY=VALUE flags and returns them as the API's map (later wins).
func envMap(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		if err := box.CheckEnv(kv); err != nil {
			return nil, fmt.Errorf("--env: %w", err)
		}
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out, nil
}

// wireLimits spells parsed limits for the API; nil when none is set.
func wireLimits(l box.Limits) *api.Limits {
	if l == (box.Limits{}) {
		return nil
	}
	var w api.Limits
	if l.Timeout != 0 {
		w.Timeout = l.Timeout.String()
	}
	size := func(v int64) string {
		if v == 0 {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	w.Memory, w.Disk, w.Tmp, w.OutputLimit = size(l.Memory), size(l.Disk), size(l.Tmp), size(l.Output)
	if l.CPUs != 0 {
		w.CPUs = &l.CPUs
	}
	if l.Pids != 0 {
		w.Pids = &l.Pids
	}
	return &w
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// runRemote is moat run --server: the request goes to the server's /v1/execute, and
// the result is printed as a local run's.
func runRemote(f *runFlags, req *engine.Request, stdout, stderr io.Writer) int {
	if f.set["backend"] {
		fmt.Fprintln(stderr, "moat: --backend applies to local runs; the server uses its own")
		return exitUsage
	}
	in := &api.ExecuteRequest{Language: req.Language, Code: string(req.Code), Profile: req.Profile, Limits: wireLimits(req.Limits), Network: req.Network}
	var err error
	if in.Env, err = envMap(req.Env); err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	for _, fl := range req.Files {
		data, err := io.ReadAll(fl.Src)
		if err != nil {
			fmt.Fprintf(stderr, "moat: --file %s: %v\n", fl.Dest, err)
			return exitUsage
		}
		in.Files = append(in.Files, api.InputFile{Path: fl.Dest, Content: base64.StdEncoding.EncodeToString(data)})
	}
	sf := serverFlags{server: f.server, configPath: f.configPath}
	c, ctx, stop, ok := sf.connect(stderr)
	if !ok {
		return exitUsage
	}
	defer stop()
	var out *client.Streams
	if !f.jsonOut {
		out = &client.Streams{Stdout: stdout, Stderr: stderr}
	}
	res, err := c.Execute(ctx, in, out)
	if err != nil {
		code := clientError(stderr, c, err)
		if f.jsonOut && code == exitInternal {
			r := &box.Result{Status: box.StatusInternalError, ExitCode: -1, Error: err.Error()}
			r.Normalize()
			writeJSON(stdout, r)
		}
		return code
	}
	if f.jsonOut {
		writeJSON(stdout, res)
		return 0
	}
	return reportLive(res, stderr)
}

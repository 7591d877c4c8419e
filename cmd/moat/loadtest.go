package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/client"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/linux/cgroup"
)

const loadtestUsage = `Usage: moat loadtest [flags]

Runs concurrent clients against a moat server: half of them run one-shot
executions (POST /v1/execute), the other half each create a session, run their
executions in it and remove it. Every result is checked. A 429 (rate_limited,
quota_exceeded, session_limit) is a documented outcome: it is retried after its
Retry-After up to 3 times and then counted as a 429; anything else is an error.

Without --server, moat starts its own server (moat serve on 127.0.0.1, a temporary
data directory, one API key with quotas large enough for the load) and, after the
load, checks that every box is gone: no process left in a box cgroup of that server
or running as a box's host uid, and no box cgroup of that server under
/sys/fs/cgroup, once while the server still runs and once after it stopped.

Before the load it measures the same program run by the bare interpreter (serially,
as moat bench does) and serially through the idle server, for the ratios.

The report is a markdown table (--json: one JSON object) of executions, ok, 429s,
errors, executions per second and p50/p90/p99/max latency, by kind.

Exit status: 0 when every execution succeeded or got a 429 and nothing was left
behind; 1 otherwise; 2 for usage errors.

Flags:
`

// Load test settings that are not flags.
const (
	loadRetries      = 3               // retries of a request answered 429
	loadCallTimeout  = 2 * time.Minute // bound on one request, retries excluded
	loadBaselineRuns = 20              // serial runs of the bare interpreter (after 3 warm-ups)
	loadIdleRuns     = 10              // serial one-shot executions on the idle server (after 2 warm-ups)
	loadCleanupWait  = 5 * time.Second // for boxes to go after the load, server still running
	// loadPoolSize is the own server's warm pool: that many ready boxes (of the one
	// profile the load uses) stay while it runs, and the box of the zygote they are
	// forked from (native, as root); the check after shutdown counts them.
	loadPoolSize     = 2
	loadZygotes      = 1
	loadFirstErrors  = 5 // errors kept for the report
	loadBareBash     = "/bin/bash"
	loadOwnPrincipal = "loadtest"
)

// Host uids of a box's processes when moat runs as root: native.HostRootUID (init)
// and native.HostBoxUID (the code). Those names exist on Linux only, and this file
// builds everywhere; the report lists the uids it checked, and the integration test
// compares them with native's.
const (
	loadHostRootUID = 1_000_000_000
	loadHostBoxUID  = loadHostRootUID + 65534
)

// loadProgram is what every client runs, and how its output is checked.
type loadProgram struct {
	lang    string // set from the key of loadPrograms
	oneShot string // the one-shot program
	want    string // its stdout
	bare    []string
	// session is run repeatedly in one session and prints a counter that must go
	// 1, 2, 3...; count returns the counter of a call's result (-1 when there is
	// none) and what is wrong with the result, if anything.
	session string
	count   func(*box.Result) (int, string)
}

var loadPrograms = map[string]loadProgram{
	"python": {
		oneShot: "print(sum(range(1000)))",
		want:    "499500\n",
		bare:    []string{benchPython, "-c", "print(sum(range(1000)))"},
		// The counter comes back twice: printed, and as the trailing expression's
		// value (which must start a line to be returned in "result").
		session: "x = x + 1 if 'x' in dir() else 1\nprint(x)\nx",
		count: func(r *box.Result) (int, string) {
			if r.Result == nil {
				return lastInt(r.Stdout), fmt.Sprintf("no result, stdout %q", r.Stdout)
			}
			n, err := strconv.Atoi(*r.Result)
			if err != nil {
				return lastInt(r.Stdout), fmt.Sprintf("result %q, stdout %q", *r.Result, r.Stdout)
			}
			if r.Stdout != *r.Result+"\n" {
				return n, fmt.Sprintf("stdout %q but result %q", r.Stdout, *r.Result)
			}
			return n, ""
		},
	},
	"bash": {
		oneShot: "echo $((999 * 1000 / 2))",
		want:    "499500\n",
		bare:    []string{loadBareBash, "-c", "echo $((999 * 1000 / 2))"},
		session: `x=$(( ${x:-0} + 1 )); echo "$x"`,
		count: func(r *box.Result) (int, string) {
			n, err := strconv.Atoi(strings.TrimSuffix(r.Stdout, "\n"))
			if err != nil || r.Stdout != strconv.Itoa(n)+"\n" {
				return lastInt(r.Stdout), fmt.Sprintf("stdout %q", r.Stdout)
			}
			return n, ""
		},
	},
}

// lastInt returns the number on the last line of s, -1 when there is none.
func lastInt(s string) int {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil {
		return -1
	}
	return n
}

// loadOutcome classifies one execution.
type loadOutcome int

const (
	outcomeOK    loadOutcome = iota
	outcome429               // still 429 after every retry
	outcomeError             // anything else
)

// loadSample is one execution (or session create/delete) as a client saw it.
type loadSample struct {
	outcome loadOutcome
	latency time.Duration // of the last attempt
	end     time.Time     // when the last attempt ended
	retries int           // 429s retried
}

// loadStats summarises samples of one kind.
type loadStats struct {
	Count   int `json:"count"`
	OK      int `json:"ok"`
	HTTP429 int `json:"http_429"`
	Errors  int `json:"errors"`
	Retries int `json:"retries_429"`
	// WallMS is from the start of the load to the end of the last of these
	// samples, and PerSecond the ok ones per second of it; both 0 outside the load.
	WallMS    float64 `json:"wall_ms"`
	PerSecond float64 `json:"per_second"`
	P50MS     float64 `json:"p50_ms"`
	P90MS     float64 `json:"p90_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
}

// loadCleanup is what was found left behind.
type loadCleanup struct {
	// Checked is false against a server that this command did not start.
	Checked bool `json:"checked"`
	OK      bool `json:"ok"`
	// SessionsLeft are sessions of this run the server still lists after the load.
	SessionsLeft []string `json:"sessions_left"`
	// AfterLoad and AfterShutdown are leftover processes and cgroups, with the
	// server running and after it stopped.
	AfterLoad     []string `json:"after_load"`
	AfterShutdown []string `json:"after_shutdown"`
	// PooledAfterLoad counts the boxes left with the server running that are its
	// warm pool's (at most its size, and its zygote's box); they must be gone after
	// shutdown like any box.
	PooledAfterLoad int `json:"pooled_after_load"`
	// ServerExit is the own server's exit status after SIGTERM (-1: killed).
	ServerExit int `json:"server_exit"`
	// BoxUIDs are the host uids checked for stray processes.
	BoxUIDs []int `json:"box_uids"`
}

// loadReport is the --json output.
type loadReport struct {
	Server      string  `json:"server"` // "own" or the URL
	Language    string  `json:"language"`
	Clients     int     `json:"clients"`
	PerClient   int     `json:"per_client"`
	Host        string  `json:"host"`
	Executions  int     `json:"executions"`
	OK          int     `json:"ok"`
	HTTP429     int     `json:"http_429"`
	Errors      int     `json:"errors"`
	Retries     int     `json:"retries_429"`
	SessionErrs int     `json:"session_errors"` // failed session creates and deletes (not 429)
	WallMS      float64 `json:"wall_ms"`
	PerSecond   float64 `json:"executions_per_second"`

	All           loadStats `json:"all"`
	OneShot       loadStats `json:"one_shot"`
	Session       loadStats `json:"session"`
	SessionCreate loadStats `json:"session_create"`
	SessionDelete loadStats `json:"session_delete"`

	// Baseline is the bare interpreter, run serially; IdleOneShot one-shot
	// executions run serially on the idle server. Ratios are p50 over Baseline's.
	BaselineCommand   string      `json:"baseline_command"`
	Baseline          loadStats   `json:"baseline"`
	IdleOneShot       loadStats   `json:"idle_one_shot"`
	RatioIdleOneShot  float64     `json:"ratio_idle_one_shot"`
	RatioLoadOneShot  float64     `json:"ratio_load_one_shot"`
	RatioLoadSession  float64     `json:"ratio_load_session"`
	FirstErrors       []string    `json:"first_errors"`
	ServerLogProblems []string    `json:"server_log_problems"` // WARN/ERROR lines of the own server during the run
	ServerLogCount    int         `json:"server_log_problem_count"`
	Cleanup           loadCleanup `json:"cleanup"`
}

func cmdLoadtest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, loadtestUsage); fs.PrintDefaults() }
	server := fs.String("server", "", "URL of a running server (default: start one; its boxes are then checked for cleanup)")
	dataDir := fs.String("data-dir", "", "with --server: the server's data directory, where its token file is (or set $MOAT_TOKEN)")
	configPath := fs.String("config", "", "with --server: config file to read server.data_dir from")
	clients := fs.Int("clients", 50, "concurrent clients; half run one-shot executions, half use a session each")
	perClient := fs.Int("per-client", 20, "executions per client")
	lang := fs.String("lang", "python", "language: python|bash")
	jsonOut := fs.Bool("json", false, "print one JSON object instead of the markdown table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	prog, ok := loadPrograms[*lang]
	prog.lang = *lang
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "moat loadtest: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case !ok:
		fmt.Fprintf(stderr, "moat loadtest: --lang %q: want python or bash\n", *lang)
		return exitUsage
	case *clients < 1 || *clients > 10000:
		fmt.Fprintln(stderr, "moat loadtest: --clients must be from 1 to 10000")
		return exitUsage
	case *perClient < 1 || *perClient > 100000:
		fmt.Fprintln(stderr, "moat loadtest: --per-client must be from 1 to 100000")
		return exitUsage
	case *server == "" && (*dataDir != "" || *configPath != ""):
		fmt.Fprintln(stderr, "moat loadtest: --data-dir and --config apply with --server only")
		return exitUsage
	}
	if *server != "" && !strings.HasPrefix(*server, "http://") && !strings.HasPrefix(*server, "https://") {
		fmt.Fprintf(stderr, "moat loadtest: --server %q: want an http:// or https:// URL\n", *server)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hc := &http.Client{Transport: loadTransport(*clients)}
	rep := &loadReport{Language: *lang, Clients: *clients, PerClient: *perClient, Host: hostSummary(),
		Cleanup: loadCleanup{ServerExit: -1}}

	var own *ownServer
	var c *client.Client
	if *server == "" {
		var err error
		own, err = startOwnServer(ctx, ownServerOptions{
			name: "moat loadtest", principal: loadOwnPrincipal, concurrent: *clients,
			pool: fmt.Sprintf("{size: %d}", loadPoolSize),
		}, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "moat loadtest: %v\n", err)
			return 1
		}
		defer own.remove()
		rep.Server = "own"
		c = client.New(own.url, own.key, client.WithHTTPClient(hc))
	} else {
		token, err := loadToken(*dataDir, *configPath)
		if err != nil {
			fmt.Fprintf(stderr, "moat loadtest: %v\n", err)
			return exitUsage
		}
		rep.Server = *server
		c = client.New(*server, token, client.WithHTTPClient(hc))
	}

	code := runLoad(ctx, c, prog, rep, stderr)
	if own != nil {
		rep.Cleanup.Checked = true
		rep.Cleanup.BoxUIDs = loadBoxUIDs()
		rep.Cleanup.AfterLoad, rep.Cleanup.PooledAfterLoad = waitClean(own.pid, loadCleanupWait, loadPoolSize+loadZygotes)
		rep.Cleanup.ServerExit = own.stop()
		rep.Cleanup.AfterShutdown = append(leftovers(own.pid), spareCgroups(own.pid)...)
		rep.ServerLogProblems, rep.ServerLogCount = own.log.problems()
		if code != 0 && rep.Executions == 0 {
			fmt.Fprintf(stderr, "moat loadtest: the server's log ends:\n%s", own.log.tail())
		}
	}
	rep.Cleanup.OK = len(rep.Cleanup.SessionsLeft) == 0 && len(rep.Cleanup.AfterLoad) == 0 &&
		len(rep.Cleanup.AfterShutdown) == 0 && (!rep.Cleanup.Checked || rep.Cleanup.ServerExit == 0)
	if code != 0 && rep.Executions == 0 {
		return code // no load ran: nothing to report
	}
	rep.normalize()
	if *jsonOut {
		printJSON(stdout, rep)
	} else {
		writeLoadTable(stdout, rep)
	}
	for _, e := range rep.FirstErrors {
		fmt.Fprintf(stderr, "moat loadtest: error: %s\n", e)
	}
	if code != 0 || rep.Errors > 0 || rep.SessionErrs > 0 || rep.IdleOneShot.Errors > 0 || !rep.Cleanup.OK {
		return 1
	}
	return 0
}

// normalize replaces nil lists with empty ones so the JSON shape never varies.
func (r *loadReport) normalize() {
	for _, l := range []*[]string{&r.FirstErrors, &r.ServerLogProblems, &r.Cleanup.SessionsLeft, &r.Cleanup.AfterLoad, &r.Cleanup.AfterShutdown} {
		if *l == nil {
			*l = []string{}
		}
	}
	if r.Cleanup.BoxUIDs == nil {
		r.Cleanup.BoxUIDs = []int{}
	}
}

// loadTransport keeps a connection per client alive between its requests; the
// default transport keeps two, so most requests would open a new connection.
func loadTransport(clients int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 2 * clients
	t.MaxIdleConnsPerHost = 2 * clients
	return t
}

// loadToken finds the API token as the session commands do: $MOAT_TOKEN, else the
// token file in the data directory (given, or the config's, or the default).
func loadToken(dataDir, configPath string) (string, error) {
	if os.Getenv("MOAT_TOKEN") == "" && dataDir == "" {
		dataDir = config.DefaultDataDir()
		cfg, err := loadConfig(configPath)
		if err != nil {
			return "", err
		}
		if cfg.Server.DataDir != "" {
			dataDir = cfg.Server.DataDir
		}
	}
	return client.Token(dataDir)
}

// runLoad measures the baselines, runs the clients and fills rep; it returns 1 when
// the load could not run at all.
func runLoad(ctx context.Context, c *client.Client, prog loadProgram, rep *loadReport, stderr io.Writer) int {
	if err := c.Health(ctx); err != nil {
		fmt.Fprintf(stderr, "moat loadtest: %v\n", err)
		return 1
	}
	rep.BaselineCommand = shellJoin(prog.bare)
	base, err := baseline(prog.bare, loadBaselineRuns)
	if err != nil {
		fmt.Fprintf(stderr, "moat loadtest: baseline %s: %v\n", rep.BaselineCommand, err)
		return 1
	}
	rep.Baseline = summarise(base, time.Time{})

	var errs loadErrors
	var idle []loadSample
	for i := range loadIdleRuns + 2 {
		s := oneShot(ctx, c, prog, &errs, "idle")
		if i >= 2 {
			idle = append(idle, s)
		}
	}
	rep.IdleOneShot = summarise(idle, time.Time{})
	if rep.IdleOneShot.OK == 0 {
		rep.FirstErrors = errs.first
		fmt.Fprintf(stderr, "moat loadtest: no execution succeeded on the idle server: %s\n", strings.Join(errs.first, "; "))
		return 1
	}

	var (
		mu               sync.Mutex
		oneShots, calls  []loadSample
		creates, deletes []loadSample
		sessionIDs       []string
		wg               sync.WaitGroup
		start            = make(chan struct{})
		loadErrs         loadErrors
	)
	for i := range rep.Clients {
		sessionClient := i%2 == 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if !sessionClient {
				var mine []loadSample
				for j := range rep.PerClient {
					mine = append(mine, oneShot(ctx, c, prog, &loadErrs, fmt.Sprintf("client %d, one-shot %d", i, j+1)))
				}
				mu.Lock()
				oneShots = append(oneShots, mine...)
				mu.Unlock()
				return
			}
			r := sessionRun(ctx, c, prog, rep.PerClient, &loadErrs, i)
			mu.Lock()
			calls = append(calls, r.calls...)
			creates = append(creates, r.create)
			if r.deleted != nil {
				deletes = append(deletes, *r.deleted)
			}
			if r.id != "" {
				sessionIDs = append(sessionIDs, r.id)
			}
			mu.Unlock()
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()

	all := append(slices.Clone(oneShots), calls...)
	rep.All = summarise(all, began)
	rep.OneShot = summarise(oneShots, began)
	rep.Session = summarise(calls, began)
	rep.SessionCreate = summarise(creates, time.Time{})
	rep.SessionDelete = summarise(deletes, time.Time{})
	rep.Executions, rep.OK, rep.HTTP429, rep.Errors = rep.All.Count, rep.All.OK, rep.All.HTTP429, rep.All.Errors
	rep.Retries = rep.All.Retries + rep.SessionCreate.Retries
	rep.SessionErrs = rep.SessionCreate.Errors + rep.SessionDelete.Errors
	rep.WallMS, rep.PerSecond = rep.All.WallMS, rep.All.PerSecond
	if b := rep.Baseline.P50MS; b > 0 {
		rep.RatioIdleOneShot = round(rep.IdleOneShot.P50MS/b, 100)
		rep.RatioLoadOneShot = round(rep.OneShot.P50MS/b, 100)
		rep.RatioLoadSession = round(rep.Session.P50MS/b, 100)
	}
	rep.FirstErrors = append(errs.first, loadErrs.first...)
	if len(rep.FirstErrors) > loadFirstErrors {
		rep.FirstErrors = rep.FirstErrors[:loadFirstErrors]
	}
	rep.Cleanup.SessionsLeft = sessionsLeft(ctx, c, sessionIDs)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "moat loadtest: interrupted")
		return 1
	}
	return 0
}

// baseline runs argv serially, 3 warm-up runs and then n measured ones, as moat
// bench measures its cases.
func baseline(argv []string, n int) ([]loadSample, error) {
	var out []loadSample
	for i := range n + 3 {
		cmd := exec.Command(argv[0], argv[1:]...)
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("%w: %.200s", err, buf.String())
		}
		if i >= 3 {
			out = append(out, loadSample{latency: d})
		}
	}
	return out, nil
}

// shellJoin spells argv as a shell command line.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = a
		if strings.ContainsFunc(a, func(r rune) bool {
			return !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=", r)
		}) {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// loadErrors keeps the first errors the clients met.
type loadErrors struct {
	mu    sync.Mutex
	first []string
}

func (e *loadErrors) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.first) < loadFirstErrors {
		e.first = append(e.first, fmt.Sprintf(format, args...))
	}
}

// retry429 calls f until it succeeds, fails with something other than a 429, or
// has been retried loadRetries times, sleeping each 429's Retry-After (1s when
// absent) in between. It returns the last call's sample (its outcome, latency and
// the 429s retried before it) and error.
func retry429(ctx context.Context, f func(context.Context) error) (loadSample, error) {
	for retries := 0; ; retries++ {
		cctx, cancel := context.WithTimeout(ctx, loadCallTimeout)
		t := time.Now()
		err := f(cctx)
		end := time.Now()
		s := loadSample{outcome: classify(err), latency: end.Sub(t), end: end, retries: retries}
		cancel()
		var e *client.Error
		if s.outcome != outcome429 || retries == loadRetries || !errors.As(err, &e) {
			return s, err
		}
		wait := e.RetryAfter
		if wait <= 0 {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return s, err
		case <-time.After(wait):
		}
	}
}

// classify turns a request's error into an outcome.
func classify(err error) loadOutcome {
	var e *client.Error
	switch {
	case err == nil:
		return outcomeOK
	case errors.As(err, &e) && e.Status == http.StatusTooManyRequests:
		return outcome429
	}
	return outcomeError
}

// oneShot runs one one-shot execution and checks its output.
func oneShot(ctx context.Context, c *client.Client, prog loadProgram, errs *loadErrors, what string) loadSample {
	var res *box.Result
	s, err := retry429(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.Execute(ctx, &api.ExecuteRequest{Language: prog.lang, Code: prog.oneShot}, nil)
		return err
	})
	switch {
	case s.outcome == outcomeError:
		errs.add("%s: %v", what, err)
	case s.outcome == outcomeOK && (res.Status != box.StatusOK || res.Stdout != prog.want):
		s.outcome = outcomeError
		errs.add("%s: %s", what, describeResult(res, prog.want))
	}
	return s
}

// describeResult says how res differs from a successful run printing want.
func describeResult(res *box.Result, want string) string {
	detail := res.Error
	if detail == "" {
		detail = strings.TrimSpace(res.Stderr)
	}
	if len(detail) > 300 {
		detail = detail[:300] + "..."
	}
	return fmt.Sprintf("status %s, exit code %d, stdout %q (want %q) %s", res.Status, res.ExitCode, res.Stdout, want, detail)
}

// sessionResult is what one session client did.
type sessionResult struct {
	id      string
	create  loadSample
	deleted *loadSample // nil when no session was created
	calls   []loadSample
}

// sessionRun creates a session, runs n calls in it that count up, and removes it.
// When the session cannot be created its calls are counted with the create's
// outcome (429 or error), since none of them could run.
func sessionRun(ctx context.Context, c *client.Client, prog loadProgram, n int, errs *loadErrors, who int) sessionResult {
	var r sessionResult
	var err error
	r.create, err = retry429(ctx, func(ctx context.Context) error {
		info, err := c.CreateSession(ctx, &api.SessionRequest{Language: prog.lang})
		r.id = info.ID
		return err
	})
	if err != nil {
		r.id = ""
		if r.create.outcome == outcomeError {
			errs.add("client %d: create session: %v", who, err)
		}
		for range n {
			r.calls = append(r.calls, loadSample{outcome: r.create.outcome})
		}
		return r
	}
	last := 0
	for j := range n {
		var res *box.Result
		s, err := retry429(ctx, func(ctx context.Context) error {
			var err error
			res, err = c.SessionExecute(ctx, r.id, &api.CallRequest{Code: prog.session}, nil)
			return err
		})
		switch s.outcome {
		case outcomeOK:
			n, problem := prog.count(res)
			want := last + 1
			switch {
			case res.Status != box.StatusOK:
				problem = describeResult(res, strconv.Itoa(want)+"\n")
			case problem == "" && n != want:
				problem = fmt.Sprintf("counter %d", n)
			}
			if problem != "" {
				s.outcome = outcomeError
				errs.add("client %d, session call %d: %s; want counter %d", who, j+1, problem, want)
			}
			if n >= 0 {
				last = n // go on from what the session holds
			}
		case outcomeError:
			errs.add("client %d, session call %d: %v", who, j+1, err)
		}
		r.calls = append(r.calls, s)
	}
	// Remove the session even when the load was interrupted.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadCallTimeout)
	defer cancel()
	t := time.Now()
	err = c.DeleteSession(dctx, r.id)
	del := loadSample{outcome: classify(err), latency: time.Since(t)}
	if err != nil {
		del.outcome = outcomeError // a 429 here is not documented: it is an error too
		errs.add("client %d: remove session %s: %v", who, r.id, err)
	}
	r.deleted = &del
	return r
}

// sessionsLeft lists the sessions of ids that the server still has.
func sessionsLeft(ctx context.Context, c *client.Client, ids []string) []string {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadCallTimeout)
	defer cancel()
	list, err := c.ListSessions(lctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot list the sessions: %v", err)}
	}
	mine := map[string]bool{}
	for _, id := range ids {
		mine[id] = true
	}
	var left []string
	for _, s := range list {
		if mine[s.ID] {
			left = append(left, fmt.Sprintf("session %s (%s)", s.ID, s.State))
		}
	}
	return left
}

// summarise counts samples by outcome and computes the latency percentiles of
// the ok ones; with the start of the load, it also gives their wall time and ok
// ones per second.
func summarise(samples []loadSample, began time.Time) loadStats {
	var st loadStats
	var lat []time.Duration
	for _, s := range samples {
		st.Count++
		st.Retries += s.retries
		switch s.outcome {
		case outcomeOK:
			st.OK++
			lat = append(lat, s.latency)
		case outcome429:
			st.HTTP429++
		default:
			st.Errors++
		}
	}
	slices.Sort(lat)
	st.P50MS, st.P90MS, st.P99MS = msf(pct(lat, 50)), msf(pct(lat, 90)), msf(pct(lat, 99))
	if len(lat) > 0 {
		st.MaxMS = msf(lat[len(lat)-1])
	}
	var last time.Time
	for _, s := range samples {
		if s.end.After(last) {
			last = s.end
		}
	}
	if !began.IsZero() && last.After(began) {
		wall := last.Sub(began)
		st.WallMS, st.PerSecond = msf(wall), round(float64(st.OK)/wall.Seconds(), 10)
	}
	return st
}

// round rounds v to 1/per.
func round(v, per float64) float64 { return math.Round(v*per) / per }

// msf is d in milliseconds, to a tenth.
func msf(d time.Duration) float64 { return float64(d.Microseconds()/100) / 10 }

func writeLoadTable(w io.Writer, r *loadReport) {
	server := "own server on 127.0.0.1"
	if r.Server != "own" {
		server = r.Server
	}
	fmt.Fprintf(w, "moat loadtest: %d clients × %d executions (%s), %s, %s, on %s\n\n",
		r.Clients, r.PerClient, splitClients(r.Clients), r.Language, server, r.Host)
	fmt.Fprintln(w, "| kind | runs | ok | 429 | errors | wall | per second | p50 | p90 | p99 | max | p50 / bare |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	row := func(name string, s loadStats, ratio bool) {
		wall, ps, rt := "–", "–", "–"
		if s.WallMS > 0 {
			wall, ps = fmt.Sprintf("%.1f s", s.WallMS/1000), fmt.Sprintf("%.1f", s.PerSecond)
		}
		if ratio && r.Baseline.P50MS > 0 {
			rt = fmt.Sprintf("%.1f×", s.P50MS/r.Baseline.P50MS)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %s | %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %s |\n",
			name, s.Count, s.OK, s.HTTP429, s.Errors, wall, ps, s.P50MS, s.P90MS, s.P99MS, s.MaxMS, rt)
	}
	row("all executions", r.All, false)
	row("one-shot (POST /v1/execute)", r.OneShot, true)
	row("in sessions (POST /v1/sessions/{id}/execute)", r.Session, true)
	row("session create", r.SessionCreate, false)
	row("session delete", r.SessionDelete, false)
	row("one-shot, idle server, serial", r.IdleOneShot, true)
	row("bare `"+r.BaselineCommand+"`, serial", r.Baseline, true)
	fmt.Fprintf(w, "\nwall time %.1f s, %.1f executions/s; %d 429s retried", r.WallMS/1000, r.PerSecond, r.Retries)
	if r.SessionErrs > 0 {
		fmt.Fprintf(w, "; %d session creates/deletes failed", r.SessionErrs)
	}
	fmt.Fprintln(w)
	if r.ServerLogCount > 0 {
		fmt.Fprintf(w, "server log: %d warnings/errors during the run, first: %s\n", r.ServerLogCount, strings.Join(r.ServerLogProblems, " | "))
	}
	switch c := r.Cleanup; {
	case !c.Checked && len(c.SessionsLeft) == 0:
		fmt.Fprintln(w, "cleanup: sessions removed; boxes not checked (not our server)")
	case c.OK:
		fmt.Fprintln(w, "cleanup: ok (no session, box process or box cgroup left, with the server running and after it stopped)")
	default:
		fmt.Fprintln(w, "cleanup: FAILED")
		for _, s := range c.SessionsLeft {
			fmt.Fprintf(w, "  left after the load: %s\n", s)
		}
		for _, s := range c.AfterLoad {
			fmt.Fprintf(w, "  left after the load (server running): %s\n", s)
		}
		for _, s := range c.AfterShutdown {
			fmt.Fprintf(w, "  left after the server stopped: %s\n", s)
		}
		if c.Checked && c.ServerExit != 0 {
			fmt.Fprintf(w, "  the server exited with status %d after SIGTERM\n", c.ServerExit)
		}
	}
}

// splitClients says how the clients divide between the two kinds.
func splitClients(n int) string {
	return fmt.Sprintf("%d one-shot, %d in sessions", (n+1)/2, n/2)
}

// loadBoxUIDs returns the host uids that only a box's processes run as: none
// rootless, where a box runs as the user who started moat.
func loadBoxUIDs() []int {
	if os.Geteuid() != 0 {
		return []int{}
	}
	return []int{loadHostRootUID, loadHostBoxUID}
}

// waitClean polls leftovers until there are none or wait has passed: a box is
// destroyed as its request ends, which the client may see a moment before.
// waitClean waits until, of the server's boxes, at most pooled remain (its warm
// pool's ready boxes) and returns what is left beyond them, and how many boxes it
// took for the pool's.
func waitClean(serverPID int, wait time.Duration, pooled int) ([]string, int) {
	deadline := time.Now().Add(wait)
	for {
		left := leftovers(serverPID)
		boxes := boxNames(left, serverPID)
		if len(boxes) <= pooled && !strayProcess(left) {
			return nil, len(boxes)
		}
		if time.Now().After(deadline) {
			return left, 0
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// boxNames are the distinct boxes of serverPID named in leftovers' lines.
func boxNames(left []string, serverPID int) map[string]bool {
	re := regexp.MustCompile(fmt.Sprintf(`box-%d-[0-9a-f]+`, serverPID))
	names := map[string]bool{}
	for _, l := range left {
		for _, m := range re.FindAllString(l, -1) {
			names[m] = true
		}
	}
	return names
}

// strayProcess says whether a leftover is a box uid's process in no box cgroup.
func strayProcess(left []string) bool {
	for _, l := range left {
		if strings.HasPrefix(l, "process ") && !strings.Contains(l, "/moat/box-") {
			return true
		}
	}
	return false
}

// leftovers lists what remains of the boxes of the server with pid serverPID:
//   - processes in one of its box cgroups (named box-<serverPID>-<hex>), and
//     processes running as a box host uid in no box cgroup at all;
//   - its box cgroup directories under any "moat" parent in /sys/fs/cgroup.
//
// Other moat processes on the host may be running boxes of their own; those are in
// cgroups named after their pids and are not counted.
func leftovers(serverPID int) []string {
	mark := fmt.Sprintf("box-%d-", serverPID)
	uids := map[string]bool{}
	for _, u := range loadBoxUIDs() {
		uids[strconv.Itoa(u)] = true
	}
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil {
			continue // exited meanwhile
		}
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		name, ids := procField(status, "Name:"), procField(status, "Uid:")
		boxUID := slices.ContainsFunc(ids, func(u string) bool { return uids[u] })
		inOurs := strings.Contains(string(cg), "/moat/"+mark)
		inNone := !strings.Contains(string(cg), "/moat/box-")
		if inOurs || (inNone && boxUID) {
			out = append(out, fmt.Sprintf("process %s (%s, uids %s, cgroups %s)", e.Name(), strings.Join(name, " "),
				strings.Join(ids, " "), strings.Join(strings.Fields(string(cg)), " ")))
		}
	}
	return append(out, moatCgroups(mark)...)
}

// moatCgroups lists, as "cgroup PATH", the directories under a "moat" parent in
// /sys/fs/cgroup whose names begin with prefix.
func moatCgroups(prefix string) []string {
	var out []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if filepath.Base(filepath.Dir(p)) == "moat" {
			if strings.HasPrefix(d.Name(), prefix) {
				out = append(out, "cgroup "+p)
			}
			return filepath.SkipDir // a box's, or a kept one's: nothing of ours below
		}
		if strings.Count(p, "/") > 12 {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// spareCgroups lists the cgroups the server with pid serverPID kept for later boxes
// (named cgroup.SparePrefix+"box-<serverPID>-..."): while it runs, a few, as many
// as the boxes that ended before the next began; once it has shut down, none.
func spareCgroups(serverPID int) []string {
	return moatCgroups(fmt.Sprintf("%sbox-%d-", cgroup.SparePrefix, serverPID))
}

// procField returns the values of a field of /proc/<pid>/status.
func procField(status []byte, key string) []string {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			return strings.Fields(v)
		}
	}
	return nil
}

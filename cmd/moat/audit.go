package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/metrics"
)

const auditUsage = `Usage: moat audit [flags]          list audit records, newest first
       moat audit verify [flags]   check the hash chain; report the first broken link

The audit trail records every execution (moat run, the HTTP API, MCP), every
session event (create, destroy, expire, lost) and every auth failure, in
DATA_DIR/audit.db (audit.dir in the config). Reading it needs read access to that
file (root for /var/lib/moat); over HTTP, GET /v1/audit takes the same filters.

Times (--since, --until): RFC 3339 (2026-11-23T10:00:00Z), a date (2026-11-23),
or a duration ago (90m, 24h, 7d).

moat audit verify exits 0 when the chain is intact, 1 when it is broken, and
prints the head hash: keep it elsewhere to detect a rewritten or cut chain later.

Flags:
`

// auditFlush bounds how long a command waits for its audit records at exit.
const auditFlush = 15 * time.Second

func cmdAudit(args []string, stdout, stderr io.Writer) int {
	verify := len(args) > 0 && args[0] == "verify"
	if verify {
		args = args[1:]
	}
	fs := flag.NewFlagSet("moat audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (default: the first of "+strings.Join(config.SearchPath(), ", ")+")")
	dataDir := fs.String("data-dir", "", "moat's data directory, where audit.db is (default: audit.dir, else server.data_dir, else "+config.SystemDataDir+" for root, ~/.local/share/moat for others)")
	since := fs.String("since", "", "records at or after this time")
	until := fs.String("until", "", "records before this time")
	principal := fs.String("principal", "", "only this principal's records")
	sess := fs.String("session", "", "only this session's records")
	status := fs.String("status", "", "only records with this status (ok, error, timeout, blocked, rejected...)")
	kind := fs.String("kind", "", "only records of this kind ("+strings.Join(audit.Kinds, ", ")+")")
	violations := fs.Bool("violations", false, "only records with policy violations")
	jsonOut := fs.Bool("json", false, "one JSON record per line, as the store keeps it (with its hash)")
	limit := fs.Int("limit", 50, "at most this many records (newest first)")
	fs.Usage = func() { fmt.Fprint(stderr, auditUsage); fs.PrintDefaults() }
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	if *dataDir != "" && cfg.Audit.Dir == "" {
		cfg.Audit.Dir = *dataDir
	}
	ra, err := cfg.ResolveAudit("")
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	if ra.Disable {
		fmt.Fprintln(stderr, "moat: the audit trail is disabled (audit.disable in the config)")
		return exitUsage
	}
	if _, err := os.Stat(ra.Path); err != nil {
		fmt.Fprintf(stderr, "moat: no audit store at %s: %v\n", ra.Path, errors.Unwrap(err))
		return exitUsage
	}
	st, err := audit.OpenStore(ra.Path)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	defer st.Close()
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Minute)
	defer stop()

	if verify {
		return auditVerify(ctx, st, stdout, stderr)
	}
	f := audit.Filter{Principal: *principal, Session: *sess, Status: *status, Kind: *kind, Violations: *violations}
	now := time.Now()
	for _, tb := range []struct {
		name, val string
		dst       *time.Time
	}{{"since", *since, &f.Since}, {"until", *until, &f.Until}} {
		if tb.val == "" {
			continue
		}
		if *tb.dst, err = audit.ParseTime(tb.val, now); err != nil {
			fmt.Fprintf(stderr, "moat audit: --%s: %v\n", tb.name, err)
			return exitUsage
		}
	}
	if *limit < 1 {
		fmt.Fprintln(stderr, "moat audit: --limit must be at least 1")
		return exitUsage
	}
	var recs []audit.Record
	for left := *limit; left > 0; {
		f.Limit = min(left, audit.MaxLimit)
		p, err := st.Query(ctx, f)
		if err != nil {
			fmt.Fprintf(stderr, "moat: %v\n", err)
			return exitInternal
		}
		recs = append(recs, p.Records...)
		left -= len(p.Records)
		if p.Next == 0 {
			break
		}
		f.Before = p.Next
	}
	if *jsonOut {
		for _, r := range recs {
			body, err := r.Body()
			if err != nil {
				fmt.Fprintf(stderr, "moat: %v\n", err)
				return exitInternal
			}
			stdout.Write(audit.Line(body, r.Hash))
		}
		return 0
	}
	printRecords(stdout, recs)
	return 0
}

func auditVerify(ctx context.Context, st *audit.Store, stdout, stderr io.Writer) int {
	rep, err := st.Verify(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	if rep.Break != nil {
		fmt.Fprintf(stdout, "moat audit verify: BROKEN at record %d: %s\n", rep.Break.Seq, rep.Break.Problem)
		if rep.Records > 0 {
			fmt.Fprintf(stdout, "records %d to %d before it are intact; head hash there %s\n", rep.First, rep.Last, rep.Head)
		}
		return 1
	}
	if rep.Records == 0 {
		fmt.Fprintf(stdout, "moat audit verify: ok: no records in %s\n", st.Path())
		return 0
	}
	fmt.Fprintf(stdout, "moat audit verify: ok: %d records (seq %d to %d), every hash and link checked\nhead hash %s\n", rep.Records, rep.First, rep.Last, rep.Head)
	return 0
}

// printRecords writes records as a table, one line each.
func printRecords(w io.Writer, recs []audit.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tPRINCIPAL\tVIA\tSESSION\tLANG\tPROFILE\tSTATUS\tEXIT\tMS\tDETAIL")
	for _, r := range recs {
		exit := "-"
		if r.ExitCode != nil {
			exit = strconv.Itoa(*r.ExitCode)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Seq, r.Time.Local().Format("2006-01-02 15:04:05"),
			r.Kind, dash(r.Principal), dash(r.FrontEnd), dash(r.Session), dash(r.Language), dash(r.Profile), dash(r.Status), exit, r.DurationMS, detail(r))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// detail is the last column: the violations' rules, or the reason, or the code's
// first line.
func detail(r audit.Record) string {
	var d string
	switch {
	case len(r.Violations) > 0:
		var rules []string
		for _, v := range r.Violations {
			rules = append(rules, v.Rule)
		}
		d = "violations: " + strings.Join(rules, ", ")
	case r.Reason != "":
		d = r.Reason
	case r.Code != "":
		line, _, _ := strings.Cut(strings.TrimSpace(r.Code), "\n")
		d = "code: " + line
	}
	d = strings.Map(func(c rune) rune {
		if c < ' ' || c == 0x7f {
			return ' '
		}
		return c
	}, d)
	if len(d) > 80 {
		d = d[:77] + "..."
	}
	return d
}

// auditTrail is an open audit log and its sink file.
type auditTrail struct {
	log  *audit.Log
	sink *os.File
}

// openAudit opens the audit trail that cfg configures, in audit.dir or dataDir,
// for eng: its records are redacted by eng's filter. It returns nil when
// audit.disable is set. Fail closed, an unusable store is an error: moat runs no
// code it cannot audit. stdoutFree says whether the command may write the sink to
// standard output (not moat run, whose stdout is the code's, nor stdio MCP).
func openAudit(cfg *config.Config, dataDir string, eng *engine.Engine, m *metrics.Metrics, log *slog.Logger, stdoutFree bool) (*auditTrail, error) {
	ra, err := cfg.ResolveAudit(dataDir)
	if err != nil {
		return nil, err
	}
	if ra.Disable {
		eng.EnableAudit(engine.AuditOptions{Metrics: m})
		log.Warn("audit: disabled (audit.disable): nothing is recorded")
		return &auditTrail{}, nil
	}
	opts := audit.Options{
		Path: ra.Path, FailOpen: ra.FailOpen, Buffer: ra.Buffer, CodeMax: ra.CodeMax, Redact: eng.Redact,
		Retention: audit.Retention{MaxAge: ra.MaxAge, MaxRecords: ra.MaxRecords}, Log: log,
	}
	var sink *os.File
	switch {
	case ra.Sink == config.AuditSinkStdout && stdoutFree:
		opts.Sink = os.Stdout
	case ra.Sink == config.AuditSinkStdout:
		log.Info("audit: the stdout sink is moat serve's; this command keeps its records in the store only")
	case ra.Sink != "":
		sink, err = os.OpenFile(ra.Sink, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("audit sink: %w", err)
		}
		if fi, err := sink.Stat(); err != nil || !fi.Mode().IsRegular() {
			sink.Close()
			return nil, fmt.Errorf("audit sink %s: not a regular file", ra.Sink)
		}
		opts.Sink = sink
	}
	l, err := audit.Open(opts)
	if err != nil {
		if sink != nil {
			sink.Close()
		}
		return nil, fmt.Errorf("%w; moat runs no code it cannot audit (audit.failure: fail_closed): fix the store, set audit.dir, or set audit.failure: fail_open", err)
	}
	eng.EnableAudit(engine.AuditOptions{Log: l, Metrics: m})
	log.Debug("audit: recording", "store", ra.Path, "fail_open", ra.FailOpen, "sink", ra.Sink != "")
	return &auditTrail{log: l, sink: sink}, nil
}

// close writes what is queued (waiting up to auditFlush) and closes the log; it
// reports, on stderr, records it could not write.
func (t *auditTrail) close(stderr io.Writer) error {
	if t == nil || t.log == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), auditFlush)
	defer cancel()
	ferr := t.log.Flush(ctx)
	err := t.log.Close()
	if t.sink != nil {
		t.sink.Close()
	}
	if err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "moat: audit: %v\n", err)
	}
	return err
}

// api returns the log for api.Options.Audit: nil (no interface holding a nil
// pointer) when the audit trail is disabled.
func (t *auditTrail) api() api.Audit {
	if t == nil || t.log == nil {
		return nil
	}
	return t.log
}

// localCaller is who runs a CLI command: the user, as "local:<name>".
func localCaller() engine.Caller {
	name := "uid:" + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return engine.Caller{Principal: "local:" + name, FrontEnd: audit.FrontEndCLI, RequestID: newRequestID()}
}

// newRequestID is a random id for a CLI run's record, like the API's.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

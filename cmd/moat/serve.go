package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/mcp"
	"github.com/moat-sandbox/moat/internal/metrics"
	"github.com/moat-sandbox/moat/internal/session"
)

const serveUsage = `Usage: moat serve [flags]

Serves the HTTP API (JSON under /v1; the OpenAPI document at /v1/openapi.json) and
the MCP tools (streamable HTTP at /mcp, as moat mcp serves them on stdio) until
SIGTERM or SIGINT; then it stops accepting requests, lets running ones finish within
server.shutdown_grace and destroys every box.

Every execution, session event and auth failure is recorded in the audit trail
(DATA_DIR/audit.db; moat audit reads it, GET /v1/audit serves it), and Prometheus
metrics are at /metrics.

Every endpoint but /healthz needs Authorization: Bearer <token>. Without
server.api_keys in the config, moat generates a token on first start and keeps it in
DATA_DIR/token (mode 0600), where moat's client commands find it; other clients read
it from there or are given it in MOAT_TOKEN.

Flags:
`

// Server timeouts. There is no ReadTimeout or WriteTimeout: executions and their
// event streams last as long as their limits allow, and the API bounds body reads
// itself.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
)

func cmdServe(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "address to listen on, host:port (default: server.listen of the config, else "+config.DefaultListen+")")
	configPath := fs.String("config", "", "config file (default: the first of "+strings.Join(config.SearchPath(), ", ")+")")
	dataDir := fs.String("data-dir", "", "directory for moat's state and the API token (default: server.data_dir of the config, else "+config.SystemDataDir+" for root, ~/.local/share/moat for others)")
	logFormat := fs.String("log-format", "text", "operational log format on stderr: text or json (never code, tokens or secrets)")
	backendName := fs.String("backend", "", backendFlagUsage)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}

	cfg, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	if *listen != "" {
		cfg.Server.Listen = *listen
	}
	if *dataDir != "" {
		cfg.Server.DataDir = *dataDir
	}
	srv, err := cfg.ResolveServer(nil)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	rb, err := cfg.ResolveBackend(*backendName)
	if err != nil {
		fmt.Fprintf(stderr, "moat: --backend: %v\n", err)
		return exitUsage
	}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, nil))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	default:
		fmt.Fprintf(stderr, "moat serve: --log-format: want text or json, not %q\n", *logFormat)
		return exitUsage
	}
	return serve(cfg, srv, rb, log, stderr)
}

// serve runs the server until a signal; it returns moat's exit status.
func serve(cfg *config.Config, srv config.ResolvedServer, rb config.ResolvedBackend, log *slog.Logger, stderr io.Writer) int {
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	// Before the engine, so that moat refuses to start when it cannot make boxes.
	backend, closeBackend, err := openBackend(context.Background(), rb, log)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	defer closeBackend() // after the engine's Close, deferred below
	eng, err := engine.New(cfg, backend, os.Environ(), log)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	// The audit trail before the sessions (which record the ends of sessions a
	// crashed run left), closed after them (which record their ends).
	m := metrics.New()
	trail, err := openAudit(cfg, srv.DataDir, eng, m, log, true)
	if err != nil {
		fmt.Fprintf(stderr, "moat: audit: %v\n", err)
		return exitInternal
	}
	defer func() {
		if err := eng.Close(); err != nil {
			log.Error("destroy the sessions' boxes", "err", err)
		}
		trail.close(stderr)
	}()
	if err := eng.EnableSessions(engine.SessionOptions{
		Store: session.Options{
			IdleTTL:     srv.Sessions.IdleTTL,
			MaxLifetime: srv.Sessions.MaxLifetime,
			MaxTotal:    srv.Sessions.MaxTotal,
			Dir:         filepath.Join(srv.DataDir, "sessions"),
			Log:         log,
		},
		MaxFile: srv.MaxFile,
	}); err != nil {
		fmt.Fprintf(stderr, "moat: sessions: %v\n", err)
		return exitInternal
	}
	g, err := gate.New(srv, log)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	switch {
	case g.Generated():
		fmt.Fprintf(stderr, "moat: API token written to %s (mode 0600); clients read it from there or from MOAT_TOKEN\n", g.TokenPath())
	case g.TokenPath() != "":
		fmt.Fprintf(stderr, "moat: API token in %s; clients read it from there or from MOAT_TOKEN\n", g.TokenPath())
	}
	reapBoxes(log, slog.LevelWarn)
	logIsolation(log, backend.Name())
	// After the reaping, which would take the pool's boxes for a crashed run's.
	if srv.Pool.Enabled {
		if err := eng.EnablePool(engine.PoolOptions{
			Size: srv.Pool.Size, MaxKeys: srv.Pool.MaxKeys, Refills: srv.Pool.Refill,
			IdleKeyTTL: srv.Pool.IdleTTL, Warm: srv.Pool.Warm, NoZygote: !srv.Pool.Zygote,
		}); err != nil {
			fmt.Fprintf(stderr, "moat: warm pool: %v\n", err)
			return exitInternal
		}
		log.Info("warm pool: on", "size", srv.Pool.Size, "warm", srv.Pool.Warm, "refills", srv.Pool.Refill, "zygote", srv.Pool.Zygote)
	}

	ln, err := net.Listen("tcp", srv.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	handler := api.New(api.Options{Engine: eng, Gate: g, Log: log, MaxBody: srv.MaxBody, MaxUpload: srv.MaxFile,
		Audit: trail.api(), Metrics: m, MetricsPublic: cfg.Server.MetricsPublic})
	mcpServer := mcp.New(mcp.Options{Engine: eng, Gate: g, Log: log, Version: version, Grace: mcpGrace(log),
		IdleTTL: srv.Sessions.IdleTTL, MaxLifetime: srv.Sessions.MaxLifetime, OnRefused: handler.RecordRefusal})
	defer mcpServer.Close()
	mcpHandler := mcpServer.Handler(0)
	// inflight counts running handlers: after the grace, their boxes must be gone
	// (each handler destroys its own) before the process exits.
	var inflight sync.WaitGroup
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			if r.URL.Path == "/mcp" {
				mcpHandler.ServeHTTP(w, r)
				return
			}
			handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// MCP clients hold event streams open: end their sessions as the shutdown starts.
	hs.RegisterOnShutdown(func() { mcpServer.CloseSessions() })
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "moat: listening on http://%s\n", ln.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	select {
	case err := <-served:
		log.Error("serve", "err", err)
		return exitInternal
	case s := <-sig:
		log.Info("shutting down: no new requests; running ones may finish", "signal", s.String(), "grace", srv.ShutdownGrace)
	}
	ctx, cancel := context.WithTimeout(context.Background(), srv.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		// The grace is over: closing the connections cancels the requests' contexts,
		// which kills their boxes.
		log.Warn("shutdown grace over: cancelling the requests still running", "err", err)
		_ = hs.Close()
		if !waitTimeout(&inflight, cancelWait) {
			log.Error("requests still running after they were cancelled; exiting anyway", "waited", cancelWait)
		}
	}
	log.Info("stopped; destroying every session's box")
	return 0
}

// cancelWait bounds the wait for cancelled requests to destroy their boxes.
const cancelWait = 10 * time.Second

// waitTimeout waits for wg up to d; it reports whether wg was done.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// logIsolation logs, at startup, what the native backend enforces on this host and
// what it cannot. Other backends' boxes are containers: openBackend logged which, and
// each result's isolation lists what was in force.
func logIsolation(log *slog.Logger, backend string) {
	if backend != config.BackendNative {
		log.Info("isolation: each box is a container of backend "+backend+"; each result's isolation lists what was in force", "backend", backend)
		return
	}
	checks := native.Probe()
	for _, c := range checks {
		if c.OK {
			log.Info("host: "+c.Name, "detail", c.Detail)
		} else {
			log.Warn("host: "+c.Name+" unavailable", "detail", c.Detail)
		}
	}
	for _, line := range native.Enforced(checks) {
		log.Info("isolation: " + line)
	}
}

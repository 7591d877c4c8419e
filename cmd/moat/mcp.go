package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/mcp"
	"github.com/moat-sandbox/moat/internal/session"
)

const mcpUsage = `Usage: moat mcp [flags]

Serves moat's MCP tools (execute_python, execute_shell, session_create,
session_execute, session_destroy, session_list, file_upload, file_download,
file_list) over stdio, one JSON-RPC message per line, for an MCP host that starts
moat as a subprocess (Claude Desktop, Claude Code, Cursor...). Code runs in local
boxes, as with moat run; the client's sessions are destroyed when stdin ends.
Logs go to stderr. moat serve serves the same tools over HTTP at /mcp.

The caller is the principal "local", with the config's profile (or --profile),
its limits as the most a tool call may ask for, and the default quotas.

Flags:
`

// localPrincipal names the caller of a stdio MCP server.
const localPrincipal = "local"

func cmdMCP(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("moat mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (default: the first of "+strings.Join(config.SearchPath(), ", ")+")")
	profile := fs.String("profile", "", "policy profile of every execution (default: the config's)")
	backendName := fs.String("backend", "", backendFlagUsage)
	fs.Usage = func() { fmt.Fprint(stderr, mcpUsage); fs.PrintDefaults() }
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	if *profile == "" {
		*profile = cfg.DefaultProfile()
	}
	if _, err := cfg.ResolveProfile(*profile); err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	rb, err := cfg.ResolveBackend(*backendName)
	if err != nil {
		fmt.Fprintf(stderr, "moat: --backend: %v\n", err)
		return exitUsage
	}
	// The server settings give the sessions' TTLs, the file cap, the default quotas
	// and the limits' caps. API keys and the data directory are the HTTP server's
	// business: a stdio server reads no key variable and writes no file.
	local := *cfg
	local.Server.APIKeys = nil
	if local.Server.DataDir == "" {
		local.Server.DataDir = os.TempDir()
	}
	srv, err := local.ResolveServer(nil)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, nil))
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Before the engine, so that moat refuses to start when it cannot make boxes.
	backend, closeBackend, err := openBackend(ctx, rb, log)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitInternal
	}
	defer closeBackend() // after the engine's Close, deferred below
	// The cgroups of boxes a moat left when it was killed before it could destroy them.
	defer reapBoxesBehind(log, slog.LevelWarn)()
	eng, err := engine.New(cfg, backend, os.Environ(), log)
	if err != nil {
		fmt.Fprintf(stderr, "moat: %v\n", err)
		return exitUsage
	}
	// Audited like moat run, in the data directory's store (never a stdout sink:
	// stdout is the protocol's); closed after the sessions record their ends.
	trail, err := openAudit(cfg, "", eng, nil, log, false)
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
	// No record directory: a stdio server's sessions end with it, and a server's
	// directory belongs to that server.
	if err := eng.EnableSessions(engine.SessionOptions{
		Store:   session.Options{IdleTTL: srv.Sessions.IdleTTL, MaxLifetime: srv.Sessions.MaxLifetime, MaxTotal: srv.Sessions.MaxTotal, Log: log},
		MaxFile: srv.MaxFile,
	}); err != nil {
		fmt.Fprintf(stderr, "moat: sessions: %v\n", err)
		return exitInternal
	}
	logIsolation(log, backend.Name())

	p := &gate.Principal{
		Name:    localPrincipal,
		Profile: *profile,
		Quotas:  gate.Quotas{Concurrent: srv.Quotas.Concurrent, Sessions: srv.Quotas.Sessions, Rate: srv.Quotas.Rate, Burst: srv.Quotas.Burst},
		MaxLimits: box.DefaultLimits.Merge(box.Limits{
			Timeout: srv.Limits.Timeout, Memory: srv.Limits.Memory, CPUs: srv.Limits.CPUs, Pids: srv.Limits.Pids,
			Disk: srv.Limits.Disk, Tmp: srv.Limits.Tmp, Output: srv.Limits.Output,
		}),
	}
	server := mcp.New(mcp.Options{
		Engine: eng, Log: log, Version: version,
		IdleTTL: srv.Sessions.IdleTTL, MaxLifetime: srv.Sessions.MaxLifetime,
	})
	defer server.Close()

	log.Info("mcp: serving on stdio", "principal", p.Name, "profile", p.Profile)
	if err := server.ServeStdio(ctx, p, stdin, stdout); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("mcp: stdio", "err", err)
		return exitInternal
	}
	log.Info("mcp: stdin ended; destroying the sessions' boxes")
	return 0
}

// mcpGrace is how long an HTTP MCP client's sandbox sessions outlive its MCP
// session: mcp.DefaultGrace, or the debug knob MOAT_MCP_GRACE (a Go duration), which
// tests use to see the sessions go.
func mcpGrace(log *slog.Logger) time.Duration {
	v := os.Getenv("MOAT_MCP_GRACE")
	if v == "" {
		return mcp.DefaultGrace
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		log.Warn("debug knob MOAT_MCP_GRACE ignored: not a duration", "value", v)
		return mcp.DefaultGrace
	}
	log.Info("debug knob in use: MOAT_MCP_GRACE", "grace", d)
	return d
}

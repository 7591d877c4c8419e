// Command moat runs untrusted code in a sandbox. See README.md.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	_ "github.com/moat-sandbox/moat/internal/box/native" // registers the box init role
	"github.com/moat-sandbox/moat/internal/childproc"
)

// Exit statuses of moat itself (not of the code).
const (
	exitUsage    = 2  // bad flags or input; nothing ran
	exitInternal = 70 // moat's own machinery failed (EX_SOFTWARE)
)

const usage = `moat runs untrusted Python and shell code in an isolated box.

Usage:
  moat run [flags] [FILE|-]   run code in a fresh box (moat run -h for flags)
  moat serve [flags]          serve the HTTP API and MCP at /mcp (moat serve -h for flags)
  moat mcp [flags]            serve the MCP tools over stdio, for an agent host (moat mcp -h)
  moat session COMMAND        sessions on a server: create, exec, put, get, ls, rm
                              (moat session for details)
  moat audit [flags]          the audit trail: who ran what, when, what it cost
  moat audit verify           check the audit trail's hash chain
  moat doctor                 what this host supports and what moat enforces here
  moat bench [-n N] [--short] [--json]
                              measure moat against bare python3: cold runs, the API
                              with and without the warm pool, sessions, preloading,
                              throughput and memory (markdown tables)
  moat loadtest [flags]       concurrent clients against a server: latency, throughput, cleanup
  moat config check [FILE]    validate a config file; errors carry line numbers
  moat policy check [flags] FILE
                              what the policy would block, without running the code
  moat version                print the version

`

var version = "dev"

func main() {
	childproc.Dispatch() // a re-executed box init never reaches the CLI
	if len(os.Args) > 1 && os.Args[1] == "run" && os.Getenv("GOMEMLIMIT") == "" {
		// A one-shot run holds little (its box's output is capped), but a box that
		// floods its output makes garbage as fast as moat can read: without a limit
		// the heap's growth took moat past 30 MiB of RSS (issue #2's bound; 25 MiB
		// with it). A soft limit, far above a normal run's heap (3-4 MiB), so that
		// runs that stay under it collect no more often than before.
		debug.SetMemoryLimit(runMemoryLimit)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// runMemoryLimit is moat run's soft limit on the memory the Go runtime holds.
const runMemoryLimit = 12 << 20

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run", "serve", "mcp", "bench", "loadtest":
		if builtWithCgo() {
			fmt.Fprintln(stderr, cgoRefusal)
			return exitInternal
		}
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdin, stdout, stderr)
	case "serve":
		return cmdServe(args[1:], stderr)
	case "mcp":
		return cmdMCP(args[1:], stdin, stdout, stderr)
	case "session":
		return cmdSession(args[1:], stdin, stdout, stderr)
	case "audit":
		return cmdAudit(args[1:], stdout, stderr)
	case "doctor":
		return cmdDoctor(args[1:], stdout, stderr)
	case "bench":
		return cmdBench(args[1:], stdout, stderr)
	case "loadtest":
		return cmdLoadtest(args[1:], stdout, stderr)
	case "config":
		return cmdConfig(args[1:], stdout, stderr)
	case "policy":
		return cmdPolicy(args[1:], stdin, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "moat", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "moat: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// cgoRefusal is what the commands that make boxes say in a binary built with cgo.
const cgoRefusal = "moat: this binary was built with cgo, where a box's init cannot set no_new_privs on all its threads (syscall.AllThreadsSyscall); build it with CGO_ENABLED=0 (make build)"

// builtWithCgo reports whether this binary was built with CGO_ENABLED=1 (go build's
// default where a C compiler is installed). In such a binary every native box would
// fail at its no-new-privs step, so the commands that make boxes refuse at once.
func builtWithCgo() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			return s.Value == "1"
		}
	}
	return false
}

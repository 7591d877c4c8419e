// Package childproc is the registry of the moat binary's child roles. moat re-executes
// itself (via /proc/self/exe or an fd of its own binary) with argv[1] naming a role,
// e.g. "__moat-init"; main calls Dispatch before parsing flags, so a child never runs
// the CLI. Roles are not commands: users never type them.
package childproc

import (
	"fmt"
	"os"
	"sync"
)

var (
	mu    sync.Mutex
	roles = map[string]func() int{}
)

// Add registers run as the child role name. It panics on a duplicate name.
func Add(name string, run func() int) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := roles[name]; dup {
		panic(fmt.Sprintf("childproc: duplicate role %q", name))
	}
	roles[name] = run
}

// Dispatch runs the role named by os.Args[1], if any, and exits with its status.
// It returns only when the process is not a child.
func Dispatch() {
	if len(os.Args) < 2 {
		return
	}
	mu.Lock()
	run, ok := roles[os.Args[1]]
	mu.Unlock()
	if ok {
		os.Exit(run())
	}
}

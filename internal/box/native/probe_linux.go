package native

import (
	"fmt"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/internal/linux/cgroup"
	"github.com/moat-sandbox/moat/internal/linux/landlock"
	"github.com/moat-sandbox/moat/internal/linux/seccomp"
)

// Check is one line of `moat doctor`.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Probe inspects the host: what the native backend can enforce here. It changes
// nothing. (moat doctor checks the docker and gvisor backends itself.)
func Probe() []Check {
	var out []Check
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	if os.Geteuid() == 0 {
		add("privileges", true, "running as root: the native backend maps unprivileged host uids and creates cgroups")
	} else {
		add("privileges", true, "not root: rootless mode (the code still runs as uid 65534 with no capabilities; cgroups only where delegated)")
	}
	if n := readTrim("/proc/sys/user/max_user_namespaces"); n == "0" {
		add("user namespaces", false, "disabled (user.max_user_namespaces=0)")
	} else {
		detail := "available (max " + n + ")"
		if v := readTrim("/proc/sys/kernel/unprivileged_userns_clone"); v == "0" {
			detail += "; unprivileged creation disabled (kernel.unprivileged_userns_clone=0)"
		}
		add("user namespaces", true, "%s", detail)
	}
	if err := seccomp.Supported(); err != nil {
		add("seccomp", false, "unavailable: %v", err)
	} else {
		add("seccomp", true, "filter mode available; %d syscalls denied explicitly", len(seccomp.DeniedSyscalls()))
	}
	if abi := landlock.ABI(); abi > 0 {
		add("landlock", true, "ABI %d: writes confined to /tmp, /workspace, /dev/shm", abi)
	} else {
		add("landlock", false, "not supported by this kernel: writes are confined by read-only mounts only")
	}
	info := cgroup.Detect()
	if info.Version == 0 {
		add("cgroups", false, "unavailable (%s): limits fall back to rlimits", info.Reason)
	} else {
		detail := fmt.Sprintf("v%d with %s", info.Version, strings.Join(info.Controllers, ", "))
		if info.Reason != "" {
			detail += " (" + info.Reason + ")"
		}
		add("cgroups", true, "%s", detail)
	}
	return out
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Enforced says in plain words what `moat run` enforces on this host, given checks.
func Enforced(checks []Check) []string {
	ok := map[string]bool{}
	for _, c := range checks {
		ok[c.Name] = c.OK
	}
	if !ok["user namespaces"] || !ok["seccomp"] {
		return []string{"nothing: moat run refuses to start here (see the checks above)"}
	}
	lines := []string{
		"new user, mount, PID, network, IPC, UTS and cgroup namespaces; code runs as uid 65534 with no capabilities",
		"a fresh read-only root of /usr and the loader's files; tmpfs /tmp and a size-capped /workspace",
		"no network at all (an empty network namespace with only loopback)",
		"no_new_privs and a seccomp filter (mount, ptrace, unshare, bpf, keyctl, module loading... denied)",
	}
	if ok["landlock"] {
		lines = append(lines, "Landlock: writes only to /tmp, /workspace and /dev/shm")
	} else {
		lines = append(lines, "no Landlock (kernel too old): writes confined by read-only mounts only")
	}
	if ok["cgroups"] {
		lines = append(lines, "cgroup limits on memory, processes and CPU; OOM kills detected")
	} else {
		lines = append(lines, "WARNING: no cgroups: memory, processes and CPU limited by rlimits only")
	}
	lines = append(lines, "rlimits (processes, open files, CPU time, no core dumps); wall-clock timeout kills the whole box")
	return lines
}

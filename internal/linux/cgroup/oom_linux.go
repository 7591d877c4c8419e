package cgroup

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
)

// OOMKillFile returns the control file that counts the OOM kills in the memory
// cgroup of process pid, as this process's mounts show it: memory.oom_control in
// the v1 memory hierarchy when memory is a v1 controller, else memory.events in
// the unified hierarchy. Both hold the count under "oom_kill" (Linux 4.13); read
// it with ReadOOMKills. It is for cgroups that moat did not make, such as a
// container's; want, when not empty, must occur in the cgroup's path (a
// container's ID), so that a pid that names another process here (a daemon on
// another host) is refused rather than counted.
func OOMKillFile(pid int, want string) (string, error) {
	self, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	return oomKillFileFrom(string(mountinfo), string(self), want)
}

// oomKillFileFrom is OOMKillFile on the texts of /proc/self/mountinfo and
// /proc/PID/cgroup.
func oomKillFileFrom(mountinfo, procCgroup, want string) (string, error) {
	var v1, v2 string
	hasV1, hasV2 := false, false
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "":
			v2, hasV2 = parts[2], true
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1, hasV1 = parts[2], true
		}
	}
	p, fstype, file := v2, "cgroup2", "memory.events"
	switch {
	case hasV1:
		p, fstype, file = v1, "cgroup", "memory.oom_control"
	case !hasV2:
		return "", fmt.Errorf("no memory cgroup in %q", procCgroup)
	}
	if want != "" && !strings.Contains(p, want) {
		return "", fmt.Errorf("memory cgroup %s does not name %s", p, want)
	}
	for _, m := range parseMountinfo(mountinfo) {
		if m.fstype != fstype || (fstype == "cgroup" && !slices.Contains(m.opts, "memory")) {
			continue
		}
		if dir, ok := m.dir(p); ok {
			return path.Join(dir, file), nil
		}
	}
	return "", fmt.Errorf("memory cgroup %s is under no %s mount here", p, fstype)
}

// ReadOOMKills reads the count of OOM kills from a file of OOMKillFile: -1 when
// the kernel does not count them.
func ReadOOMKills(file string) (int64, error) {
	return readStat(file, "oom_kill")
}

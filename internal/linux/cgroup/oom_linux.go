package cgroup

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"
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
	mountinfo, procCgroup, err := cgroupTexts(pid)
	if err != nil {
		return "", err
	}
	return oomKillFileFrom(mountinfo, procCgroup, want)
}

// cgroupTexts reads what controlFileFrom looks in: this process's
// /proc/self/mountinfo and /proc/PID/cgroup.
func cgroupTexts(pid int) (mountinfo, procCgroup string, err error) {
	c, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", "", err
	}
	m, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	return string(m), string(c), nil
}

// oomKillFileFrom is OOMKillFile on the texts of /proc/self/mountinfo and
// /proc/PID/cgroup.
func oomKillFileFrom(mountinfo, procCgroup, want string) (string, error) {
	return controlFileFrom(mountinfo, procCgroup, want, "memory", "memory.oom_control", "memory.events")
}

// UsageFiles returns the control files that hold the CPU time and the peak memory of
// the cgroups of process pid, found as OOMKillFile finds its file (want likewise):
// cpuacct.usage and memory.max_usage_in_bytes on v1, cpu.stat and memory.peak on v2
// (which Linux 5.19 added). Read them with ReadCPU and ReadPeak.
func UsageFiles(pid int, want string) (cpu, peak string, err error) {
	mountinfo, procCgroup, err := cgroupTexts(pid)
	if err != nil {
		return "", "", err
	}
	if cpu, err = controlFileFrom(mountinfo, procCgroup, want, "cpuacct", "cpuacct.usage", "cpu.stat"); err != nil {
		return "", "", err
	}
	if peak, err = controlFileFrom(mountinfo, procCgroup, want, "memory", "memory.max_usage_in_bytes", "memory.peak"); err != nil {
		return "", "", err
	}
	return cpu, peak, nil
}

// ReadCPU reads the CPU time from a cgroup's cpu.stat (v2, usage_usec) or
// cpuacct.usage (v1, nanoseconds), such as a cpu file of UsageFiles: -1 when the
// file or the count is not there.
func ReadCPU(file string) (time.Duration, error) {
	key := cpuKey(file)
	v, err := readStat(file, key)
	return cpuTime(v, key), err
}

// cpuKey is the key of the CPU count in a cgroup's file: usage_usec in v2's
// cpu.stat (microseconds); none in v1's cpuacct.usage, which holds the count alone
// (nanoseconds).
func cpuKey(file string) string {
	if path.Base(file) == "cpu.stat" {
		return "usage_usec"
	}
	return ""
}

// cpuTime is the CPU time a count read with key (cpuKey) stands for; -1 (the count
// is not there) stays -1.
func cpuTime(v int64, key string) time.Duration {
	switch {
	case v < 0:
		return -1
	case key == "usage_usec":
		return time.Duration(v) * time.Microsecond
	}
	return time.Duration(v)
}

// ReadPeak reads the peak memory in bytes from a peak file of UsageFiles: -1 when
// the kernel does not keep it.
func ReadPeak(file string) (int64, error) {
	return readStat(file, "")
}

// controlFileFrom returns, from the texts of /proc/self/mountinfo and
// /proc/PID/cgroup, the path here of the control file of the process's cgroup of
// controller: v1file in that v1 hierarchy when the controller is a v1 one, else
// v2file in the unified hierarchy. want, when not empty, must occur in the cgroup's
// path.
func controlFileFrom(mountinfo, procCgroup, want, controller, v1file, v2file string) (string, error) {
	var v1, v2 string
	hasV1, hasV2 := false, false
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(parts) != 3:
		case parts[0] == "0" && parts[1] == "":
			v2, hasV2 = parts[2], true
		case slices.Contains(strings.Split(parts[1], ","), controller):
			v1, hasV1 = parts[2], true
		}
	}
	p, fstype, file := v2, "cgroup2", v2file
	switch {
	case hasV1:
		p, fstype, file = v1, "cgroup", v1file
	case !hasV2:
		return "", fmt.Errorf("no %s cgroup in %q", controller, procCgroup)
	}
	if want != "" && !strings.Contains(p, want) {
		return "", fmt.Errorf("%s cgroup %s does not name %s", controller, p, want)
	}
	for _, m := range parseMountinfo(mountinfo) {
		if m.fstype != fstype || (fstype == "cgroup" && !slices.Contains(m.opts, controller)) {
			continue
		}
		if dir, ok := m.dir(p); ok {
			return path.Join(dir, file), nil
		}
	}
	return "", fmt.Errorf("%s cgroup %s is under no %s mount here", controller, p, fstype)
}

// ReadOOMKills reads the count of OOM kills from a file of OOMKillFile: -1 when
// the kernel does not count them.
func ReadOOMKills(file string) (int64, error) {
	return readStat(file, "oom_kill")
}

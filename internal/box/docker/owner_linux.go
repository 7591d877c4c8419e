package docker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// processStart returns the start time of pid in clock ticks since boot: field 22 of
// /proc/<pid>/stat. Together with the pid it names one process for the life of the
// host, where a pid alone is recycled.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or ')'; the
	// fields after the last ')' start with field 3.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	const startField = 22 - 3
	if len(fields) <= startField {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	return strconv.ParseUint(fields[startField], 10, 64)
}

// processGone reports whether no process pid exists, or a different one than the
// process that started at start (when start is not 0). Any doubt counts as alive: a
// container is only ever removed for an owner that is certainly gone.
func processGone(pid int, start uint64) bool {
	err := unix.Kill(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	if start == 0 {
		return false
	}
	now, err := processStart(pid)
	if err != nil {
		// The process may have exited between the two checks.
		return errors.Is(err, os.ErrNotExist)
	}
	return now != start
}

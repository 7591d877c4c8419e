package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The helpers below talk to cgroupfs with raw open/read/write/close
// instead of package os: control files are tiny, and skipping the
// poller registration and fstat that os.ReadFile and os.File do keeps
// New+Destroy well under a millisecond. Files are never created
// (no O_CREAT): a missing control file surfaces as ENOENT, which the
// callers use to detect optional kernel features.

// writeFile writes data to the control file path in a single write(2),
// as the kernel parses each write separately.
func writeFile(path, data string) error {
	fd, err := openRetry(path, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer unix.Close(fd)
	var n int
	for {
		n, err = unix.Write(fd, []byte(data))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if n != len(data) {
		return fmt.Errorf("write %s: %w", path, io.ErrShortWrite)
	}
	return nil
}

// readFile returns the whole content of the control file path.
func readFile(path string) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// readInt reads a control file holding one decimal integer.
func readInt(path string) (int64, error) {
	b, err := readFile(path)
	if err != nil {
		return 0, err
	}
	return parseInt(b, path)
}

// parseInt parses the content b of the control file path, one decimal integer.
func parseInt(b []byte, path string) (int64, error) {
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// readKey reads a flat-keyed control file ("key value" per line, as
// memory.events, cpu.stat and memory.oom_control) and returns the value
// of key. ok is false when the key is absent.
func readKey(path, key string) (v int64, ok bool, err error) {
	b, err := readFile(path)
	if err != nil {
		return 0, false, err
	}
	return parseKey(b, key, path)
}

// parseKey returns the value of key in the content b of the flat-keyed control
// file path; ok is false when the key is absent.
func parseKey(b []byte, key, path string) (v int64, ok bool, err error) {
	for line := range strings.Lines(string(b)) {
		k, val, found := strings.Cut(strings.TrimSpace(line), " ")
		if !found || k != key {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse %s: %w", path, err)
		}
		return v, true, nil
	}
	return 0, false, nil
}

// readPids parses cgroup.procs: one pid per line.
func readPids(path string) ([]int, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// fsOps creates and removes cgroup directories and writes control
// files. The zero value uses mkdir(2), rmdir(2) and writeFile, which is
// what production uses. Tests over a fake cgroupfs (a temp dir) inject
// functions that play the kernel's part: mkdir also creates the control
// files, rmdir deletes them first (a real cgroupfs rmdir removes a
// directory that still lists its control files, a temp dir would refuse
// with ENOTEMPTY), and write gives cgroup.procs, cgroup.kill and
// cgroup.subtree_control their semantics (moving pids, EBUSY under the
// no-internal-process rule). Reads always go to the files directly.
type fsOps struct {
	mkdir func(path string) error
	rmdir func(path string) error
	write func(path, data string) error
}

func (o fsOps) writeFile(path, data string) error {
	if o.write == nil {
		return writeFile(path, data)
	}
	if err := o.write(path, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func (o fsOps) makeDir(path string) error {
	var err error
	if o.mkdir != nil {
		err = o.mkdir(path)
	} else {
		err = unix.Mkdir(path, 0o755)
	}
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", path, err)
	}
	return nil
}

func (o fsOps) removeDir(path string) error {
	var err error
	if o.rmdir != nil {
		err = o.rmdir(path)
	} else {
		err = unix.Rmdir(path)
	}
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", path, err)
	}
	return nil
}

// OwnCPU returns the CPU time used so far by every task of the calling process's
// cgroup, read from the cgroup file system at /sys/fs/cgroup, for a process whose
// cgroup is the root of its cgroup namespace: a box's init in a container with a
// cgroup namespace of its own (docker's "private" mode), which reads its container's
// use so. ok is false when the files are not there, or when the process's cgroup is
// not its namespace's root (the numbers would be some ancestor's).
func OwnCPU() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controllers:path; the path of every hierarchy must be "/".
		if parts := strings.SplitN(line, ":", 3); len(parts) != 3 || parts[2] != "/" {
			return 0, false
		}
	}
	for _, f := range []string{"/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"} {
		if d, err := ReadCPU(f); err == nil && d >= 0 {
			return d, true
		}
	}
	return 0, false
}

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"
)

// counters are a box's counter files (CPU, peak memory, OOM kills), opened at its
// first Stats and read at offset 0 from then on: a box's counters are read before
// and after each call of a session and at its end, and opening a file by its path
// (eight components through cgroupfs, two syscalls more) cost more than reading
// it. A descriptor follows its directory through a spare's renames; Destroy (and a
// failed keep, through Destroy) closes them.
type counters struct {
	cpu, peak, oom counterFile
}

// counterFile is one open counter file. fd is -1 when the kernel has no such file:
// its value is then -1, as readStat's.
type counterFile struct {
	path string // for errors: the file as it was opened (a spare's has its old name)
	key  string // the key of a flat-keyed file, "" for one holding a single integer
	fd   int
}

// openCounters opens b's counter files (see Stats for which) into b.counters,
// unless they are open already. b.mu must be held.
func (b *Box) openCounters() error {
	if b.counters != nil {
		return nil
	}
	var cpu, peak, oom string
	if b.version == V2 {
		d := b.dirs[0]
		cpu, peak, oom = d+"/cpu.stat", d+"/memory.peak", d+"/memory.events"
	} else {
		if d := b.ctl["cpuacct"]; d != "" {
			cpu = d + "/cpuacct.usage"
		}
		peak = b.ctl["memory"] + "/memory.max_usage_in_bytes"
		oom = b.ctl["memory"] + "/memory.oom_control"
	}
	c := &counters{cpu: counterFile{path: cpu, key: cpuKey(cpu), fd: -1}, peak: counterFile{path: peak, fd: -1},
		oom: counterFile{path: oom, key: "oom_kill", fd: -1}}
	for _, f := range []*counterFile{&c.cpu, &c.peak, &c.oom} {
		if f.path == "" {
			continue
		}
		fd, err := openRetry(f.path, unix.O_RDONLY|unix.O_CLOEXEC)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			c.close()
			return fmt.Errorf("read %s: %w", f.path, err)
		}
		f.fd = fd
	}
	b.counters = c
	return nil
}

// read returns the counter's value: -1 when the file or its key is not there.
func (f *counterFile) read() (int64, error) {
	if f.fd < 0 {
		return -1, nil
	}
	// One read from offset 0: a control file's text is made whole for each read
	// from its start (seq_file), and a counter file's is far shorter than buf.
	var buf [4096]byte
	var n int
	var err error
	for {
		n, err = unix.Pread(f.fd, buf[:], 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", f.path, err)
	}
	if n == len(buf) {
		return 0, fmt.Errorf("read %s: longer than %d bytes", f.path, len(buf))
	}
	if f.key == "" {
		return parseInt(buf[:n], f.path)
	}
	v, ok, err := parseKey(buf[:n], f.key, f.path)
	if err == nil && !ok {
		return -1, nil
	}
	return v, err
}

// unknownStats are Stats with nothing known.
var unknownStats = Stats{CPUUsage: -1, PeakMemoryBytes: -1, OOMKills: -1}

// stats reads the three counters into Stats' units (CPU in nanoseconds).
func (c *counters) stats() (Stats, error) {
	s := unknownStats
	cpu, err := c.cpu.read()
	if err != nil {
		return s, err
	}
	s.CPUUsage = cpuTime(cpu, c.cpu.key)
	if s.PeakMemoryBytes, err = c.peak.read(); err != nil {
		return s, err
	}
	s.OOMKills, err = c.oom.read()
	return s, err
}

// close closes the files that are open; the counters read -1 after it.
func (c *counters) close() {
	for _, f := range []*counterFile{&c.cpu, &c.peak, &c.oom} {
		if f.fd >= 0 {
			unix.Close(f.fd)
			f.fd = -1
		}
	}
}

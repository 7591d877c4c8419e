package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Waiting for the warm pool to fill before its memory is measured.
const (
	benchFillWait = 90 * time.Second       // for the pool's boxes to exist and go idle
	benchIdleFor  = 300 * time.Millisecond // with no CPU used by any of them
)

// procMem is a process's memory from /proc/PID/smaps_rollup, in bytes.
type procMem struct{ rss, pss, private int64 }

// smapsRollup reads pid's memory.
func smapsRollup(pid int) (procMem, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return procMem{}, err
	}
	var m procMem
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			m.rss += kb << 10
		case "Pss:":
			m.pss += kb << 10
		case "Private_Clean:", "Private_Dirty:":
			m.private += kb << 10
		}
	}
	return m, nil
}

// benchBox is one box of a server, as /proc shows it.
type benchBox struct {
	name    string // its cgroup: box-SERVERPID-HEX
	pids    []int
	preload bool   // its interpreter preloads modules (--preload=)
	memCg   string // its memory cgroup's usage file, "" when unknown
	// zygote: the box of a zygote (its init and the preloaded interpreter started
	// with --zygote), which the warm boxes are forked from; they are not pool boxes.
	zygote bool
	init   bool // holds the box's init (moat-init)
}

// serverBoxes lists the boxes of the server with pid serverPID: the processes in its
// box cgroups (box-SERVERPID-*), grouped by box.
func serverBoxes(serverPID int) []*benchBox {
	mark := fmt.Sprintf("/moat/box-%d-", serverPID)
	v2 := false
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		v2 = true
	}
	byName := map[string]*benchBox{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !bytes.Contains(cg, []byte(mark)) {
			continue // exited meanwhile, or not a box of this server
		}
		var name, memCg string
		for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			i := strings.Index(f[2], mark)
			if i < 0 {
				continue
			}
			name, _, _ = strings.Cut(f[2][i+len("/moat/"):], "/")
			switch {
			case slices.Contains(strings.Split(f[1], ","), "memory"):
				memCg = filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.usage_in_bytes")
			case v2 && f[0] == "0" && f[1] == "":
				memCg = filepath.Join("/sys/fs/cgroup", f[2], "memory.current")
			}
		}
		b := byName[name]
		if b == nil {
			b = &benchBox{name: name}
			byName[name] = b
		}
		b.pids = append(b.pids, pid)
		if memCg != "" {
			b.memCg = memCg
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		b.preload = b.preload || bytes.Contains(cmd, []byte("--preload="))
		b.zygote = b.zygote || bytes.Contains(cmd, []byte("--zygote"))
		b.init = b.init || bytes.HasPrefix(cmd, []byte("moat-init\x00"))
	}
	var out []*benchBox
	for _, b := range byName {
		// A box forked from a zygote has no init of its own; the zygote's has.
		b.zygote = b.zygote && b.init
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b *benchBox) int { return strings.Compare(a.name, b.name) })
	return out
}

// cpuTicks is the CPU time pids have used, in clock ticks.
func cpuTicks(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		_, rest, _ := bytes.Cut(b, []byte(") ")) // after "pid (comm) "
		f := strings.Fields(string(rest))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			n += u + s
		}
	}
	return n
}

// waitPoolIdle waits until the server has want boxes and none of their processes
// has used CPU for benchIdleFor; it returns the boxes, and an error on timeout.
func waitPoolIdle(ctx context.Context, serverPID, want int) ([]*benchBox, error) {
	deadline := time.Now().Add(benchFillWait)
	var boxes []*benchBox
	for time.Now().Before(deadline) && ctx.Err() == nil {
		boxes = serverBoxes(serverPID)
		var pids []int
		for _, b := range boxes {
			pids = append(pids, b.pids...)
		}
		before := cpuTicks(pids)
		time.Sleep(benchIdleFor)
		if poolBoxes(boxes) == want && cpuTicks(pids) == before && poolBoxes(serverBoxes(serverPID)) == want {
			return boxes, nil
		}
	}
	return boxes, fmt.Errorf("the pool did not fill and settle within %v: %d boxes, want %d", benchFillWait, poolBoxes(boxes), want)
}

// poolBoxes counts the boxes that are not a zygote's.
func poolBoxes(boxes []*benchBox) int {
	n := 0
	for _, b := range boxes {
		if !b.zygote {
			n++
		}
	}
	return n
}

// idleMemory measures both servers once the pool is full: each server process, and
// the warm boxes by kind.
func (s *benchServers) idleMemory(ctx context.Context) []memoryRow {
	var rows []memoryRow
	server := func(id, name string, o *ownServer, startErr error) {
		row := memoryRow{ID: id, Name: name, Procs: 1}
		if startErr != nil {
			row.Error = "the server did not start"
		} else if m, err := smapsRollup(o.pid); err != nil {
			row.Error = err.Error()
		} else {
			row.RSSMiB, row.PSSMiB, row.PrivateMiB = toMiB(m.rss), toMiB(m.pss), toMiB(m.private)
		}
		rows = append(rows, row)
	}
	plainName := "warm box, bare Python (profile default)"
	preName := "warm box, Python preloading pandas (profile " + benchPreloadProfile + ")"
	if s.poolErr != nil {
		server("server_pool", "server, warm pool full, idle", nil, s.poolErr)
		rows = append(rows, memoryRow{ID: "box_python", Name: plainName, Error: "the server did not start"},
			memoryRow{ID: "box_pandas", Name: preName, Error: "the server did not start"})
	} else {
		boxes, err := waitPoolIdle(ctx, s.pool.pid, s.warmBoxes())
		server("server_pool", fmt.Sprintf("server, warm pool full (%d boxes), idle", poolBoxes(boxes)), s.pool, nil)
		var plain, pre, zyPlain, zyPre []*benchBox
		for _, b := range boxes {
			switch {
			case b.zygote && b.preload:
				zyPre = append(zyPre, b)
			case b.zygote:
				zyPlain = append(zyPlain, b)
			case b.preload:
				pre = append(pre, b)
			default:
				plain = append(plain, b)
			}
		}
		rows = append(rows, boxMemory("box_python", plainName, plain, err))
		if len(zyPlain) > 0 {
			rows = append(rows, boxMemory("zygote_python", "its zygote (shared by every such box)", zyPlain, err))
		}
		if s.pandas {
			rows = append(rows, boxMemory("box_pandas", preName, pre, err))
			if len(zyPre) > 0 {
				rows = append(rows, boxMemory("zygote_pandas", "its zygote (shared by every such box)", zyPre, err))
			}
		}
	}
	server("server_nopool", "server, pool off, idle", s.nopool, s.nopoolErr)
	return rows
}

// boxMemory averages the memory of boxes; fillErr, when the pool did not fill, is
// reported with the row.
func boxMemory(id, name string, boxes []*benchBox, fillErr error) memoryRow {
	row := memoryRow{ID: id, Name: name, Boxes: len(boxes)}
	if len(boxes) == 0 {
		row.Error = "no such box found"
		if fillErr != nil {
			row.Error = fillErr.Error()
		}
		return row
	}
	var sum procMem
	var procs, cg int64
	for _, b := range boxes {
		for _, pid := range b.pids {
			m, err := smapsRollup(pid)
			if err != nil {
				row.Error = fmt.Sprintf("box %s, pid %d: %v", b.name, pid, err)
				return row
			}
			sum.rss, sum.pss, sum.private = sum.rss+m.rss, sum.pss+m.pss, sum.private+m.private
			procs++
		}
		if v, err := os.ReadFile(b.memCg); err == nil && b.memCg != "" {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			cg += n
		}
	}
	k := float64(len(boxes))
	row.Procs = round(float64(procs)/k, 10)
	row.RSSMiB, row.PSSMiB, row.PrivateMiB = round(toMiB(sum.rss)/k, 10), round(toMiB(sum.pss)/k, 10), round(toMiB(sum.private)/k, 10)
	row.CgroupMiB = round(toMiB(cg)/k, 10)
	if fillErr != nil {
		row.Error = fillErr.Error()
	}
	return row
}

// peakMemory is the pooled server's peak RSS over the whole bench (VmHWM); call it
// before the server stops.
func (s *benchServers) peakMemory() []memoryRow {
	row := memoryRow{ID: "server_pool_peak", Name: "server with the warm pool, peak RSS over the bench (VmHWM)", Procs: 1}
	if s.poolErr != nil {
		row.Error = "the server did not start"
	} else if v := vmHWM(s.pool.pid); v == 0 {
		row.Error = "no VmHWM in /proc/PID/status"
	} else {
		row.RSSMiB = toMiB(v)
	}
	return []memoryRow{row}
}

// toMiB is b bytes in MiB, to a hundredth.
func toMiB(b int64) float64 { return round(float64(b)/(1<<20), 100) }

// floodRSS runs a box that writes 64 MiB to stdout and samples moat's own peak RSS
// (VmHWM of the moat process only, not of the box).
func floodRSS(self string) floodResult {
	cmd := exec.Command(self, "run", "--json", "--lang", "python", "--output-limit", "1MiB", "-")
	cmd.Stdin = strings.NewReader("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 65536)\n")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return floodResult{Error: err.Error()}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peak int64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return floodResult{Error: err.Error()}
			}
			status := "?"
			if i := bytes.Index(out.Bytes(), []byte(`"status":"`)); i >= 0 {
				rest := out.Bytes()[i+10:]
				status = string(rest[:bytes.IndexByte(rest, '"')])
			}
			return floodResult{Status: status, PeakRSSMiB: round(toMiB(peak), 10)}
		case <-tick.C:
			if v := vmHWM(cmd.Process.Pid); v > peak {
				peak = v
			}
		}
	}
}

func vmHWM(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file run against the host's real cgroups. Outside
// CI they skip when not root; with CI=true they fail instead, because
// CI runs as root and a skip there would hide a regression.

func requireKernel(t testing.TB) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "kernel cgroup test needs root"
	} else if _, err := current(); err != nil {
		reason = err.Error()
	}
	if reason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, not skipping)", reason)
	}
	t.Skip(reason)
}

// boxName returns a fresh "box-<ourpid>-<random>" name.
func boxName(t testing.TB) string {
	t.Helper()
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("box-%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
}

// newKernelBox creates a box on the real host and destroys it at cleanup.
func newKernelBox(t *testing.T, lim Limits) *Box {
	t.Helper()
	b, err := New(boxName(t), lim)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Destroy(); err != nil {
			t.Errorf("cleanup Destroy: %v", err)
		}
	})
	return b
}

// start runs "/bin/sh -c script" inside b. The shell first blocks on
// reading a line, which start writes only once the shell is in the box:
// on v1 AddProc happens after fork, and the script must not run (and
// fork) before. On v2 the shell starts in the box with CLONE_INTO_CGROUP.
func start(t *testing.T, b *Box, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read x; "+script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, ok := b.FD()
	if ok {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if !ok {
		if err := b.AddProc(cmd.Process.Pid); err != nil {
			t.Fatalf("AddProc: %v", err)
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestKernelDetect(t *testing.T) {
	requireKernel(t)
	in := Detect()
	t.Logf("detected %v controllers=%v reason=%q", in.Version, in.Controllers, in.Reason)
	if in.Version == None {
		t.Fatalf("Detect: none: %s", in.Reason)
	}
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(in.Controllers, c) {
			t.Errorf("Controllers %v lacks %s", in.Controllers, c)
		}
	}
}

func TestKernelBox(t *testing.T) {
	requireKernel(t)
	b := newKernelBox(t, Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5})

	t.Run("limits written", func(t *testing.T) {
		type want struct{ file, value string }
		var wants []want
		if b.Version() == V2 {
			d := b.dirs[0]
			wants = []want{
				{d + "/memory.max", "67108864"},
				{d + "/pids.max", "16"},
				{d + "/cpu.max", "50000 100000"},
			}
			if _, err := os.Stat(d + "/memory.swap.max"); err == nil {
				wants = append(wants, want{d + "/memory.swap.max", "0"})
			}
		} else {
			m := b.ctl["memory"]
			wants = []want{
				{m + "/memory.limit_in_bytes", "67108864"},
				{b.ctl["pids"] + "/pids.max", "16"},
				{b.ctl["cpu"] + "/cpu.cfs_period_us", "100000"},
				{b.ctl["cpu"] + "/cpu.cfs_quota_us", "50000"},
			}
			if _, err := os.Stat(m + "/memory.memsw.limit_in_bytes"); err == nil {
				wants = append(wants, want{m + "/memory.memsw.limit_in_bytes", "67108864"})
			}
		}
		for _, w := range wants {
			if got := readTrim(t, w.file); got != w.value {
				t.Errorf("%s = %q, want %q", w.file, got, w.value)
			}
		}
		if got, want := b.Controllers(), []string{"cpu", "memory", "pids"}; !slices.Equal(got, want) {
			t.Errorf("Controllers = %v, want %v", got, want)
		}
		if _, ok := b.FD(); ok != (b.Version() == V2) {
			t.Errorf("FD ok = %v on %v", ok, b.Version())
		}
	})

	// A shell with a background grandchild, so Kill must find more than
	// the process we started.
	cmd := start(t, b, "sleep 30 & sleep 30; wait")
	pid := cmd.Process.Pid
	waitFor(t, func() bool { p, _ := b.procs(); return len(p) >= 2 })

	t.Run("process in box", func(t *testing.T) {
		cg := readTrim(t, fmt.Sprintf("/proc/%d/cgroup", pid))
		if !strings.Contains(cg, "/"+parentName+"/"+b.name) {
			t.Errorf("/proc/%d/cgroup = %q, want it in %s", pid, cg, b.name)
		}
	})

	t.Run("stats", func(t *testing.T) {
		s, err := b.Stats()
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		t.Logf("stats %+v", s)
		if s.CPUUsage < 0 || s.OOMKills != 0 {
			t.Errorf("Stats = %+v, want CPUUsage >= 0, OOMKills 0", s)
		}
		if b.Version() == V1 && s.PeakMemoryBytes <= 0 {
			t.Errorf("PeakMemoryBytes = %d, want > 0 on v1", s.PeakMemoryBytes)
		}
	})

	t.Run("kill", func(t *testing.T) {
		t0 := time.Now()
		if err := b.Kill(); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		t.Logf("Kill took %v", time.Since(t0))
		if p, err := b.procs(); err != nil || len(p) != 0 {
			t.Errorf("after Kill procs = %v, %v; want empty", p, err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("Wait = %v, want killed by SIGKILL", err)
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			t.Errorf("kill(%d, 0) = %v, want ESRCH", pid, err)
		}
	})

	t.Run("destroy", func(t *testing.T) {
		if err := b.Destroy(); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		for _, d := range b.dirs {
			if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stat %s after Destroy: %v, want not exist", d, err)
			}
		}
		if err := b.Destroy(); err != nil {
			t.Errorf("second Destroy: %v", err)
		}
		if _, ok := b.FD(); ok {
			t.Error("FD ok after Destroy")
		}
		if err := b.AddProc(os.Getpid()); !errors.Is(err, ErrDestroyed) {
			t.Errorf("AddProc after Destroy = %v, want ErrDestroyed", err)
		}
	})
}

// TestKernelDestroyLive destroys a box whose processes still run and are
// not our children, the situation after a crash or a fork bomb.
func TestKernelDestroyLive(t *testing.T) {
	requireKernel(t)
	b := newKernelBox(t, Limits{MemoryBytes: 64 << 20, Pids: 64})
	start(t, b, "for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; wait")
	waitFor(t, func() bool { p, _ := b.procs(); return len(p) >= 9 })
	if err := b.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	for _, d := range b.dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s after Destroy: %v", d, err)
		}
	}
}

// requirePython returns /usr/bin/python3, skipping the test without it (failing
// it in CI).
func requirePython(t *testing.T) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return python
}

func TestKernelOOM(t *testing.T) {
	requireKernel(t)
	python := requirePython(t)
	b := newKernelBox(t, Limits{MemoryBytes: 32 << 20, Pids: 16})
	// Once inside the box the shell becomes python, which touches 200 MiB.
	cmd := start(t, b, "exec "+python+` -c "x=bytearray(200<<20)"`)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait = %v, want killed by SIGKILL", err)
	}
	s, err := b.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	t.Logf("stats %+v", s)
	if s.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want >= 1", s.OOMKills)
	}
	if s.PeakMemoryBytes > 32<<20 {
		t.Errorf("PeakMemoryBytes = %d, above the 32 MiB limit", s.PeakMemoryBytes)
	}
}

func TestKernelSweep(t *testing.T) {
	requireKernel(t)
	h, _ := current()
	// A box owned by a pid above any pid_max counts as a crashed run's.
	dead := h.layout(fmt.Sprintf("box-%d-%s", 1<<30, "sweeptest"))
	enabled, err := h.prepare()
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.create(Limits{Pids: 4}, enabled); err != nil {
		t.Fatal(err)
	}
	live := newKernelBox(t, Limits{Pids: 4})
	cmd := start(t, dead, "sleep 30")

	n, err := Sweep()
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if n < 1 {
		t.Errorf("Sweep removed %d, want >= 1", n)
	}
	for _, d := range dead.dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s after Sweep: %v, want not exist", d, err)
		}
	}
	for _, d := range live.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("live box %s: %v", d, err)
		}
	}
	if err := cmd.Wait(); err == nil {
		t.Error("process in swept box survived")
	}
	dead.destroyed = true // already removed by Sweep; closes no fd twice
	if dead.fd >= 0 {
		unix.Close(dead.fd)
	}
}

// TestKernelConcurrent creates and destroys boxes from many goroutines
// at once, as the engine does under load (run it with -race).
func TestKernelConcurrent(t *testing.T) {
	requireKernel(t)
	const workers, perWorker = 8, 25
	prefix := boxName(t)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range perWorker {
				b, err := New(fmt.Sprintf("%s-%d-%d", prefix, w, i), Limits{MemoryBytes: 16 << 20, Pids: 8, CPUs: 0.25})
				if err == nil {
					err = b.Destroy()
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5s")
}

func BenchmarkNewDestroy(b *testing.B) {
	requireKernel(b)
	lim := Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5}
	prefix := boxName(b)
	// Warm up: the first New prepares the moat parents.
	box, err := New(prefix+"w", lim)
	if err != nil {
		b.Fatal(err)
	}
	if err := box.Destroy(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		box, err := New(fmt.Sprintf("%s%d", prefix, i), lim)
		if err != nil {
			b.Fatal(err)
		}
		if err := box.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestKernelHybridV2 runs the v2 code paths against the real kernel on
// a hybrid host, where Detect picks v1 because the cgroup2 mount has no
// controllers. It builds a host with no required controllers over a
// fresh cgroup at the top of that mount, so boxes limit nothing but
// CLONE_INTO_CGROUP, cgroup.kill, the cgroup.freeze fallback, Stats,
// Destroy and Sweep all meet the kernel. Pure v2 hosts run the other
// kernel tests on v2 instead, so skipping here hides nothing.
func TestKernelHybridV2(t *testing.T) {
	requireKernel(t)
	if Detect().Version != V1 {
		t.Skip("not a hybrid host: the other kernel tests cover this host's v2")
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	point := ""
	for _, m := range parseMountinfo(string(mountinfo)) {
		if m.fstype == "cgroup2" && m.root == "/" {
			point = m.point
			break
		}
	}
	if point == "" {
		t.Skip("hybrid host without a cgroup2 mount")
	}
	self := fmt.Sprintf("/moat-test-%d", os.Getpid())
	if err := os.Mkdir(point+self, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{point + self + "/" + parentName, point + self} {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Errorf("rmdir %s: %v", d, err)
			}
		}
	})

	tests := []struct {
		name     string
		hideKill bool // pretend the kernel predates cgroup.kill (5.14)
	}{
		{"cgroup.kill", false},
		{"freeze fallback without cgroup.kill", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := detectFrom(string(mountinfo), "0::"+self+"\n", nil)
			if h.version != V2 {
				t.Fatalf("detect %s: %v %s", self, h.version, h.reason)
			}
			if tt.hideKill {
				h.ops.write = func(p, data string) error {
					if strings.HasSuffix(p, "/cgroup.kill") {
						return unix.ENOENT
					}
					return writeFile(p, data)
				}
			}
			b, err := h.newBox(boxName(t), Limits{})
			if err != nil {
				t.Fatalf("newBox: %v", err)
			}
			t.Cleanup(func() { _ = b.Destroy() })
			if _, ok := b.FD(); !ok {
				t.Fatal("FD not ok on v2")
			}
			cmd := start(t, b, "sleep 30 & sleep 30; wait")
			waitFor(t, func() bool { p, _ := b.procs(); return len(p) >= 3 })
			cg := readTrim(t, fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
			if want := "0::" + self + "/" + parentName + "/" + b.name; !strings.Contains(cg, want) {
				t.Errorf("/proc/%d/cgroup = %q, want a line %q", cmd.Process.Pid, cg, want)
			}
			s, err := b.Stats()
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			if s.CPUUsage < 0 || s.PeakMemoryBytes != -1 || s.OOMKills != -1 {
				t.Errorf("Stats = %+v, want CPUUsage >= 0 and -1 for the memory fields", s)
			}
			if err := b.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			if p, err := b.procs(); err != nil || len(p) != 0 {
				t.Errorf("after Kill procs = %v, %v", p, err)
			}
			if err := cmd.Wait(); err == nil {
				t.Error("shell survived Kill")
			}
			if err := b.Destroy(); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			if _, err := os.Stat(b.dirs[0]); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s after Destroy: %v", b.dirs[0], err)
			}
		})
	}

	t.Run("sweep", func(t *testing.T) {
		h := detectFrom(string(mountinfo), "0::"+self+"\n", nil)
		dead := h.layout(fmt.Sprintf("box-%d-sweep", fakePid))
		if err := dead.create(Limits{}, nil); err != nil {
			t.Fatal(err)
		}
		cmd := start(t, dead, "sleep 30")
		if n, err := h.sweep(); n != 1 || err != nil {
			t.Errorf("sweep = %d, %v; want 1, nil", n, err)
		}
		if err := cmd.Wait(); err == nil {
			t.Error("process in swept box survived")
		}
		if _, err := os.Stat(dead.dirs[0]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after sweep: %v", dead.dirs[0], err)
		}
		unix.Close(dead.fd)
	})
}

// TestKernelRemove: Remove kills what runs in a box known only by its name, removes
// it in every hierarchy, and leaves other boxes alone; a name with no box is no error.
func TestKernelRemove(t *testing.T) {
	requireKernel(t)
	b := newKernelBox(t, Limits{MemoryBytes: 64 << 20, Pids: 16})
	other := newKernelBox(t, Limits{Pids: 16})
	cmd := start(t, b, "sleep 600")
	if err := Remove(b.name); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the box's process exited cleanly; want it killed")
	}
	for _, d := range b.Dirs() {
		if isDir(d) {
			t.Errorf("%s still exists", d)
		}
	}
	for _, d := range other.Dirs() {
		if !isDir(d) {
			t.Errorf("another box's %s is gone", d)
		}
	}
	if err := Remove(boxName(t)); err != nil {
		t.Errorf("Remove of a box that does not exist: %v", err)
	}
	if err := Remove("../escape"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Remove of a bad name: %v", err)
	}
}

// TestKernelKillExcept: KillExcept kills every process of the box but the one it
// spares, which lives on in the box.
func TestKernelKillExcept(t *testing.T) {
	requireKernel(t)
	b := newKernelBox(t, Limits{Pids: 16})
	spared := start(t, b, "exec sleep 600")
	victim := start(t, b, "sleep 600 & sleep 600 & wait")
	if err := b.KillExcept(spared.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := victim.Wait(); err == nil {
		t.Error("a process of the box exited cleanly; want it killed")
	}
	if err := spared.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the spared process is gone: %v", err)
	}
	pids, err := b.procs()
	if err != nil || len(pids) != 1 || pids[0] != spared.Process.Pid {
		t.Errorf("box holds %v (%v), want only the spared %d", pids, err, spared.Process.Pid)
	}
}

// TestKernelEnterThread: a thread that enters a v1 box forks children into it and
// leaves it again, while the rest of the process never belongs to the box; the box
// lists the child alone, and keeps it when the thread has left.
func TestKernelEnterThread(t *testing.T) {
	requireKernel(t)
	b := newKernelBox(t, Limits{MemoryBytes: 64 << 20, Pids: 16})
	type outcome struct {
		inBox, after string
		child        *exec.Cmd
		err          error
	}
	c := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		var o outcome
		defer func() { c <- o }()
		leave, err := b.EnterThread()
		if b.Version() != V1 {
			if !errors.Is(err, errors.ErrUnsupported) {
				o.err = fmt.Errorf("EnterThread on %v = %v, want ErrUnsupported", b.Version(), err)
			}
			runtime.UnlockOSThread()
			return
		}
		if err != nil {
			o.err = fmt.Errorf("EnterThread: %w", err)
			return // the thread may be in the box: it ends with the goroutine
		}
		o.inBox = readThreadCgroup()
		o.child = exec.Command("/bin/sleep", "30")
		startErr := o.child.Start()
		if err := leave(); err != nil {
			o.err = fmt.Errorf("leave: %w", err)
			return
		}
		o.after = readThreadCgroup()
		runtime.UnlockOSThread()
		o.err = startErr
	}()
	o := <-c
	if o.err != nil {
		t.Fatal(o.err)
	}
	if b.Version() != V1 {
		return
	}
	t.Cleanup(func() {
		_ = o.child.Process.Kill()
		_ = o.child.Wait()
	})
	for _, c := range []string{"memory", "pids"} {
		if !strings.Contains(cgroupLine(o.inBox, c), b.name) {
			t.Errorf("entered thread's %s cgroup: %q, want the box %s", c, cgroupLine(o.inBox, c), b.name)
		}
		if strings.Contains(cgroupLine(o.after, c), b.name) {
			t.Errorf("thread after leave still in the box: %q", cgroupLine(o.after, c))
		}
		self, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(cgroupLine(string(self), c), b.name) {
			t.Errorf("the process's main thread is in the box: %q", cgroupLine(string(self), c))
		}
		child, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", o.child.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(cgroupLine(string(child), c), b.name) {
			t.Errorf("child's %s cgroup: %q, want the box", c, cgroupLine(string(child), c))
		}
	}
	pids, err := b.procs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, []int{o.child.Process.Pid}) {
		t.Errorf("box lists %v, want only the child %d", pids, o.child.Process.Pid)
	}
	if err := b.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := o.child.Wait(); err == nil {
		t.Error("the child survived Destroy")
	}
}

// readThreadCgroup is /proc/thread-self/cgroup.
func readThreadCgroup() string {
	b, _ := os.ReadFile("/proc/thread-self/cgroup")
	return string(b)
}

// cgroupLine is the line of a /proc/<pid>/cgroup text for the v1 controller c.
func cgroupLine(text, c string) string {
	for _, l := range strings.Split(text, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), c) {
			return l
		}
	}
	return ""
}

// TestKernelRecycle: on cgroup v1 an emptied box's directories are kept
// (renamed SparePrefix+name) and handed, renamed again, to the next box with the
// same limits, its counters starting again and the old holder unable to touch
// it; a box that still holds a process is destroyed instead, other limits get
// directories of their own, DestroySpares removes what is kept, and Sweep removes
// a dead owner's kept box. On v2 Recycle destroys.
func TestKernelRecycle(t *testing.T) {
	requireKernel(t)
	python := requirePython(t)
	t.Cleanup(func() {
		if err := DestroySpares(); err != nil {
			t.Errorf("DestroySpares: %v", err)
		}
	})
	gone := func(dirs []string) bool {
		for _, d := range dirs {
			if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
				return false
			}
		}
		return true
	}
	inodes := func(dirs []string) []uint64 {
		var out []uint64
		for _, d := range dirs {
			var st unix.Stat_t
			if err := unix.Stat(d, &st); err != nil {
				t.Fatal(err)
			}
			out = append(out, st.Ino)
		}
		return out
	}
	spareDirs := func(dirs []string, name string) []string {
		var out []string
		for _, d := range dirs {
			out = append(out, path.Join(path.Dir(d), SparePrefix+name))
		}
		return out
	}
	lim := Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 1}
	aName := boxName(t)
	a, err := New(aName, lim)
	if err != nil {
		t.Fatal(err)
	}
	cmd := start(t, a, "exec "+python+` -c "x=bytearray(200<<20)"`) // OOM-killed
	_ = cmd.Wait()
	used, err := a.Stats()
	if err != nil || used.OOMKills < 1 || used.PeakMemoryBytes < 16<<20 {
		t.Fatalf("the first box's stats %+v (%v), want an OOM kill and a peak over 16 MiB", used, err)
	}
	dirs, ino := a.Dirs(), inodes(a.Dirs())
	if err := a.Recycle(); err != nil {
		t.Fatalf("Recycle: %v", err)
	}
	if Detect().Version != V1 {
		if !gone(dirs) || !gone(spareDirs(dirs, aName)) {
			t.Fatalf("Recycle on %v left %v", Detect().Version, dirs)
		}
		return
	}
	if !gone(dirs) || !slices.Equal(inodes(spareDirs(dirs, aName)), ino) {
		t.Fatalf("Recycle did not keep %v as %s%s", dirs, SparePrefix, aName)
	}
	if _, err := a.Stats(); !errors.Is(err, ErrDestroyed) {
		t.Errorf("Stats after Recycle = %v, want ErrDestroyed", err)
	}

	bName := boxName(t)
	b, err := New(bName, lim)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inodes(b.Dirs()), ino) || path.Base(b.Dirs()[0]) != bName || !gone(spareDirs(dirs, aName)) {
		t.Fatalf("New after Recycle made %v, want the kept directories renamed %s", b.Dirs(), bName)
	}
	fresh, err := b.Stats()
	if err != nil || fresh.OOMKills != 0 || fresh.PeakMemoryBytes >= used.PeakMemoryBytes/4 || fresh.CPUUsage >= used.CPUUsage {
		t.Errorf("the kept box's stats %+v (%v) did not start again (the first box's: %+v)", fresh, err, used)
	}
	cmd = start(t, b, "exec "+python+` -c "x=bytearray(200<<20)"`)
	_ = cmd.Wait()
	if s, err := b.Stats(); err != nil || s.OOMKills != 1 {
		t.Errorf("after its own OOM kill the kept box's stats are %+v (%v), want 1 OOM kill", s, err)
	}
	// The first holder's Box acts on nothing now.
	sleeper := start(t, b, "exec sleep 30")
	if err := a.Destroy(); err != nil {
		t.Errorf("Destroy of the recycled Box: %v", err)
	}
	if err := a.Kill(); err != nil {
		t.Errorf("Kill of the recycled Box: %v", err)
	}
	if pids, _ := b.procs(); !slices.Contains(pids, sleeper.Process.Pid) {
		t.Fatalf("the old holder's Destroy or Kill reached the new box (procs %v)", pids)
	}
	// A box still holding a process is destroyed, the process with it.
	bDirs := b.Dirs()
	if err := b.Recycle(); err != nil {
		t.Fatalf("Recycle of a live box: %v", err)
	}
	if !gone(bDirs) || !gone(spareDirs(bDirs, bName)) {
		t.Errorf("Recycle kept a box that held a process: %v", bDirs)
	}
	if err := sleeper.Wait(); err == nil {
		t.Error("the live box's process survived its Recycle")
	}

	// Other limits: directories of their own; DestroySpares removes the kept ones.
	cName := boxName(t)
	c, err := New(cName, lim)
	if err != nil {
		t.Fatal(err)
	}
	other := Limits{MemoryBytes: 48 << 20, Pids: 16}
	if err := c.Recycle(); err != nil {
		t.Fatal(err)
	}
	kept := spareDirs(c.Dirs(), cName)
	d, err := New(boxName(t), other)
	if err != nil {
		t.Fatal(err)
	}
	if gone(kept) || slices.Equal(inodes(d.Dirs()), inodes(kept)) {
		t.Error("a box with other limits took the kept directories")
	}
	_ = d.Destroy()
	if err := DestroySpares(); err != nil {
		t.Fatal(err)
	}
	if !gone(kept) {
		t.Errorf("DestroySpares left %v", kept)
	}

	// A kept box whose owner is gone is swept like its boxes.
	dead := fmt.Sprintf("box-%d-%s", 1<<30, "5ba7e")
	e, err := New(dead, lim)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Recycle(); err != nil {
		t.Fatal(err)
	}
	kept = spareDirs(e.Dirs(), dead)
	if gone(kept) {
		t.Fatalf("Recycle did not keep %v", kept)
	}
	if n, err := Sweep(); err != nil || n < 1 || !gone(kept) {
		t.Errorf("Sweep = %d, %v; kept box of a dead owner left: %v", n, err, !gone(kept))
	}
	if b := h0(t).takeSpare(lim, boxName(t)); b != nil {
		t.Errorf("a swept spare was still handed out: %v", b.Dirs())
		_ = b.Destroy()
	}
}

func h0(t *testing.T) *host {
	t.Helper()
	h, err := current()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestKernelCountersHeld: Stats keeps the counter files open (read at offset 0 from
// then on, their values current), and TaskFDs the tasks files (the same each call);
// a kept box's go with its directories to the next box, and none is left open once
// every box is destroyed and the spares removed.
func TestKernelCountersHeld(t *testing.T) {
	requireKernel(t)
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := openFDs()
	lim := Limits{MemoryBytes: 32 << 20, Pids: 16, CPUs: 1}
	for i := range 30 {
		b, err := New(boxName(t), lim)
		if err != nil {
			t.Fatal(err)
		}
		s0, err := b.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if b.Version() == V1 {
			fds, err := b.TaskFDs()
			again, err2 := b.TaskFDs()
			if err != nil || err2 != nil || len(fds) != len(b.Dirs()) || !slices.Equal(fds, again) {
				t.Fatalf("box %d: TaskFDs %v (%v), then %v (%v), want one per directory, the same each time", i, fds, err, again, err2)
			}
		}
		cmd := start(t, b, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		s1, err := b.Stats()
		if err != nil || s1.CPUUsage <= s0.CPUUsage || s1.PeakMemoryBytes <= 0 {
			t.Fatalf("box %d: stats %+v then %+v (%v), want the CPU its shell used counted", i, s0, s1, err)
		}
		if i%2 == 0 {
			err = b.Destroy()
		} else {
			err = b.Recycle()
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TaskFDs(); err == nil {
			t.Fatalf("box %d: TaskFDs after its end gave descriptors", i)
		}
	}
	if err := DestroySpares(); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(); after != before {
		t.Errorf("%d fds open before the boxes, %d after", before, after)
	}
}

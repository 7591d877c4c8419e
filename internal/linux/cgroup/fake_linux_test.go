package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file run against a fake cgroupfs: a temp dir laid
// out like the kernel's, with fakeKernel playing the kernel's part for
// mkdir, rmdir and writes (see fsOps). They need no privileges.

// fakePid is above any pid_max (at most 2^22), so no real process can
// ever be signalled by a test that puts it in a fake cgroup.procs.
const fakePid = 1 << 30

// Control files the fake kernel creates in every new directory of a
// hierarchy, with their default content.
var (
	memoryFiles = map[string]string{
		"cgroup.procs":                "",
		"memory.limit_in_bytes":       "9223372036854771712\n",
		"memory.memsw.limit_in_bytes": "9223372036854771712\n",
		"memory.max_usage_in_bytes":   "0\n",
		"memory.oom_control":          "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
	}
	pidsFiles    = map[string]string{"cgroup.procs": "", "pids.max": "max\n"}
	cpuFiles     = map[string]string{"cgroup.procs": "", "cpu.cfs_period_us": "100000\n", "cpu.cfs_quota_us": "-1\n"}
	cpuacctFiles = map[string]string{"cgroup.procs": "", "cpuacct.usage": "0\n"}
	freezerFiles = map[string]string{"cgroup.procs": "", "freezer.state": "THAWED\n"}
	v2Files      = map[string]string{
		"cgroup.procs":           "",
		"cgroup.controllers":     "cpu io memory pids\n",
		"cgroup.subtree_control": "",
		"cgroup.events":          "populated 0\nfrozen 0\n",
		"cgroup.freeze":          "0\n",
		"cgroup.kill":            "",
		"memory.max":             "max\n",
		"memory.swap.max":        "max\n",
		"memory.peak":            "0\n",
		"memory.events":          "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
		"pids.max":               "max\n",
		"cpu.max":                "max 100000\n",
		"cpu.stat":               "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
	}
)

// with returns a copy of m with the entries of set added and the keys
// in drop removed.
func with(m map[string]string, set map[string]string, drop ...string) map[string]string {
	out := maps.Clone(m)
	maps.Copy(out, set)
	for _, k := range drop {
		delete(out, k)
	}
	return out
}

// hier is one fake hierarchy: its mount directory under the fake root,
// its super options ("" for cgroup2) and the files of a new cgroup.
type hier struct {
	dir, opts string
	files     map[string]string
}

var (
	v1Separate = []hier{
		{"memory", "memory", memoryFiles},
		{"pids", "pids", pidsFiles},
		{"cpu", "cpu", cpuFiles},
		{"cpuacct", "cpuacct", cpuacctFiles},
		{"freezer", "freezer", freezerFiles},
		{"systemd", "name=systemd", map[string]string{"cgroup.procs": ""}},
	}
	v1Comounted = []hier{
		{"memory", "memory", with(memoryFiles, nil, "memory.memsw.limit_in_bytes")},
		{"pids", "pids", pidsFiles},
		{"cpu,cpuacct", "cpu,cpuacct", with(cpuFiles, cpuacctFiles)},
	}
	v2Full = []hier{{"unified", "", v2Files}}
)

// fakeKernel implements fsOps over a temp dir.
type fakeKernel struct {
	root  string
	hiers map[string]hier // by mount directory name
}

// newFake builds a fake cgroupfs with hs mounted under a temp dir and
// our own cgroup at /svc in each, and returns it with the host detected
// from it.
func newFake(t *testing.T, hs []hier) (*fakeKernel, *host) {
	t.Helper()
	k := &fakeKernel{root: t.TempDir(), hiers: map[string]hier{}}
	var mountinfo, self strings.Builder
	for i, h := range hs {
		k.hiers[h.dir] = h
		point := filepath.Join(k.root, h.dir)
		if err := os.Mkdir(point, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := k.mkdir(point + "/svc"); err != nil {
			t.Fatal(err)
		}
		if h.opts == "" {
			fmt.Fprintf(&mountinfo, "%d 31 0:%d / %s rw,relatime shared:9 - cgroup2 cgroup2 rw\n", 40+i, 40+i, point)
			fmt.Fprintf(&self, "0::/svc\n")
		} else {
			fmt.Fprintf(&mountinfo, "%d 31 0:%d / %s rw,relatime shared:9 - cgroup cgroup rw,%s\n", 40+i, 40+i, point, h.opts)
			fmt.Fprintf(&self, "%d:%s:/svc\n", 10-i, h.opts)
		}
	}
	h := detectFrom(mountinfo.String(), self.String(), required)
	if h.version == None {
		t.Fatalf("fake host not detected: %s", h.reason)
	}
	h.ops = fsOps{mkdir: k.mkdir, rmdir: k.rmdir, write: k.write}
	return k, h
}

// hierOf returns the hierarchy a path belongs to.
func (k *fakeKernel) hierOf(p string) hier {
	rel, _ := filepath.Rel(k.root, p)
	return k.hiers[strings.Split(rel, "/")[0]]
}

// mkdir creates a cgroup directory with its control files.
func (k *fakeKernel) mkdir(p string) error {
	if err := unix.Mkdir(p, 0o755); err != nil {
		return err
	}
	for name, content := range k.hierOf(p).files {
		if err := os.WriteFile(filepath.Join(p, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// rmdir removes a cgroup directory: its files go with it, but like on
// cgroupfs it fails while child cgroups exist.
func (k *fakeKernel) rmdir(p string) error {
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			if err := os.Remove(filepath.Join(p, e.Name())); err != nil {
				return err
			}
		}
	}
	return unix.Rmdir(p)
}

// write writes a control file, which must exist, with the kernel's
// semantics for cgroup.procs (a pid is in one cgroup per hierarchy),
// cgroup.kill (empties the cgroup), cgroup.subtree_control (EBUSY
// while a non-root cgroup has processes) and the v1 memory limits
// (memsw may never drop below the memory limit).
func (k *fakeKernel) write(p, data string) error {
	dir, file := filepath.Split(p)
	dir = filepath.Clean(dir)
	if _, err := os.Stat(p); err != nil {
		return unix.ENOENT
	}
	switch file {
	case "cgroup.procs":
		pid := strings.TrimSpace(data)
		err := filepath.WalkDir(filepath.Join(k.root, k.hierOf(p).dir), func(q string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return err
			}
			b, err := os.ReadFile(q)
			if err != nil {
				return err
			}
			lines := slices.DeleteFunc(strings.Fields(string(b)), func(s string) bool { return s == pid })
			if q == p {
				lines = append(lines, pid)
			}
			return os.WriteFile(q, []byte(strings.Join(lines, "\n")), 0o644)
		})
		return err
	case "cgroup.kill":
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), nil, 0o644); err != nil {
			return err
		}
	case "memory.limit_in_bytes", "memory.memsw.limit_in_bytes":
		// The kernel keeps memsw >= limit and refuses writes that would
		// break it, so the order of the two writes matters.
		v, err := strconv.ParseInt(strings.TrimSpace(data), 10, 64)
		if err != nil {
			return unix.EINVAL
		}
		limit, _ := os.ReadFile(filepath.Join(dir, "memory.limit_in_bytes"))
		memsw, err := os.ReadFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
		l, _ := strconv.ParseInt(strings.TrimSpace(string(limit)), 10, 64)
		m, _ := strconv.ParseInt(strings.TrimSpace(string(memsw)), 10, 64)
		if err == nil && (file == "memory.limit_in_bytes" && v > m || file == "memory.memsw.limit_in_bytes" && v < l) {
			return unix.EINVAL
		}
	case "cgroup.subtree_control":
		isRoot := filepath.Dir(dir) == k.root
		if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); !isRoot && len(strings.TrimSpace(string(b))) > 0 {
			return unix.EBUSY
		}
	}
	return os.WriteFile(p, []byte(data), 0o644)
}

// boxFile returns the path of a box's control file, picking the v1
// directory from the file's controller prefix ("memory.max" -> memory).
func boxFile(b *Box, file string) string {
	if b.version == V2 {
		return filepath.Join(b.dirs[0], file)
	}
	c, _, _ := strings.Cut(file, ".")
	return filepath.Join(b.ctl[c], file)
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeString(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFakeNewDestroy(t *testing.T) {
	tests := []struct {
		name      string
		hiers     []hier
		lim       Limits
		want      map[string]string // control file -> content
		absent    []string          // control files that must not exist
		wantCtl   []string
		wantDirs  int
		wantFDOK  bool
		wantVersn Version
	}{
		{
			name:  "v1 separate mounts with memsw",
			hiers: v1Separate,
			lim:   Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5},
			want: map[string]string{
				"memory.limit_in_bytes":       "67108864",
				"memory.memsw.limit_in_bytes": "67108864",
				"pids.max":                    "16",
				"cpu.cfs_period_us":           "100000",
				"cpu.cfs_quota_us":            "50000",
			},
			wantCtl:   []string{"cpu", "memory", "pids"},
			wantDirs:  5,
			wantVersn: V1,
		},
		{
			name:  "v1 co-mounted cpu,cpuacct without memsw or freezer",
			hiers: v1Comounted,
			lim:   Limits{MemoryBytes: 32 << 20, Pids: 8, CPUs: 1.5},
			want: map[string]string{
				"memory.limit_in_bytes": "33554432",
				"pids.max":              "8",
				"cpu.cfs_quota_us":      "150000",
			},
			absent:    []string{"memory.memsw.limit_in_bytes"},
			wantCtl:   []string{"cpu", "memory", "pids"},
			wantDirs:  3,
			wantVersn: V1,
		},
		{
			name:  "v1 zero limits leave kernel defaults",
			hiers: v1Separate,
			lim:   Limits{},
			want: map[string]string{
				"memory.limit_in_bytes": "9223372036854771712",
				"pids.max":              "max",
				"cpu.cfs_quota_us":      "-1",
			},
			wantCtl:   nil,
			wantDirs:  5,
			wantVersn: V1,
		},
		{
			name:      "v1 without cpu hierarchy drops the cpu limit",
			hiers:     v1Separate[:2],
			lim:       Limits{MemoryBytes: 1 << 30, Pids: 100, CPUs: 1},
			want:      map[string]string{"memory.limit_in_bytes": "1073741824", "pids.max": "100"},
			wantCtl:   []string{"memory", "pids"},
			wantDirs:  2,
			wantVersn: V1,
		},
		{
			name:  "v2",
			hiers: v2Full,
			lim:   Limits{MemoryBytes: 64 << 20, Pids: 16, CPUs: 0.5},
			want: map[string]string{
				"memory.max":      "67108864",
				"memory.swap.max": "0",
				"pids.max":        "16",
				"cpu.max":         "50000 100000",
			},
			wantCtl:   []string{"cpu", "memory", "pids"},
			wantDirs:  1,
			wantFDOK:  true,
			wantVersn: V2,
		},
		{
			name: "v2 without swap accounting or cpu controller",
			hiers: []hier{{"unified", "", with(v2Files,
				map[string]string{"cgroup.controllers": "memory pids\n"}, "memory.swap.max")}},
			lim:       Limits{MemoryBytes: 1 << 30, Pids: 100, CPUs: 2},
			want:      map[string]string{"memory.max": "1073741824", "pids.max": "100", "cpu.max": "max 100000"},
			absent:    []string{"memory.swap.max"},
			wantCtl:   []string{"memory", "pids"},
			wantDirs:  1,
			wantFDOK:  true,
			wantVersn: V2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, h := newFake(t, tt.hiers)
			b, err := h.newBox("box-1-a", tt.lim)
			if err != nil {
				t.Fatalf("newBox: %v", err)
			}
			if b.Version() != tt.wantVersn {
				t.Errorf("Version = %v, want %v", b.Version(), tt.wantVersn)
			}
			if len(b.dirs) != tt.wantDirs {
				t.Errorf("dirs = %v, want %d", b.dirs, tt.wantDirs)
			}
			for file, want := range tt.want {
				if got := readString(t, boxFile(b, file)); got != want {
					t.Errorf("%s = %q, want %q", file, got, want)
				}
			}
			for _, file := range tt.absent {
				if _, err := os.Stat(boxFile(b, file)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s exists (%v), want absent", file, err)
				}
			}
			if got := b.Controllers(); !slices.Equal(got, tt.wantCtl) {
				t.Errorf("Controllers = %v, want %v", got, tt.wantCtl)
			}
			if _, ok := b.FD(); ok != tt.wantFDOK {
				t.Errorf("FD ok = %v, want %v", ok, tt.wantFDOK)
			}

			if err := b.AddProc(fakePid); err != nil {
				t.Fatalf("AddProc: %v", err)
			}
			for _, d := range b.dirs {
				if got := readString(t, d+"/cgroup.procs"); got != strconv.Itoa(fakePid) {
					t.Errorf("%s/cgroup.procs = %q after AddProc", d, got)
				}
			}
			// Empty the fake box again: v1 Kill would wait for the
			// fake pid to die.
			for _, d := range b.dirs {
				writeString(t, d+"/cgroup.procs", "")
			}

			if err := b.Destroy(); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			for _, d := range b.dirs {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s after Destroy: %v, want removed", d, err)
				}
				if !isDir(filepath.Dir(d)) {
					t.Errorf("moat parent %s removed, want kept", filepath.Dir(d))
				}
			}
			if err := b.Destroy(); err != nil {
				t.Errorf("second Destroy = %v, want nil", err)
			}
			if _, ok := b.FD(); ok {
				t.Error("FD ok after Destroy")
			}
		})
	}
}

func TestFakeNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		hiers   []hier
		box     string
		lim     Limits
		setup   func(t *testing.T, h *host)
		wantErr error
	}{
		{name: "bad name", hiers: v1Separate, box: "../x", wantErr: ErrInvalidName},
		{name: "negative memory", hiers: v2Full, box: "box-1-a", lim: Limits{MemoryBytes: -1}, wantErr: ErrInvalidLimits},
		{name: "cpu below 1ms quota", hiers: v2Full, box: "box-1-a", lim: Limits{CPUs: 0.001}, wantErr: ErrInvalidLimits},
		{
			name:  "missing pids.max removes the v1 dirs already made",
			hiers: []hier{v1Separate[0], {"pids", "pids", with(pidsFiles, nil, "pids.max")}, v1Separate[2]},
			box:   "box-1-a", lim: Limits{MemoryBytes: 1 << 20, Pids: 4},
			wantErr: fs.ErrNotExist,
		},
		{
			name:  "existing name is refused and kept",
			hiers: v2Full,
			box:   "box-1-a",
			setup: func(t *testing.T, h *host) {
				if _, err := h.prepare(); err != nil {
					t.Fatal(err)
				}
				if err := h.ops.makeDir(h.base + "/moat/box-1-a"); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: fs.ErrExist,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, h := newFake(t, tt.hiers)
			if tt.setup != nil {
				tt.setup(t, h)
			}
			before := listBoxes(t, h)
			b, err := h.newBox(tt.box, tt.lim)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("newBox = %v, %v; want error %v", b, err, tt.wantErr)
			}
			if after := listBoxes(t, h); !slices.Equal(after, before) {
				t.Errorf("boxes after failed New = %v, want %v", after, before)
			}
		})
	}
}

// listBoxes lists every directory under the moat parents of h.
func listBoxes(t *testing.T, h *host) []string {
	t.Helper()
	bases := h.v1Bases()
	if h.version == V2 {
		bases = []string{h.base}
	}
	var out []string
	for _, base := range bases {
		entries, err := os.ReadDir(base + "/moat")
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, base+"/moat/"+e.Name())
			}
		}
	}
	return out
}

func TestFakeStats(t *testing.T) {
	tests := []struct {
		name  string
		hiers []hier
		files map[string]string
		want  Stats
	}{
		{
			name:  "v1",
			hiers: v1Separate,
			files: map[string]string{
				"cpuacct.usage":             "1500000000\n",
				"memory.max_usage_in_bytes": "1048576\n",
				"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
			},
			want: Stats{CPUUsage: 1500 * time.Millisecond, PeakMemoryBytes: 1 << 20, OOMKills: 2},
		},
		{
			name:  "v1 without cpuacct, kernel before oom_kill",
			hiers: v1Separate[:2],
			files: map[string]string{
				"memory.max_usage_in_bytes": "4096\n",
				"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\n",
			},
			want: Stats{CPUUsage: -1, PeakMemoryBytes: 4096, OOMKills: -1},
		},
		{
			name:  "v2",
			hiers: v2Full,
			files: map[string]string{
				"cpu.stat":      "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
				"memory.peak":   "8192\n",
				"memory.events": "low 0\nhigh 0\nmax 7\noom 1\noom_group_kill 9\noom_kill 1\n",
			},
			want: Stats{CPUUsage: 2500 * time.Microsecond, PeakMemoryBytes: 8192, OOMKills: 1},
		},
		{
			name:  "v2 before memory.peak",
			hiers: []hier{{"unified", "", with(v2Files, nil, "memory.peak")}},
			files: map[string]string{"cpu.stat": "usage_usec 7\n"},
			want:  Stats{CPUUsage: 7 * time.Microsecond, PeakMemoryBytes: -1, OOMKills: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, h := newFake(t, tt.hiers)
			b, err := h.newBox("box-1-a", Limits{MemoryBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for file, content := range tt.files {
				writeString(t, boxFile(b, file), content)
			}
			got, err := b.Stats()
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			if got != tt.want {
				t.Errorf("Stats = %+v, want %+v", got, tt.want)
			}
			if err := b.Destroy(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Stats(); !errors.Is(err, ErrDestroyed) {
				t.Errorf("Stats after Destroy = %v, want ErrDestroyed", err)
			}
		})
	}
}

func TestFakeV2Evacuate(t *testing.T) {
	k, h := newFake(t, v2Full)
	svc := filepath.Join(k.root, "unified/svc")
	// Our cgroup holds processes, so the kernel refuses to enable
	// controllers for its children until they move out.
	writeString(t, svc+"/cgroup.procs", fmt.Sprintf("%d\n%d\n", fakePid, fakePid+1))

	b, err := h.newBox("box-1-a", Limits{MemoryBytes: 1 << 20, Pids: 4, CPUs: 1})
	if err != nil {
		t.Fatalf("newBox: %v", err)
	}
	if got := readString(t, svc+"/cgroup.procs"); got != "" {
		t.Errorf("svc/cgroup.procs = %q, want empty", got)
	}
	want := fmt.Sprintf("%d\n%d", fakePid, fakePid+1)
	if got := readString(t, svc+"/"+supervisorName+"/cgroup.procs"); got != want {
		t.Errorf("supervisor cgroup.procs = %q, want %q", got, want)
	}
	if got, want := b.Controllers(), []string{"cpu", "memory", "pids"}; !slices.Equal(got, want) {
		t.Errorf("Controllers = %v, want %v", got, want)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestFakeKillV2(t *testing.T) {
	_, h := newFake(t, v2Full)
	b, err := h.newBox("box-1-a", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddProc(fakePid); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if got := readString(t, b.dirs[0]+"/cgroup.kill"); got != "1" {
		t.Errorf("cgroup.kill = %q, want 1", got)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestFakeSweep(t *testing.T) {
	own := os.Getpid()
	for _, layout := range []struct {
		name  string
		hiers []hier
	}{{"v1", v1Separate}, {"v2", v2Full}} {
		t.Run(layout.name, func(t *testing.T) {
			k, h := newFake(t, layout.hiers)
			newBox := func(name string) *Box {
				b, err := h.newBox(name, Limits{Pids: 4})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			dead := newBox(fmt.Sprintf("box-%d-a", fakePid))
			live := newBox(fmt.Sprintf("box-%d-b", own))
			other := newBox("other")
			badPid := newBox("box-x1-c")
			noSuffix := newBox(fmt.Sprintf("box-%d-", fakePid+2))
			// A crash between mkdirs leaves a box in one hierarchy only.
			half := h.layout(fmt.Sprintf("box-%d-d", fakePid+1))
			if err := k.mkdir(half.dirs[0]); err != nil {
				t.Fatal(err)
			}
			// Files are not boxes.
			writeString(t, filepath.Dir(half.dirs[0])+fmt.Sprintf("/box-%d-e", fakePid+3), "")

			n, err := h.sweep()
			if err != nil {
				t.Fatalf("sweep: %v", err)
			}
			if n != 2 {
				t.Errorf("sweep removed %d, want 2", n)
			}
			for _, b := range []*Box{dead, half} {
				for _, d := range b.dirs {
					if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s after sweep: %v, want removed", d, err)
					}
				}
			}
			for _, b := range []*Box{live, other, badPid, noSuffix} {
				for _, d := range b.dirs {
					if !isDir(d) {
						t.Errorf("%s removed by sweep, want kept", d)
					}
				}
			}
		})
	}
}

func TestDetectFrom(t *testing.T) {
	type tree map[string]string // file (relative to the fake root) -> content
	tests := []struct {
		name      string
		files     tree
		mountinfo string // ROOT is replaced by the fake root
		self      string
		want      Info
		wantBase  string // v2 base, relative to ROOT
	}{
		{
			name:      "pure v2",
			files:     tree{"cg/user.slice/app/cgroup.controllers": "cpuset cpu io memory pids\n"},
			mountinfo: "30 23 0:26 / ROOT/cg rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
			self:      "0::/user.slice/app\n",
			want:      Info{Version: V2, Controllers: []string{"cpu", "memory", "pids"}},
			wantBase:  "cg/user.slice/app",
		},
		{
			name:      "v2 without cpu",
			files:     tree{"cg/app/cgroup.controllers": "memory pids\n"},
			mountinfo: "30 23 0:26 / ROOT/cg rw - cgroup2 cgroup2 rw\n",
			self:      "0::/app\n",
			want:      Info{Version: V2, Controllers: []string{"memory", "pids"}, Reason: "cgroup v2 at ROOT/cg lacks cpu"},
			wantBase:  "cg/app",
		},
		{
			name:      "v2 from the supervisor leaf uses its parent",
			files:     tree{"cg/app/cgroup.controllers": "cpu memory pids\n", "cg/app/moat-supervisor/cgroup.controllers": ""},
			mountinfo: "30 23 0:26 / ROOT/cg rw - cgroup2 cgroup2 rw\n",
			self:      "0::/app/moat-supervisor\n",
			want:      Info{Version: V2, Controllers: []string{"cpu", "memory", "pids"}},
			wantBase:  "cg/app",
		},
		{
			name:      "v2 bind mount of a subtree",
			files:     tree{"cg/app/cgroup.controllers": "memory pids\n"},
			mountinfo: "30 23 0:26 /docker/abc ROOT/cg rw - cgroup2 cgroup2 rw\n",
			self:      "0::/docker/abc/app\n",
			want:      Info{Version: V2, Controllers: []string{"memory", "pids"}, Reason: "cgroup v2 at ROOT/cg lacks cpu"},
			wantBase:  "cg/app",
		},
		{
			name: "hybrid with empty unified falls back to v1",
			files: tree{
				"unified/cgroup.controllers": "hugetlb\n",
				"memory/m/x/.keep":           "", "pids/.keep": "", "cpu/.keep": "", "cpuacct/.keep": "", "freezer/.keep": "",
			},
			mountinfo: "32 31 0:29 / ROOT/cpu rw - cgroup cgroup rw,cpu\n" +
				"33 31 0:30 / ROOT/cpuacct rw - cgroup cgroup rw,cpuacct\n" +
				"35 31 0:32 / ROOT/memory rw - cgroup cgroup rw,memory\n" +
				"37 31 0:34 / ROOT/freezer rw - cgroup cgroup rw,freezer\n" +
				"39 31 0:36 / ROOT/pids rw - cgroup cgroup rw,pids\n" +
				"40 31 0:37 / ROOT/systemd rw - cgroup cgroup rw,name=systemd\n" +
				"41 31 0:38 / ROOT/unified rw - cgroup2 cgroup2 rw\n",
			self: "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/m/x\n2:cpuacct:/\n1:cpu:/\n0::/\n",
			want: Info{Version: V1, Controllers: []string{"cpu", "cpuacct", "freezer", "memory", "pids"},
				Reason: "cgroup v2 at ROOT/unified lacks memory, pids"},
		},
		{
			name:      "v1 co-mounted without freezer",
			files:     tree{"memory/.keep": "", "pids/.keep": "", "cpu,cpuacct/.keep": ""},
			mountinfo: "32 31 0:29 / ROOT/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n35 31 0:32 / ROOT/memory rw - cgroup cgroup rw,memory\n39 31 0:36 / ROOT/pids rw - cgroup cgroup rw,pids\n",
			self:      "4:memory:/\n3:pids:/\n2:cpu,cpuacct:/\n",
			want:      Info{Version: V1, Controllers: []string{"cpu", "cpuacct", "memory", "pids"}, Reason: "no cgroup v1 hierarchy for freezer"},
		},
		{
			name:      "v1 without pids",
			files:     tree{"memory/.keep": ""},
			mountinfo: "35 31 0:32 / ROOT/memory rw - cgroup cgroup rw,memory\n",
			self:      "4:memory:/\n",
			want:      Info{Reason: "no cgroup v1 hierarchy for pids"},
		},
		{
			name:      "cgroup namespace path outside the mount",
			files:     tree{"cg/cgroup.controllers": "memory pids\n"},
			mountinfo: "30 23 0:26 / ROOT/cg rw - cgroup2 cgroup2 rw\n",
			self:      "0::/../../other\n",
			want:      Info{Reason: "no cgroup v1 hierarchy for memory, pids"},
		},
		{
			name:      "nothing mounted",
			mountinfo: "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n",
			self:      "0::/\n",
			want:      Info{Reason: "no cgroup v1 hierarchy for memory, pids"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tt.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				writeString(t, p, content)
			}
			h := detectFrom(strings.ReplaceAll(tt.mountinfo, "ROOT", root), tt.self, required)
			got := h.info()
			got.Reason = strings.ReplaceAll(got.Reason, root, "ROOT")
			if got.Version != tt.want.Version || got.Reason != tt.want.Reason || !slices.Equal(got.Controllers, tt.want.Controllers) {
				t.Errorf("info = %+v, want %+v", got, tt.want)
			}
			if tt.wantBase != "" && h.base != filepath.Join(root, tt.wantBase) {
				t.Errorf("base = %s, want ROOT/%s", h.base, tt.wantBase)
			}
		})
	}
}

func TestMountDir(t *testing.T) {
	tests := []struct {
		name        string
		root, point string
		cgroup      string
		want        string
		wantOK      bool
	}{
		{"root mount", "/", "/sys/fs/cgroup/memory", "/a/b", "/sys/fs/cgroup/memory/a/b", true},
		{"root cgroup", "/", "/sys/fs/cgroup", "/", "/sys/fs/cgroup", true},
		{"subtree mount", "/docker/x", "/sys/fs/cgroup", "/docker/x/y", "/sys/fs/cgroup/y", true},
		{"subtree mount itself", "/docker/x", "/sys/fs/cgroup", "/docker/x", "/sys/fs/cgroup", true},
		{"sibling with common prefix", "/docker/x", "/sys/fs/cgroup", "/docker/xy", "", false},
		{"outside the namespace", "/", "/sys/fs/cgroup", "/..", "", false},
		{"relative", "/", "/sys/fs/cgroup", "a", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := mount{root: tt.root, point: tt.point}.dir(tt.cgroup)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("dir(%q) = %q, %v; want %q, %v", tt.cgroup, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	text := "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
		`32 31 0:29 / /sys/fs/cgroup/cpu\040x rw,relatime shared:5 master:1 - cgroup cgroup rw,cpu,cpuacct` + "\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n" +
		"garbage\n"
	want := []mount{
		{root: "/", point: "/sys/fs/cgroup/cpu x", fstype: "cgroup", opts: []string{"rw", "cpu", "cpuacct"}},
		{root: "/", point: "/sys/fs/cgroup/unified", fstype: "cgroup2", opts: []string{"rw"}},
	}
	got := parseMountinfo(text)
	if len(got) != len(want) {
		t.Fatalf("parseMountinfo = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].root != want[i].root || got[i].point != want[i].point || got[i].fstype != want[i].fstype || !slices.Equal(got[i].opts, want[i].opts) {
			t.Errorf("mount %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestValidate(t *testing.T) {
	names := []struct {
		name string
		ok   bool
	}{
		{"box-123-abcdef", true},
		{"A_b-9", true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"cgroup.procs", false},
		{strings.Repeat("a", 65), false},
		{"box-1-\x00", false},
	}
	for _, tt := range names {
		t.Run("name "+strconv.Quote(tt.name), func(t *testing.T) {
			err := checkName(tt.name)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidName)) {
				t.Errorf("checkName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
			}
		})
	}
	limits := []struct {
		name string
		lim  Limits
		ok   bool
	}{
		{"zero", Limits{}, true},
		{"typical", Limits{MemoryBytes: 256 << 20, Pids: 64, CPUs: 1}, true},
		{"minimum cpu", Limits{CPUs: 0.01}, true},
		{"below minimum cpu", Limits{CPUs: 0.009}, false},
		{"negative memory", Limits{MemoryBytes: -1}, false},
		{"negative pids", Limits{Pids: -1}, false},
		{"negative cpu", Limits{CPUs: -1}, false},
		{"nan cpu", Limits{CPUs: nan()}, false},
	}
	for _, tt := range limits {
		t.Run("limits "+tt.name, func(t *testing.T) {
			err := tt.lim.validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidLimits)) {
				t.Errorf("validate(%+v) = %v, want ok=%v", tt.lim, err, tt.ok)
			}
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// TestSignalAll checks the recycled-pid guard with a real child: a pid
// that is still listed is killed, one that vanished from cgroup.procs
// between the two reads is spared.
func TestSignalAll(t *testing.T) {
	tests := []struct {
		name     string
		listed   bool
		wantKill bool
	}{
		{"still listed is killed", true, true},
		{"no longer listed is spared", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("/bin/sh", "-c", "exec sleep 30")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}()
			pid := cmd.Process.Pid
			reread := func() ([]int, error) {
				if tt.listed {
					return []int{pid}, nil
				}
				return nil, nil
			}
			if err := signalAll([]int{pid}, reread); err != nil {
				t.Fatalf("signalAll: %v", err)
			}
			if !tt.wantKill {
				if err := unix.Kill(pid, 0); err != nil {
					t.Errorf("process %d gone (%v), want alive", pid, err)
				}
				return
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("Wait = %v, want killed by SIGKILL", err)
			}
		})
	}
}

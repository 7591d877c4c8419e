package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOOMKillFileFrom(t *testing.T) {
	const id = "0f8acc17372d3626800db652d6c96789641c146f0385b616d08fc7816685ba4d"
	hybrid := `30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:9 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,nosuid shared:10 - cgroup cgroup rw,pids
32 25 0:28 / /sys/fs/cgroup/unified rw,nosuid shared:11 - cgroup2 cgroup2 rw
`
	unified := "29 25 0:25 / /sys/fs/cgroup rw,nosuid shared:8 - cgroup2 cgroup2 rw\n"
	bind := "40 25 0:26 /docker /mnt/mem rw - cgroup cgroup rw,memory\n"
	cases := []struct {
		name, mountinfo, cgroup, want, file string
		fails                               bool
	}{
		{name: "v1 memory beside an empty unified mount", mountinfo: hybrid,
			cgroup: "12:pids:/docker/" + id + "\n5:memory:/docker/" + id + "\n0::/docker/" + id + "\n", want: id,
			file: "/sys/fs/cgroup/memory/docker/" + id + "/memory.oom_control"},
		{name: "co-mounted v1 controllers", mountinfo: "30 25 0:26 / /sys/fs/cgroup/memory,cpu rw - cgroup cgroup rw,cpu,memory\n",
			cgroup: "5:cpu,memory:/docker/" + id + "\n", want: id,
			file: "/sys/fs/cgroup/memory,cpu/docker/" + id + "/memory.oom_control"},
		{name: "v2, systemd driver", mountinfo: unified,
			cgroup: "0::/system.slice/docker-" + id + ".scope\n", want: id,
			file: "/sys/fs/cgroup/system.slice/docker-" + id + ".scope/memory.events"},
		{name: "a bind mount of part of the hierarchy", mountinfo: bind,
			cgroup: "5:memory:/docker/" + id + "\n", want: id, file: "/mnt/mem/" + id + "/memory.oom_control"},
		{name: "another process's cgroup", mountinfo: hybrid, cgroup: "5:memory:/user.slice\n", want: id, fails: true},
		{name: "no memory cgroup", mountinfo: hybrid, cgroup: "12:pids:/docker/" + id + "\n", want: id, fails: true},
		{name: "not under any mount", mountinfo: unified, cgroup: "5:memory:/docker/" + id + "\n", want: id, fails: true},
		{name: "outside our cgroup namespace", mountinfo: unified, cgroup: "0::/../docker/" + id + "\n", want: id, fails: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file, err := oomKillFileFrom(c.mountinfo, c.cgroup, c.want)
			if c.fails {
				if err == nil {
					t.Fatalf("got %s, want an error", file)
				}
				return
			}
			if err != nil || file != c.file {
				t.Fatalf("got %q, %v; want %q", file, err, c.file)
			}
		})
	}
}

func TestReadOOMKills(t *testing.T) {
	dir := t.TempDir()
	v1 := filepath.Join(dir, "memory.oom_control")
	if err := os.WriteFile(v1, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old.oom_control") // before Linux 4.13
	if err := os.WriteFile(old, []byte("oom_kill_disable 0\nunder_oom 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file  string
		n     int64
		fails bool
	}{{v1, 3, false}, {old, -1, false}, {filepath.Join(dir, "gone"), -1, false}} {
		n, err := ReadOOMKills(c.file)
		if n != c.n || (err != nil) != c.fails {
			t.Errorf("%s: %d, %v; want %d", filepath.Base(c.file), n, err, c.n)
		}
	}
}

// TestUsageFilesFrom: the CPU and peak-memory files of a container's cgroup, found as
// its OOM-kill counter is, on v1 (cpuacct co-mounted with cpu) and v2; and read.
func TestUsageFilesFrom(t *testing.T) {
	const id = "0f8acc17372d3626800db652d6c96789641c146f0385b616d08fc7816685ba4d"
	v1 := `30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:9 - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:12 - cgroup cgroup rw,cpu,cpuacct
`
	cg := "4:cpu,cpuacct:/docker/" + id + "\n5:memory:/docker/" + id + "\n"
	if f, err := controlFileFrom(v1, cg, id, "cpuacct", "cpuacct.usage", "cpu.stat"); err != nil || f != "/sys/fs/cgroup/cpu,cpuacct/docker/"+id+"/cpuacct.usage" {
		t.Errorf("v1 cpu: %q, %v", f, err)
	}
	if f, err := controlFileFrom(v1, cg, id, "memory", "memory.max_usage_in_bytes", "memory.peak"); err != nil || f != "/sys/fs/cgroup/memory/docker/"+id+"/memory.max_usage_in_bytes" {
		t.Errorf("v1 peak: %q, %v", f, err)
	}
	unified := "29 25 0:25 / /sys/fs/cgroup rw,nosuid shared:8 - cgroup2 cgroup2 rw\n"
	if f, err := controlFileFrom(unified, "0::/system.slice/docker-"+id+".scope\n", id, "cpuacct", "cpuacct.usage", "cpu.stat"); err != nil || f != "/sys/fs/cgroup/system.slice/docker-"+id+".scope/cpu.stat" {
		t.Errorf("v2 cpu: %q, %v", f, err)
	}

	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if d, err := ReadCPU(write("cpuacct.usage", "1500000000\n")); err != nil || d.Milliseconds() != 1500 {
		t.Errorf("v1 cpu: %v, %v", d, err)
	}
	if d, err := ReadCPU(write("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n")); err != nil || d.Milliseconds() != 2500 {
		t.Errorf("v2 cpu: %v, %v", d, err)
	}
	if v, err := ReadPeak(write("memory.peak", "4096\n")); err != nil || v != 4096 {
		t.Errorf("peak: %d, %v", v, err)
	}
	if v, err := ReadPeak(filepath.Join(dir, "missing")); err != nil || v != -1 {
		t.Errorf("a missing peak: %d, %v, want -1", v, err)
	}
}

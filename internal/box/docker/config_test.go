package docker

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/moat-sandbox/moat/internal/box"
	bc "github.com/moat-sandbox/moat/internal/box/container"
)

var testOwner = Owner{PID: 4242, Host: "testhost", Start: 777}

func TestHardenedConfigDefaults(t *testing.T) {
	cfg, hc := HardenedConfig(ContainerParams{
		Image:         "moat-test-python:bookworm",
		Cmd:           []string{"python3", "-c", "print(1)"},
		AgentHostPath: "/usr/local/bin/moat",
		Owner:         testOwner,
	})
	d := box.DefaultLimits

	checks := []struct {
		name      string
		got, want any
	}{
		{"image", cfg.Image, "moat-test-python:bookworm"},
		{"user is nobody", cfg.User, "65534:65534"},
		{"working dir", cfg.WorkingDir, "/workspace"},
		{"cmd", strings.Join(cfg.Cmd, " "), "python3 -c print(1)"},
		{"no tty", cfg.Tty, false},
		{"stdout attached", cfg.AttachStdout, true},
		{"stderr attached", cfg.AttachStderr, true},
		{"stdin closed by default", cfg.OpenStdin || cfg.AttachStdin || cfg.StdinOnce, false},
		{"stop timeout", *cfg.StopTimeout, StopTimeout},
		{"label box", cfg.Labels[LabelBox], "1"},
		{"label owner", cfg.Labels[LabelOwner], "4242@testhost"},
		{"label owner start", cfg.Labels[LabelOwnerStart], "777"},

		{"network none", string(hc.NetworkMode), "none"},
		{"read-only root", hc.ReadonlyRootfs, true},
		{"cap drop all", strings.Join(hc.CapDrop, ","), "ALL"},
		{"no cap add", len(hc.CapAdd), 0},
		{"not privileged", hc.Privileged, false},
		{"no-new-privileges only", strings.Join(hc.SecurityOpt, ","), "no-new-privileges:true"},
		{"ipc private", hc.IpcMode, container.IPCModePrivate},
		{"cgroupns private", hc.CgroupnsMode, container.CgroupnsModePrivate},
		{"no docker-init", *hc.Init, false},
		{"not auto-removed", hc.AutoRemove, false},
		{"no log driver", hc.LogConfig.Type, "none"},
		{"default runtime", hc.Runtime, ""},
		{"no binds", len(hc.Binds), 0},
		{"no volumes from", len(hc.VolumesFrom), 0},
		{"no devices", len(hc.Devices), 0},
		{"memory", hc.Memory, d.Memory},
		{"swap equals memory", hc.MemorySwap, d.Memory},
		{"pids", *hc.PidsLimit, d.Pids + bc.AgentTasks},
		{"cpus", hc.NanoCPUs, int64(d.CPUs * 1e9)},
		{"shm", hc.ShmSize, d.Tmp},
		{"nofile", *hc.Ulimits[0], container.Ulimit{Name: "nofile", Soft: d.OpenFiles, Hard: d.OpenFiles}},
		{"runc: no nproc ulimit (it would count the uid's host processes)", len(hc.Ulimits), 1},
		{"tmp tmpfs", hc.Tmpfs["/tmp"], "rw,exec,nosuid,nodev,size=67108864,mode=1777"},
		{"workspace tmpfs", hc.Tmpfs["/workspace"], "rw,exec,nosuid,nodev,size=104857600,mode=0755,uid=65534,gid=65534"},
		{"moat tmpfs", hc.Tmpfs["/.moat"], "rw,noexec,nosuid,nodev,size=16777216,mode=0755,uid=65534,gid=65534"},
		{"three tmpfs", len(hc.Tmpfs), 3},
		{"agent mount", hc.Mounts, []mount.Mount{{
			Type: mount.TypeBind, Source: "/usr/local/bin/moat", Target: "/.moat-agent/moat",
			ReadOnly: true, BindOptions: &mount.BindOptions{NonRecursive: true},
		}}},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !jsonEqual(c.got, c.want) {
				t.Errorf("got %#v, want %#v", c.got, c.want)
			}
		})
	}
}

func TestHardenedConfigNeverWeakens(t *testing.T) {
	// Whatever the params, the settings that make the box a box stay put.
	params := []ContainerParams{
		{Image: "i"},
		{Image: "i", Runtime: "runsc", Stdin: true},
		{Image: "i", Labels: map[string]string{LabelBox: "0", LabelOwner: "1@evil", "x": "y"}},
		{Image: "i", Limits: box.Limits{Memory: 1 << 30, Pids: 1000, CPUs: 4}},
	}
	for i, p := range params {
		p.Owner = testOwner
		_, hc := HardenedConfig(p)
		cfg, _ := HardenedConfig(p)
		// Under runsc the agent and init are the container's root with
		// container.RootCaps only (init runs the code as the box's user); elsewhere the
		// container's user is the box's, with no capabilities.
		wantCaps, wantRoot := 0, false
		if p.Runtime == RuntimeGVisor {
			wantCaps, wantRoot = len(bc.RootCaps), true
		}
		switch {
		case hc.NetworkMode != "none", !hc.ReadonlyRootfs, hc.Privileged,
			!slices.Equal(hc.CapDrop, []string{"ALL"}), len(hc.CapAdd) != wantCaps,
			wantRoot && (cfg.User != "0:0" || !slices.Equal([]string(hc.CapAdd), bc.RootCaps)),
			!slices.Equal(hc.SecurityOpt, []string{"no-new-privileges:true"}),
			hc.MemorySwap != hc.Memory, hc.Memory <= 0, hc.PidsLimit == nil || *hc.PidsLimit <= 0,
			hc.NanoCPUs <= 0, len(hc.Binds) != 0, len(hc.Mounts) != 0,
			!wantRoot && (cfg.User == "" || strings.HasPrefix(cfg.User, "0:")),
			cfg.Labels[LabelBox] != "1", cfg.Labels[LabelOwner] != "4242@testhost":
			t.Errorf("params %d weakened the box: config %+v host %+v", i, cfg, hc)
		}
	}
}

func TestHardenedConfigParams(t *testing.T) {
	cfg, hc := HardenedConfig(ContainerParams{
		Image:      "python:3.12-slim",
		Name:       "ignored-here",
		Entrypoint: []string{"/.moat-agent/moat", "__agent"},
		Env:        []string{"A=1"},
		UID:        1000,
		GID:        1001,
		Runtime:    "runsc",
		Stdin:      true,
		Limits:     box.Limits{Memory: 64 << 20, CPUs: 0.5, Pids: 16, Disk: 1 << 20, Tmp: 2 << 20, OpenFiles: 64},
		Labels:     map[string]string{"dev.moat.session": "s1"},
		Owner:      Owner{PID: 1, Host: "h"},
	})
	checks := []struct {
		name      string
		got, want any
	}{
		{"runsc: the agent is root with RootCaps only (init runs the code as the box's user)", []any{cfg.User, []string(hc.CapAdd)}, []any{"0:0", bc.RootCaps}},
		{"entrypoint", cfg.Entrypoint, []string{"/.moat-agent/moat", "__agent"}},
		{"env", cfg.Env, []string{"A=1"}},
		{"stdin", []bool{cfg.OpenStdin, cfg.AttachStdin, cfg.StdinOnce}, []bool{true, true, true}},
		{"runtime", hc.Runtime, "runsc"},
		{"memory", []int64{hc.Memory, hc.MemorySwap}, []int64{64 << 20, 64 << 20}},
		{"cpus", hc.NanoCPUs, int64(5e8)},
		{"gvisor: pids cgroup as a backstop for the sandbox's host tasks", *hc.PidsLimit, int64((16+bc.AgentTasks)*GVisorHostTasksPerProc + GVisorHostTasks)},
		{"gvisor: nproc holds the box's tasks", *hc.Ulimits[1], container.Ulimit{Name: "nproc", Soft: 16 + bc.AgentTasks, Hard: 16 + bc.AgentTasks}},
		{"runsc: workspace owned by the box's user, whom init runs the code as", hc.Tmpfs["/workspace"], "rw,exec,nosuid,nodev,size=1048576,mode=0755,uid=65534,gid=65534"},
		{"tmp", hc.Tmpfs["/tmp"], "rw,exec,nosuid,nodev,size=2097152,mode=1777"},
		{"nofile", hc.Ulimits[0].Hard, int64(64)},
		{"extra label", cfg.Labels["dev.moat.session"], "s1"},
		{"unknown start time", cfg.Labels[LabelOwnerStart], ""},
		{"no agent mount", len(hc.Mounts), 0},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !jsonEqual(c.got, c.want) {
				t.Errorf("got %#v, want %#v", c.got, c.want)
			}
		})
	}
}

func TestHardenedConfigCurrentOwner(t *testing.T) {
	cfg, _ := HardenedConfig(ContainerParams{Image: "i"})
	if want := CurrentOwner().String(); cfg.Labels[LabelOwner] != want {
		t.Errorf("owner label %q, want %q", cfg.Labels[LabelOwner], want)
	}
}

func TestParseOwner(t *testing.T) {
	cases := []struct {
		label string
		pid   int
		host  string
		ok    bool
	}{
		{"123@host", 123, "host", true},
		{"123@host@x", 123, "host@x", true},
		{"", 0, "", false},
		{"123", 0, "", false},
		{"123@", 0, "", false},
		{"abc@host", 0, "", false},
		{"0@host", 0, "", false},
		{"-5@host", 0, "", false},
	}
	for _, c := range cases {
		t.Run(c.label, func(t *testing.T) {
			pid, host, ok := parseOwner(c.label)
			if pid != c.pid || host != c.host || ok != c.ok {
				t.Errorf("parseOwner(%q) = %d, %q, %v; want %d, %q, %v", c.label, pid, host, ok, c.pid, c.host, c.ok)
			}
		})
	}
	if o := (Owner{PID: 7, Host: "h"}); o.String() != "7@h" {
		t.Errorf("Owner.String() = %q", o.String())
	}
}

func jsonEqual(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

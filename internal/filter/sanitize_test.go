package filter

import "testing"

func TestSanitizeError(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "timeout after 5s", "timeout after 5s"},
		{"config path", "open /etc/moat/config.yaml: permission denied", "open <path>: permission denied"},
		{"home path", `load "/home/ops/.config/moat/moat.yaml": bad key`, `load "<path>": bad key`},
		{"state dir", "mkdir /var/lib/moat/boxes/b-123/root: no space left on device", "mkdir <path>: no space left on device"},
		{"workspace kept", "open /workspace/data.csv: no such file or directory", "open /workspace/data.csv: no such file or directory"},
		{"tmp kept", "write /tmp/out.txt: file too large", "write /tmp/out.txt: file too large"},
		{"support files kept", "python: can't open file '/.moat/runner.py'", "python: can't open file '/.moat/runner.py'"},
		{"workspace root kept", "chdir /workspace: not a directory", "chdir /workspace: not a directory"},
		{"escape from workspace", "open /workspace/../etc/shadow: denied", "open <path>: denied"},
		{"lookalike of tmp", "open /tmpfs/x and /workspaces/y", "open <path> and <path>"},
		{"sentence end", "cannot read /root/secret.", "cannot read <path>."},
		{"PATH list", "PATH=/usr/local/bin:/usr/bin:/workspace/bin", "PATH=<path>:<path>:/workspace/bin"},
		{"URL path kept", `Get "https://api.example.com/v1/runs": EOF`, `Get "https://api.example.com/v1/runs": EOF`},
		{"file URL", "fetch file:///etc/passwd: refused", "fetch file://<path>: refused"},
		{"relative path kept", "open data/input.csv: not found", "open data/input.csv: not found"},
		{"ipv4 with port", "dial tcp 10.0.3.7:8080: connect: connection refused", "dial tcp <addr>: connect: connection refused"},
		{"ipv6 with port", "dial tcp [fd00:1::5]:443: i/o timeout", "dial tcp <addr>: i/o timeout"},
		{"localhost", "redis at localhost:6379 down", "redis at <addr> down"},
		{"URL with internal address", `Post "http://172.17.0.2:2375/containers/create": EOF`, `Post "http://<addr>/containers/create": EOF`},
		{"version is not an address", "python 3.11.4 required", "python 3.11.4 required"},
		{"unix socket", "dial unix /run/docker.sock: permission denied", "dial unix <path>: permission denied"},
		{
			"panic with stack",
			"panic: runtime error: index out of range [3] with length 2\n\ngoroutine 1 [running]:\nmain.main()\n\t/home/dev/moat/cmd/moat/main.go:12 +0x1d\nexit status 2",
			"panic: runtime error: index out of range [3] with length 2\nexit status 2",
		},
		{
			"several goroutines",
			"fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\ngithub.com/moat-sandbox/moat/internal/engine.(*Engine).Execute(0xc000012345, {0x5a1b20, 0xc0000a0000})\n\t/src/internal/engine/engine.go:88 +0x1f4\ncreated by net/http.(*Server).Serve in goroutine 7\n\t/usr/local/go/src/net/http/server.go:3285 +0x4b4\n\ngoroutine 18 [select]:\nruntime.gopark(...)\n\t/usr/local/go/src/runtime/proc.go:424\n...additional frames elided...",
			"fatal error: all goroutines are asleep - deadlock!",
		},
		{"source location line", "engine.go:88: box failed\nthe box failed", "the box failed"},
		{"everything", "read /srv/moat/x at 192.168.1.10:9000\ngoroutine 5 [running]:\nmain.f()\n\t/a/b.go:1 +0x1",
			"read <path> at <addr>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SanitizeError(tc.in); got != tc.want {
				t.Errorf("SanitizeError(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

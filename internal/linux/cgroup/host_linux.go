package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	// parentName is the directory, below our own cgroup, that holds
	// every box ("<self>/moat/box-...").
	parentName = "moat"
	// supervisorName is the v2 leaf cgroup our own processes move into
	// when the no-internal-process rule forces us out of our cgroup. It
	// is a sibling of parentName; see doc.go.
	supervisorName = "moat-supervisor"
)

// v1Controllers are the legacy hierarchies a box joins, in creation
// order. memory and pids are required; cpu, cpuacct and freezer are
// used when mounted.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// required and optional are the v2 controllers boxes need and the ones
// they use when the parent offers them.
var (
	required = []string{"memory", "pids"}
	optional = []string{"cpu"}
)

// host is one detected cgroup layout. It is built from the text of
// /proc/self/mountinfo and /proc/self/cgroup, so tests can describe a
// fake cgroupfs under a temp dir with the same two texts.
type host struct {
	version Version
	reason  string
	// v2: base is our own cgroup directory, the parent of parentName;
	// offered is its cgroup.controllers.
	base    string
	offered []string
	// v1: base directory (our own cgroup) per controller. Co-mounted
	// controllers ("cpu,cpuacct") share a directory.
	v1 map[string]string
	// required lists the v2 controllers that must be offered; tests on
	// a hybrid host substitute one the unified mount has.
	required []string
	ops      fsOps

	mu       sync.Mutex
	prepared bool
	enabled  []string // v2 controllers enabled for boxes, after prepare
	spares   map[Limits][]*Box
	nspares  int
}

// Detect inspects the host: it reads /proc/self/mountinfo and
// /proc/self/cgroup and the cgroup.controllers file of our own v2
// cgroup. It changes nothing. Each call reads afresh; New and Sweep
// detect once per process and cache the result.
func Detect() Info {
	return detectHost().info()
}

func detectHost() *host {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return &host{reason: err.Error()}
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return &host{reason: err.Error()}
	}
	return detectFrom(string(mountinfo), string(self), required)
}

// info reports the host as an Info.
func (h *host) info() Info {
	in := Info{Version: h.version, Reason: h.reason}
	switch h.version {
	case V2:
		for _, c := range append(slices.Clone(optional), h.required...) {
			if slices.Contains(h.offered, c) {
				in.Controllers = append(in.Controllers, c)
			}
		}
	case V1:
		for c := range h.v1 {
			in.Controllers = append(in.Controllers, c)
		}
	}
	slices.Sort(in.Controllers)
	return in
}

// mount is one cgroup or cgroup2 line of mountinfo.
type mount struct {
	root, point, fstype string
	opts                []string // super options, e.g. rw,memory
}

// detectFrom picks v2 if a cgroup2 mount contains our cgroup and offers
// req, else v1 if memory and pids hierarchies contain our cgroup.
func detectFrom(mountinfo, self string, req []string) *host {
	h := &host{required: req}
	var notes []string
	v1paths := map[string]string{}
	v2path, hasV2 := "", false
	for line := range strings.Lines(self) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2path, hasV2 = parts[2], true
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			v1paths[c] = parts[2]
		}
	}
	mounts := parseMountinfo(mountinfo)

	if hasV2 {
		for _, m := range mounts {
			if m.fstype != "cgroup2" {
				continue
			}
			dir, ok := m.dir(v2path)
			if !ok {
				continue
			}
			if path.Base(dir) == supervisorName && dir != m.point {
				dir = path.Dir(dir)
			}
			b, err := readFile(dir + "/cgroup.controllers")
			if err != nil {
				notes = append(notes, err.Error())
				break
			}
			offered := strings.Fields(string(b))
			var missing []string
			for _, c := range req {
				if !slices.Contains(offered, c) {
					missing = append(missing, c)
				}
			}
			if len(missing) > 0 {
				notes = append(notes, fmt.Sprintf("cgroup v2 at %s lacks %s", m.point, strings.Join(missing, ", ")))
				break
			}
			h.version, h.base, h.offered = V2, dir, offered
			for _, c := range optional {
				if !slices.Contains(offered, c) {
					notes = append(notes, fmt.Sprintf("cgroup v2 at %s lacks %s", m.point, c))
				}
			}
			h.reason = strings.Join(notes, "; ")
			return h
		}
	}

	h.v1 = map[string]string{}
	for _, m := range mounts {
		if m.fstype != "cgroup" {
			continue
		}
		for _, c := range m.opts {
			if !slices.Contains(v1Controllers, c) || h.v1[c] != "" {
				continue
			}
			p, ok := v1paths[c]
			if !ok {
				continue
			}
			if dir, ok := m.dir(p); ok && isDir(dir) {
				h.v1[c] = dir
			}
		}
	}
	var missing, absent []string
	for _, c := range v1Controllers {
		if h.v1[c] != "" {
			continue
		}
		if c == "memory" || c == "pids" {
			missing = append(missing, c)
		} else {
			absent = append(absent, c)
		}
	}
	if len(missing) > 0 {
		notes = append(notes, "no cgroup v1 hierarchy for "+strings.Join(missing, ", "))
		h.v1 = nil
		h.reason = strings.Join(notes, "; ")
		return h
	}
	if len(absent) > 0 {
		notes = append(notes, "no cgroup v1 hierarchy for "+strings.Join(absent, ", "))
	}
	h.version = V1
	h.reason = strings.Join(notes, "; ")
	return h
}

// dir returns the directory of cgroup p (a path from /proc/self/cgroup)
// inside mount m, or false if m does not contain it. Paths that are not
// clean and absolute (cgroup namespaces show "/.." for cgroups outside
// the namespace) are rejected.
func (m mount) dir(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return "", false
	}
	rel := p
	if m.root != "/" {
		r, ok := strings.CutPrefix(p, m.root)
		if !ok || (r != "" && r[0] != '/') {
			return "", false
		}
		rel = r
	}
	return path.Join(m.point, rel), true
}

// parseMountinfo returns the cgroup and cgroup2 mounts listed in the text
// of /proc/self/mountinfo (see proc(5)).
func parseMountinfo(text string) []mount {
	var out []mount
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, mount{
			root:   unescape(f[3]),
			point:  unescape(f[4]),
			fstype: fstype,
			opts:   strings.Split(f[sep+3], ","),
		})
	}
	return out
}

// unescape decodes the \ooo octal escapes mountinfo uses for space, tab,
// newline and backslash.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// v1Bases returns the distinct v1 base directories in v1Controllers
// order.
func (h *host) v1Bases() []string {
	var out []string
	for _, c := range v1Controllers {
		if d := h.v1[c]; d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// prepare creates the moat parent directories once per host; for v2 it
// also enables the controllers boxes need, evacuating our own processes
// into the supervisor leaf if the no-internal-process rule requires it.
// It returns the v2 controllers enabled for boxes.
func (h *host) prepare() ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prepared {
		return h.enabled, nil
	}
	var err error
	if h.version == V2 {
		err = h.prepare2()
	} else {
		for _, d := range h.v1Bases() {
			if err = h.mkdirExist(d + "/" + parentName); err != nil {
				break
			}
		}
	}
	h.prepared = err == nil
	return h.enabled, err
}

// unprepare forgets prepare's work, so the next New redoes it (used
// when the moat parent disappeared under us).
func (h *host) unprepare() {
	h.mu.Lock()
	h.prepared = false
	h.mu.Unlock()
}

func (h *host) mkdirExist(p string) error {
	if err := h.ops.makeDir(p); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// prepare2 builds, under our own cgroup <self>:
//
//	<self>/cgroup.subtree_control  += memory pids [cpu]   (needs <self> empty)
//	<self>/moat-supervisor/        our processes, only if <self> had to be emptied
//	<self>/moat/cgroup.subtree_control += memory pids [cpu]
//	<self>/moat/box-*/             the boxes (created by New)
func (h *host) prepare2() error {
	ctl := h.base + "/cgroup.subtree_control"
	parent := h.base + "/" + parentName
	enable := "+" + strings.Join(h.required, " +")
	if len(h.required) > 0 {
		err := h.ops.writeFile(ctl, enable)
		if errors.Is(err, unix.EBUSY) {
			err = h.evacuate(ctl, enable)
		}
		if err != nil {
			return err
		}
	}
	if err := h.mkdirExist(parent); err != nil {
		return err
	}
	if len(h.required) > 0 {
		if err := h.ops.writeFile(parent+"/cgroup.subtree_control", enable); err != nil {
			return err
		}
	}
	h.enabled = slices.Clone(h.required)
	// Optional controllers are best effort: enabling cpu fails, for
	// example, while real-time threads run outside the root cgroup.
	for _, c := range optional {
		if !slices.Contains(h.offered, c) {
			continue
		}
		if h.ops.writeFile(ctl, "+"+c) == nil && h.ops.writeFile(parent+"/cgroup.subtree_control", "+"+c) == nil {
			h.enabled = append(h.enabled, c)
		}
	}
	return nil
}

// evacuate moves every process of our own cgroup into the supervisor
// leaf and retries enabling controllers, which the kernel refuses with
// EBUSY while the cgroup has member processes. A process forked into
// our cgroup meanwhile makes the write fail again, hence the retries.
func (h *host) evacuate(ctl, enable string) error {
	leaf := h.base + "/" + supervisorName
	if err := h.mkdirExist(leaf); err != nil {
		return err
	}
	var err error
	for range 10 {
		var pids []int
		pids, err = readPids(h.base + "/cgroup.procs")
		if err != nil {
			return err
		}
		for _, pid := range pids {
			werr := h.ops.writeFile(leaf+"/cgroup.procs", fmt.Sprint(pid))
			if werr != nil && !errors.Is(werr, unix.ESRCH) {
				return werr
			}
		}
		err = h.ops.writeFile(ctl, enable)
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
	}
	return err
}

var (
	defaultMu   sync.Mutex
	defaultHost *host
)

// current returns the cached host, detecting it on first use. A failed
// detection is not cached.
func current() (*host, error) {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if defaultHost != nil {
		return defaultHost, nil
	}
	h := detectHost()
	if h.version == None {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, h.reason)
	}
	defaultHost = h
	return h, nil
}

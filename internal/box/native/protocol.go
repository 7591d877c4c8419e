package native

import (
	"github.com/moat-sandbox/moat/internal/box"

	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Frames on the sync socket are a 4-byte big-endian length and a JSON body. Both
// directions are bounded: a frame over the limit ends the box, never the parent.
const (
	maxSpecFrame = 4 << 20  // parent -> init: the spec carries the code (MaxCodeBytes)
	maxInitFrame = 64 << 10 // init -> parent: small status messages
)

// initSpec is everything init needs, sent as the first frame. It never travels in argv or
// the environment.
type initSpec struct {
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Code     []byte   `json:"code"`
	CodePath string   `json:"code_path"`
	// Support files go under /.moat, read-only, beside the code.
	Support []box.SupportFile `json:"support"`
	// ReportFD, when non-zero, is init's fd of the report pipe; the code gets it as fd 3.
	ReportFD  int        `json:"report_fd"`
	Files     []initFile `json:"files"`
	TmpBytes  int64      `json:"tmp_bytes"`
	DiskBytes int64      `json:"disk_bytes"`
	Pids      int64      `json:"pids"`
	OpenFiles int64      `json:"open_files"`
	CPUSecs   uint64     `json:"cpu_secs"`
	// AddressSpace, when non-zero, is RLIMIT_AS: the memory fallback without cgroups.
	AddressSpace int64 `json:"address_space"`
	// HostExe is the moat binary's host path, masked inside the box if a bound tree holds it.
	HostExe string `json:"host_exe"`
	// Seccomp is the encoded filter stack (seccomp.Encoded), assembled by the parent.
	Seccomp []byte `json:"seccomp"`
	// Rootless: moat runs as an ordinary user; only its own uid and gid are mapped.
	Rootless bool `json:"rootless"`
	// UserLimits, for init to write to the box's /proc/sys/user, and SigPending (0:
	// none), its RLIMIT_SIGPENDING: the box's share of per-user quotas it draws from
	// with others (a rootless box: with the user who runs moat; quotaShares).
	UserLimits map[string]int64 `json:"user_limits,omitempty"`
	SigPending uint64           `json:"sigpending,omitempty"`
	// Container: init runs in a box another runtime made (a Starter's container):
	// the namespaces, the root, /tmp, /workspace and /.moat exist, init runs as the
	// box's user without privileges, or as the container's root with only the
	// capabilities to run the code as the box's user (see initSpec.codeAsBoxUser),
	// and it does the rest (starter_linux.go).
	Container bool `json:"container"`
	// Trace asks init to time its steps (debug knob MOAT_DEBUG_PHASES).
	Trace bool `json:"trace"`
	// Session keeps init serving requests after the interpreter starts (agent_linux.go)
	// instead of ending with the code; CodePath is then empty.
	Session bool `json:"session"`
	// RequestFD, when non-zero, is init's fd of the session's request pipe: the
	// interpreter reads it as fd 4, or as its stdin with RequestOnStdin.
	RequestFD      int  `json:"request_fd"`
	RequestOnStdin bool `json:"request_on_stdin"`
	// EgressFD, when non-zero, is init's end of the socket pair on which it sends the
	// box's egress sockets (egress_linux.go); the box's resolv.conf then names the
	// box's own DNS socket and Landlock lets the code connect to the proxy's port.
	EgressFD int `json:"egress_fd"`
	// Zygote makes the box a zygote's (zygote_linux.go): init starts Argv as the
	// box's root, with the capabilities to make boxes and its control socket
	// (init's ZygoteFD) as fd 3, instead of confining itself and the code.
	Zygote   bool `json:"zygote"`
	ZygoteFD int  `json:"zygote_fd"`

	laps []string
	last time.Time
}

// lap records the time since the previous lap, when tracing.
func (s *initSpec) lap(name string) {
	if !s.Trace {
		return
	}
	now := time.Now()
	if !s.last.IsZero() {
		s.laps = append(s.laps, fmt.Sprintf("%s=%s", name, now.Sub(s.last).Round(time.Microsecond)))
	}
	s.last = now
}

// goFrame follows the spec once init is in the box's cgroup.
type goFrame struct {
	Go bool `json:"go"`
}

type initFile struct {
	Dest string `json:"dest"`
	FD   int    `json:"fd"`
}

// initMsg is what init reports: one "error" (setup failed at Step) or one "exit".
type initMsg struct {
	Kind        string `json:"kind"` // "error" | "exit"
	Step        string `json:"step,omitempty"`
	Errno       int    `json:"errno,omitempty"`
	Detail      string `json:"detail,omitempty"`
	ExitCode    int    `json:"exit_code"`
	Signal      int    `json:"signal,omitempty"`
	CPUMicros   int64  `json:"cpu_us"`
	MaxRSSBytes int64  `json:"max_rss_bytes"`
	LandlockABI int    `json:"landlock_abi"`
	SetupMicros int64  `json:"setup_us"` // from init's start to the code's fork
	Laps        string `json:"laps,omitempty"`
}

// Session frames, after the spec: the parent sends agentReq frames, init answers each
// with one agentMsg (and data chunks for file contents), and tells of the
// interpreter's end on its own ("exited"). A data chunk is a frame whose length word
// has chunkBit set: the low bits count the raw bytes that follow; a chunk of zero
// bytes ends the data.
const (
	chunkBit      = 1 << 31
	maxChunk      = 256 << 10
	maxAgentFrame = 4 << 20 // a listing of box.MaxListEntries entries fits
)

// Agent operations (agentReq.Op). Each is served inside the box, by init, after
// pivot_root: no path in a request is ever resolved on the host.
const (
	opStart  = "start"  // start the interpreter again after it ended; answer "started"
	opSignal = "signal" // signal the interpreter's process group; no answer
	opPut    = "put"    // data chunks follow; write them to Path; answer "ok"
	opGet    = "get"    // answer "file" with the size, then data chunks
	opList   = "list"   // answer "list"
	opRemove = "remove" // answer "ok"
)

type agentReq struct {
	Op     string `json:"op"`
	Path   string `json:"path,omitempty"`
	Max    int64  `json:"max,omitempty"` // put: the data's exact size; get: the largest file to send
	Signal int    `json:"signal,omitempty"`
}

// agentMsg is init's answer to an agentReq, or the news that the interpreter ended.
type agentMsg struct {
	Kind  string         `json:"kind"` // "started" | "ok" | "file" | "list" | "fail" | "exited"
	Code  string         `json:"code,omitempty"`
	Error string         `json:"error,omitempty"`
	Size  int64          `json:"size,omitempty"`
	Files []box.FileInfo `json:"files,omitempty"`
	// list: the listing was cut (box.ErrListTruncated).
	Truncated bool `json:"truncated,omitempty"`
	// exited: how the interpreter ended.
	ExitCode int `json:"exit_code,omitempty"`
	Signal   int `json:"signal,omitempty"`
}

// Failure codes of agentMsg.Code; the parent maps them to box errors.
const (
	failNotFound   = "not_found"
	failBadPath    = "bad_path"
	failNotRegular = "not_regular"
	failTooLarge   = "too_large"
	failNoSpace    = "no_space"
	failConflict   = "conflict"
	failOther      = "failed"
)

// writeChunk writes p (at most maxChunk bytes) as one data chunk.
func writeChunk(w io.Writer, p []byte) error {
	buf := make([]byte, 4+len(p))
	binary.BigEndian.PutUint32(buf, uint32(len(p))|chunkBit)
	copy(buf[4:], p)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write chunk: %w", err)
	}
	return nil
}

// readAny reads one frame: a data chunk (returned as data, isChunk true) or a JSON
// frame of at most max bytes decoded into v.
func readAny(r io.Reader, max int, v any) (data []byte, isChunk bool, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, false, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n&chunkBit != 0 {
		n &^= chunkBit
		if n > maxChunk {
			return nil, true, fmt.Errorf("data chunk of %d bytes exceeds the limit of %d", n, maxChunk)
		}
		data = make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, true, fmt.Errorf("read data chunk: %w", err)
		}
		return data, true, nil
	}
	if int64(n) > int64(max) {
		return nil, false, fmt.Errorf("frame of %d bytes exceeds the limit of %d", n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, false, fmt.Errorf("read frame body: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return nil, false, fmt.Errorf("decode frame: %w", err)
	}
	return nil, false, nil
}

func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

func readFrame(r io.Reader, max int, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if int64(n) > int64(max) {
		return fmt.Errorf("frame of %d bytes exceeds the limit of %d", n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("read frame body: %w", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return nil
}

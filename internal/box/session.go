package box

import (
	"context"
	"errors"
	"io"
	"time"
)

// SessionBackend is a Backend that can also keep one box alive across calls, with a
// persistent interpreter inside it.
type SessionBackend interface {
	Backend
	// StartSession starts a box and its interpreter and returns when the interpreter is
	// ready for the first call. The caller must Close the session.
	StartSession(ctx context.Context, spec *SessionSpec) (Session, error)
}

// SessionSpec describes a session's box. Unlike Spec it carries no code: calls do.
type SessionSpec struct {
	// Language selects the interpreter; see Languages.
	Language string
	// Env holds extra KEY=VALUE pairs for the interpreter, on top of SafeEnv.
	Env []string
	// Limits bound the whole box; Limits.Timeout is the default per-call timeout.
	Limits Limits
	// Network is the network mode: NetworkNone (also when empty) or NetworkEgress.
	Network string
	// Egress serves the box's proxy and DNS sockets when Network is NetworkEgress,
	// for the whole life of the session.
	Egress Egress
	// Interpreter, when set, replaces the language's session interpreter: for Python,
	// the policy runner in session mode (SessionProtocol).
	Interpreter []string
	// Support files are placed read-only under /.moat.
	Support []SupportFile
	// Zygote, when set, is the argv of a zygote for Interpreter: the same
	// interpreter, preloaded, which a backend that can (native, as root) forks into
	// each fresh box instead of starting the interpreter there. Boxes made either way
	// behave the same. The engine's warm pool sets it.
	Zygote []string
}

// A ZygoteBackend is a SessionBackend that can fork boxes from a zygote
// (SessionSpec.Zygote).
type ZygoteBackend interface {
	SessionBackend
	// ZygoteReady says whether spec's zygote runs, so that a box of spec starts in
	// milliseconds.
	ZygoteReady(spec *SessionSpec) bool
}

// Call is one execution in a session.
type Call struct {
	Code []byte
	// Timeout bounds the call; zero means the session's Limits.Timeout. When it
	// passes, the interpreter is interrupted (KeyboardInterrupt for Python, SIGINT for
	// the shell); if it has not stopped within InterruptGrace the box is destroyed and
	// the session is lost.
	Timeout time.Duration
	// Stdout and Stderr, when set, receive the call's output live (after the filter).
	Stdout, Stderr io.Writer
	// Filter wraps each output stream, as Spec.Filter.
	Filter func(next io.Writer) io.WriteCloser
	// OneShot says the call is the box's only one (a one-shot execution in a box
	// made ahead of time): at the timeout the box is killed at once, as a one-shot
	// box is, and the result carries no notes about the session living on.
	OneShot bool
}

// InterruptGrace is how long an interrupted call has to stop before its box is killed.
const InterruptGrace = 3 * time.Second

// Session is a live box with a persistent interpreter. Its methods are safe for
// concurrent use, but calls (and file operations) are served one at a time.
type Session interface {
	// Exec runs one call. The Result's Report holds what the interpreter reported
	// for this call (the runner's JSON lines), for the engine to parse. A non-nil
	// error means the call could not be run; ErrSessionLost (wrapped) when the box is
	// gone.
	Exec(ctx context.Context, call *Call) (*Result, error)
	// PutFile writes size bytes from r to path in the workspace (created or
	// replaced, parent directories created), owned by the box's user.
	PutFile(ctx context.Context, path string, r io.Reader, size int64) error
	// GetFile copies the regular file at path to w, refusing files over max bytes
	// (ErrFileTooLarge), and returns its size.
	GetFile(ctx context.Context, path string, w io.Writer, max int64) (int64, error)
	// ListFiles lists the workspace below dir ("" or "." for all of it), recursively,
	// at most MaxListEntries entries and MaxListBytes of paths. A listing cut there is
	// returned with ErrListTruncated.
	ListFiles(ctx context.Context, dir string) ([]FileInfo, error)
	// RemoveFile removes a file or an empty directory.
	RemoveFile(ctx context.Context, path string) error
	// Done is closed once the box is gone, whether by Close or not.
	Done() <-chan struct{}
	// Err says why the box is gone (nil while it lives, ErrSessionClosed after Close).
	Err() error
	// Isolation lists the protections in force, as Result.Isolation.
	Isolation() []string
	// Warnings lists weakened protections, as Result.Warnings.
	Warnings() []string
	// Close destroys the box; it is safe to call more than once.
	Close() error
}

// FileInfo is one entry of a workspace listing.
type FileInfo struct {
	// Path is relative to the workspace, with forward slashes.
	Path    string    `json:"path"`
	Size    int64     `json:"size"`
	Dir     bool      `json:"dir,omitempty"`
	Mode    string    `json:"mode"` // e.g. "-rw-r--r--"
	ModTime time.Time `json:"mod_time"`
}

// MaxListEntries and MaxListBytes bound a workspace listing: its entries, and the
// bytes of its paths (each counted as JSON escapes it, plus 128 for its other
// fields), which keep it within one frame of the native box's agent.
const (
	MaxListEntries = 10000
	MaxListBytes   = 3 << 20
)

// Session errors. Backends wrap them with detail; test them with errors.Is.
var (
	// ErrSessionLost: the box is gone (killed after a stuck interrupt, out of memory
	// in its init, or destroyed by a restart) and its state with it.
	ErrSessionLost = errors.New("session lost")
	// ErrSessionClosed: the session was closed.
	ErrSessionClosed = errors.New("session closed")
	// ErrFileNotFound: no such file in the workspace.
	ErrFileNotFound = errors.New("file not found")
	// ErrFileTooLarge: the file is over the size asked for or allowed.
	ErrFileTooLarge = errors.New("file too large")
	// ErrBadPath: the path is not a clean relative path inside the workspace, or it
	// resolves outside it (through a symlink, for example).
	ErrBadPath = errors.New("bad path")
	// ErrNotRegular: the path is a directory, device, socket or other non-file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrFileConflict: the operation clashes with what is there (a directory where a
	// file is to be written, a directory that is not empty).
	ErrFileConflict = errors.New("file conflict")
	// ErrWorkspaceFull: the workspace has no room left (its disk limit).
	ErrWorkspaceFull = errors.New("workspace full")
	// ErrListTruncated comes with a listing cut at MaxListEntries or MaxListBytes:
	// the entries are the first ones of the whole listing; list a directory below
	// for the rest.
	ErrListTruncated = errors.New("listing truncated: list a directory below for the rest")
)

// ListCost is what an entry of path counts against MaxListBytes: its bytes as JSON
// may escape them (6 for a control character, a quote, a backslash or <, >, &;
// invalid UTF-8 becomes the 3 bytes of U+FFFD), plus 128 for its other fields.
func ListCost(path string) int {
	n := 128
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			n += 6
		case c >= 0x80:
			n += 3
		default:
			n++
		}
	}
	return n
}

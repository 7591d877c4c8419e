package box

import (
	"context"
	"io"
	"os"
	"time"
)

// Backend makes boxes. Run must destroy the box before it returns, whatever happened.
type Backend interface {
	// Name is the backend's config name, e.g. "native".
	Name() string
	// Run executes spec in a fresh box. A non-nil error means moat's own machinery
	// failed; everything the code did is described by the Result.
	Run(ctx context.Context, spec *Spec) (*Result, error)
}

// Spec is one execution: the code, its inputs and its limits.
type Spec struct {
	// Language selects the interpreter; see Languages.
	Language string
	// Code is the program text; CheckCode has validated it.
	Code []byte
	// Env holds extra KEY=VALUE pairs for the code, on top of SafeEnv.
	Env []string
	// Files are copied into the workspace before the code starts.
	Files []File
	// Limits bound what the box may use; zero fields take DefaultLimits.
	Limits Limits
	// Network is the network mode: NetworkNone (also when empty) or NetworkEgress.
	Network string
	// Egress serves the box's proxy and DNS sockets when Network is NetworkEgress.
	Egress Egress
	// Stdout and Stderr, when set, receive the code's output live (after the filter,
	// up to the output cap).
	Stdout, Stderr io.Writer

	// Interpreter, when set, replaces the language's Argv (the code path is still
	// appended), e.g. to start the Python policy runner.
	Interpreter []string
	// Support files are placed read-only under /.moat before the code starts (the
	// policy runner and its policy, for example). Paths are absolute, under /.moat.
	Support []SupportFile
	// Filter, when set, wraps each output stream: the backend writes the code's raw
	// bytes to the returned writer, which writes the filtered bytes to next. The
	// backend closes it when the stream ends. Flood detection counts raw bytes.
	Filter func(next io.Writer) io.WriteCloser
	// Report asks for a report channel: fd 3 of the code is a pipe whose content (at
	// most MaxReportBytes) comes back in Result.Report.
	Report bool
}

// SupportFile is a file the engine places in the box for its own use.
type SupportFile struct {
	Path string // absolute, under /.moat
	Data []byte
}

// MaxReportBytes bounds what the report channel keeps; the rest is read and dropped.
const MaxReportBytes = 8 << 20

// File is a host file the caller has opened to be copied into the workspace.
type File struct {
	// Dest is a clean, relative path inside the workspace.
	Dest string
	// Src is read by the box's init, never reopened by path. Run does not close it.
	Src *os.File
}

// Limits bound one box.
type Limits struct {
	Timeout   time.Duration // wall clock, from the box's start
	Memory    int64         // bytes, RAM (swap is limited to the same)
	CPUs      float64       // CPU bandwidth in cores
	Pids      int64         // processes and threads
	Disk      int64         // bytes of writable workspace
	Tmp       int64         // bytes of /tmp
	Output    int64         // bytes kept per stream (stdout, stderr)
	OpenFiles int64         // file descriptors per process
}

// DefaultLimits are the limits of issue #2 and the README.
var DefaultLimits = Limits{
	Timeout:   30 * time.Second,
	Memory:    256 << 20,
	CPUs:      1,
	Pids:      64,
	Disk:      100 << 20,
	Tmp:       64 << 20,
	Output:    1 << 20,
	OpenFiles: 1024,
}

// WithDefaults returns l with every zero field taken from DefaultLimits.
func (l Limits) WithDefaults() Limits { return DefaultLimits.Merge(l) }

// Merge returns l with every field that is set (non-zero) in over replacing it.
func (l Limits) Merge(over Limits) Limits {
	set := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	if over.Timeout != 0 {
		l.Timeout = over.Timeout
	}
	if over.CPUs != 0 {
		l.CPUs = over.CPUs
	}
	set(&l.Memory, over.Memory)
	set(&l.Pids, over.Pids)
	set(&l.Disk, over.Disk)
	set(&l.Tmp, over.Tmp)
	set(&l.Output, over.Output)
	set(&l.OpenFiles, over.OpenFiles)
	return l
}

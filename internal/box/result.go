package box

import "time"

// Status is the outcome of an execution. The values are part of the JSON contract.
type Status string

const (
	StatusOK            Status = "ok"             // exited 0
	StatusError         Status = "error"          // exited non-zero
	StatusTimeout       Status = "timeout"        // killed at the wall-clock limit
	StatusMemoryLimit   Status = "memory_limit"   // killed by the OOM killer of the box's cgroup
	StatusOutputLimit   Status = "output_limit"   // killed for flooding far past the output cap
	StatusBlocked       Status = "blocked"        // refused by policy before running
	StatusKilled        Status = "killed"         // ended by a signal
	StatusInternalError Status = "internal_error" // moat itself failed
)

// Result is the one result shape of every front end (CLI --json, HTTP, MCP). Field
// names and meanings are a contract: add fields, never rename or remove them.
type Result struct {
	Status     Status      `json:"status"`
	ExitCode   int         `json:"exit_code"`
	Stdout     string      `json:"stdout"`
	Stderr     string      `json:"stderr"`
	Result     *string     `json:"result"`
	Display    []Display   `json:"display"`
	Violations []Violation `json:"violations"`
	Redactions int         `json:"redactions"`
	Truncated  bool        `json:"truncated"`
	DurationMS int64       `json:"duration_ms"`
	Usage      Usage       `json:"usage"`
	// Isolation names every protection that was in force, e.g. "seccomp".
	Isolation []string `json:"isolation"`
	// Warnings says, in plain words, which protections were weaker than configured.
	Warnings []string `json:"warnings"`
	// Error explains an internal_error; empty otherwise.
	Error string `json:"error,omitempty"`
	// Files are the workspace files a one-shot execution asked to get back
	// (output_files), present only when asked for.
	Files []FileData `json:"files,omitempty"`
	// Egress is what the box did through moat's egress proxy, present only when it
	// had a network.
	Egress *EgressUsage `json:"egress,omitempty"`

	// Report is what the code wrote to its report channel (Spec.Report): untrusted
	// input for the engine to parse. Not part of the JSON contract.
	Report []byte `json:"-"`
	// Timing splits the box's wall time into its stages, for metrics. Not part of
	// the JSON contract.
	Timing Timing `json:"-"`
	// RedactionsByRule splits Redactions by the rule that matched ("secret" for
	// exact secret values), for metrics. Not part of the JSON contract.
	RedactionsByRule map[string]int `json:"-"`
}

// EgressUsage is a box's traffic through the egress proxy.
type EgressUsage struct {
	// Connections counts the connections and plain HTTP requests let through.
	Connections int `json:"connections"`
	// Refused counts the destinations refused (connections, requests, lookups).
	Refused  int   `json:"refused"`
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	// Refusals lists the first refusals, with why.
	Refusals []EgressRefusal `json:"refusals,omitempty"`
}

// EgressRefusal is one destination the egress proxy refused.
type EgressRefusal struct {
	Dest   string `json:"dest"`   // host:port
	Via    string `json:"via"`    // http, connect or dns
	Reason string `json:"reason"` // e.g. "not in the allowlist"
}

// Timing is where a box's time went.
type Timing struct {
	// Start is from asking for a box to the code's start (zero for a box made
	// ahead of time and taken ready).
	Start time.Duration
	// Run is the code's own run.
	Run time.Duration
	// Teardown is from the code's end to the result being ready: the box killed
	// and its output drained (zero when it is destroyed in the background).
	Teardown time.Duration
}

// Display is one rich output (a figure as PNG, for example).
type Display struct {
	MIMEType string `json:"mime_type"`
	Data     string `json:"data"` // base64
}

// FileData is a workspace file returned with a result.
type FileData struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Data is the content, base64 encoded; empty with Error set when the file could
	// not be returned (missing, not a regular file, over the size cap).
	Data  string `json:"data"`
	Error string `json:"error,omitempty"`
}

// Violation is one policy rule that refused the code.
type Violation struct {
	// Rule names the rule, e.g. "python.import" or "shell.command".
	Rule string `json:"rule"`
	// Detail is one sentence an LLM can act on: what was blocked, by which profile.
	Detail string `json:"detail"`
	// Line is the 1-based line of the code that triggered it, 0 if unknown.
	Line int `json:"line,omitempty"`
}

// Usage is what the box consumed.
type Usage struct {
	CPUMS           int64 `json:"cpu_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
}

// Normalize replaces nil slices with empty ones so the JSON shape never varies.
func (r *Result) Normalize() {
	if r.Display == nil {
		r.Display = []Display{}
	}
	if r.Violations == nil {
		r.Violations = []Violation{}
	}
	if r.Isolation == nil {
		r.Isolation = []string{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
}

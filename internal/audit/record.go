package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Kinds of records. They are part of the schema: add kinds, never rename them.
const (
	// KindExecute is a one-shot execution (moat run, POST /v1/execute, MCP).
	KindExecute = "execute"
	// KindSessionExecute is one call in a session.
	KindSessionExecute = "session_execute"
	// KindSessionCreate is a session started (or a start refused).
	KindSessionCreate = "session_create"
	// KindSessionDestroy is a session destroyed by its owner or by a server shutdown
	// (or a destroy refused).
	KindSessionDestroy = "session_destroy"
	// KindSessionExpire is a session ended by its idle TTL or maximum lifetime.
	KindSessionExpire = "session_expire"
	// KindSessionLost is a session whose box died, or that a restart found gone.
	KindSessionLost = "session_lost"
	// KindAuthFailure is a request refused by the gate: no or a wrong token (401),
	// or a principal asking for what it may not have (403).
	KindAuthFailure = "auth_failure"
	// KindPrune is written by the store itself when retention removed old records;
	// KeptFrom is the first record kept.
	KindPrune = "audit_prune"
	// KindEgress is one decision of the egress proxy: a connection, HTTP request or
	// DNS lookup of a box, allowed (Status ok, with its bytes) or refused (Status
	// refused, with the Reason). RequestID and Session tie it to its execution.
	KindEgress = "egress"
)

// Kinds lists every kind, for filters and documentation.
var Kinds = []string{KindExecute, KindSessionExecute, KindSessionCreate, KindSessionDestroy,
	KindSessionExpire, KindSessionLost, KindAuthFailure, KindPrune, KindEgress}

// Statuses of records that are not a box's outcome (those are box.Status values:
// ok, error, timeout, memory_limit, output_limit, blocked, killed, internal_error).
const (
	// StatusRejected: the request was refused before anything ran (bad request,
	// no such session, session busy or lost, too many sessions); Reason says why.
	StatusRejected = "rejected"
	// StatusInternalError: moat itself failed; Reason has the sanitized error.
	StatusInternalError = "internal_error"
	// StatusOK: a lifecycle operation (session create or destroy) succeeded, or the
	// egress proxy let a connection through.
	StatusOK = "ok"
	// StatusRefused: the egress proxy refused a destination; Reason says why.
	StatusRefused = "refused"
)

// Front ends, the values of Record.FrontEnd.
const (
	FrontEndCLI = "cli"
	FrontEndAPI = "api"
	FrontEndMCP = "mcp"
	// FrontEndServer marks records the server makes on its own (session expiry,
	// lost boxes, retention).
	FrontEndServer = "server"
)

// Record is one audit record. Its JSON encoding, in this field order, is the
// canonical form that is hashed (see Body): fields are added at the end, never
// renamed, reordered or removed. Empty fields are omitted.
type Record struct {
	// Seq is the record's position in the chain, from 1; set by the store.
	Seq int64 `json:"seq"`
	// Time is when the event ended (an execution's end), UTC.
	Time time.Time `json:"time"`
	// Kind is one of the Kind* constants.
	Kind string `json:"kind"`
	// RequestID ties the record to the API response (X-Request-Id) and the log line.
	RequestID string `json:"request_id,omitempty"`
	// Principal is who asked: an API key's principal, or "local:<user>" for the CLI.
	// Empty for an unauthenticated request.
	Principal string `json:"principal,omitempty"`
	// FrontEnd is cli, api, mcp or server.
	FrontEnd string `json:"front_end,omitempty"`
	// Remote is the client's address, for API requests.
	Remote string `json:"remote,omitempty"`
	// Session is the session's id, for session records.
	Session  string `json:"session,omitempty"`
	Language string `json:"language,omitempty"`
	Backend  string `json:"backend,omitempty"`
	Profile  string `json:"profile,omitempty"`
	// CodeSHA256 is the hex SHA-256 of the whole code as it was submitted (before
	// redaction and capping), and CodeBytes its length.
	CodeSHA256 string `json:"code_sha256,omitempty"`
	CodeBytes  int    `json:"code_bytes,omitempty"`
	// Code is the code with secrets redacted by the output filter, cut to the
	// configured cap (audit.code_max; CodeTruncated then). Empty when the config
	// keeps no code.
	Code          string `json:"code,omitempty"`
	CodeTruncated bool   `json:"code_truncated,omitempty"`
	// CodeRedactions counts the secrets redacted from Code.
	CodeRedactions int `json:"code_redactions,omitempty"`
	// Status is the execution's status (box.Status values) or one of the Status*
	// constants above; empty for events that have no outcome (expiry, loss).
	Status string `json:"status,omitempty"`
	// ExitCode is the code's exit code, for executions that ran or were blocked.
	ExitCode   *int        `json:"exit_code,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	// Redactions counts the secrets redacted from the execution's output.
	Redactions      int   `json:"redactions,omitempty"`
	DurationMS      int64 `json:"duration_ms,omitempty"`
	CPUMS           int64 `json:"cpu_ms,omitempty"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty"`
	// OutputBytes is the size of the stdout and stderr returned (after the filter
	// and the output cap).
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// Isolation lists the protections in force in the box.
	Isolation []string `json:"isolation,omitempty"`
	// Reason explains a rejection, an internal error, a session's end or an auth
	// failure ("unauthenticated: ..."). Never a token or a secret.
	Reason string `json:"reason,omitempty"`
	// KeptFrom is, in a KindPrune record, the first sequence number retention kept.
	KeptFrom int64 `json:"kept_from,omitempty"`
	// PrevHash is the Hash of the record before this one (or of the last pruned
	// record, or 64 zeros for the first record ever); set by the store.
	PrevHash string `json:"prev_hash"`
	// Dest is, in a KindEgress record, the destination the box asked for
	// ("host:port"), and Via what it asked through: http, connect or dns.
	Dest string `json:"dest,omitempty"`
	Via  string `json:"via,omitempty"`
	// BytesOut and BytesIn are, in a KindEgress record, what crossed the proxy.
	BytesOut int64 `json:"bytes_out,omitempty"`
	BytesIn  int64 `json:"bytes_in,omitempty"`

	// Hash is the hex SHA-256 of Body(); set by the store. It is not part of the
	// body it hashes.
	Hash string `json:"-"`

	// raw is the submitted code (SetCode), until the writer redacts and caps it.
	raw []byte
}

// Violation is one policy rule that refused the code.
type Violation struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
	Line   int    `json:"line,omitempty"`
}

// GenesisHash is the PrevHash of the first record of a chain.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// Body returns the record's canonical encoding: the JSON object of its fields in
// the order of the Record type, without Hash, with empty fields omitted, Time in
// UTC as RFC 3339 with nanoseconds, and no HTML escaping. The store keeps these
// exact bytes, and Hash is hex(SHA-256(Body)); since the body holds Seq and
// PrevHash, each record's hash covers its place in the chain and its predecessor.
func (r *Record) Body() ([]byte, error) {
	return encodePlain(r)
}

// plain is Record without its JSON methods.
type plain Record

func encodePlain(r *Record) ([]byte, error) {
	p := plain(*r)
	p.Time = p.Time.UTC()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&p); err != nil {
		return nil, fmt.Errorf("encode audit record: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// HashBody returns hex(SHA-256(body)).
func HashBody(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Line returns the record as one JSON line for the JSON-lines sink and `moat audit
// --json`: the body with "hash" added as its last field. To check a line, remove
// `,"hash":"<hex>"` before the closing brace: what remains is the body.
func Line(body []byte, hash string) []byte {
	out := make([]byte, 0, len(body)+80)
	out = append(out, body[:len(body)-1]...)
	out = append(out, `,"hash":"`...)
	out = append(out, hash...)
	out = append(out, "\"}\n"...)
	return out
}

// MarshalJSON encodes the record as Line does (with its hash), for API responses.
func (r Record) MarshalJSON() ([]byte, error) {
	body, err := encodePlain(&r)
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(Line(body, r.Hash), []byte("\n")), nil
}

// UnmarshalJSON decodes what MarshalJSON encodes, Hash included.
func (r *Record) UnmarshalJSON(b []byte) error {
	var v struct {
		plain
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Record(v.plain)
	r.Hash = v.Hash
	return nil
}

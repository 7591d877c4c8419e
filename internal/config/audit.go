package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Audit failure modes (Audit.Failure).
const (
	// AuditFailClosed refuses new executions while the audit store fails.
	AuditFailClosed = "fail_closed"
	// AuditFailOpen keeps executions running while the audit store fails; records
	// that do not fit the buffer are lost, counted and logged.
	AuditFailOpen = "fail_open"
)

// Audit defaults.
const (
	DefaultAuditBuffer  = 4096
	DefaultAuditCodeMax = 64 << 10
	// AuditSinkStdout names standard output as the JSON-lines sink.
	AuditSinkStdout = "stdout"
	// MaxAuditBuffer bounds audit.buffer.
	MaxAuditBuffer = 1 << 20
)

// Audit configures the audit trail: a hash-chained record of every execution,
// session event and auth failure, by moat run and moat serve alike, in an SQLite
// file in the data directory (see package audit). The zero value records
// everything, keeps 64 KiB of each execution's (redacted) code, and refuses
// executions while the store fails.
type Audit struct {
	// Disable turns the audit trail off: nothing is recorded. A warning.
	Disable bool `yaml:"disable"`
	// Dir is the directory of the store's file, audit.db; an absolute path. Empty
	// means the data directory (server.data_dir, or its default).
	Dir string `yaml:"dir"`
	// Failure says what happens when the store fails (a full disk, a lock held too
	// long): fail_closed (the default) refuses new executions with a clear error
	// until it works again; fail_open (a warning) keeps serving, and records that no
	// longer fit the buffer are lost, counted in moat_audit_records_lost_total and
	// logged.
	Failure string `yaml:"failure"`
	// Buffer is how many records may wait for the store (and be reserved by
	// running executions); DefaultAuditBuffer when 0.
	Buffer int `yaml:"buffer"`
	// CodeMax is how much of each execution's code a record keeps, a size, after
	// secrets are redacted; "none" keeps only its SHA-256 and length. Default 64KiB.
	CodeMax string `yaml:"code_max"`
	// Sink also writes each record, once stored, as one JSON line: "stdout" or an
	// absolute file path (appended to, created 0600). For shipping to a SIEM.
	Sink string `yaml:"sink"`
	// Retention bounds what the store keeps; unset keeps everything.
	Retention AuditRetention `yaml:"retention"`
}

// AuditRetention bounds the audit store. Pruning keeps the chain verifiable.
type AuditRetention struct {
	// MaxAge removes records older than this: a duration, with "d" for days
	// allowed ("90d", "720h").
	MaxAge string `yaml:"max_age"`
	// MaxRecords keeps at most this many records, removing the oldest.
	MaxRecords int64 `yaml:"max_records"`
}

// ResolvedAudit is Audit parsed, with its defaults applied.
type ResolvedAudit struct {
	Disable bool
	// Path is the store's file: Dir/audit.db.
	Path     string
	FailOpen bool
	Buffer   int
	// CodeMax is in bytes; negative keeps no code.
	CodeMax    int
	Sink       string
	MaxAge     time.Duration
	MaxRecords int64
}

// ResolveAudit returns the audit settings ready for use. The store lives in
// audit.dir, else dataDir, else server.data_dir, else DefaultDataDir(); it is an
// error to have none of them (unless the audit is disabled).
func (c *Config) ResolveAudit(dataDir string) (ResolvedAudit, error) {
	ps := &problems{file: c.file, lines: c.lines}
	r := c.checkAudit(ps, func(p string) bool { return c.set[p] })
	if err := ps.err(); err != nil {
		return ResolvedAudit{}, err
	}
	if r.Disable {
		return r, nil
	}
	dir := c.Audit.Dir
	for _, d := range []string{dataDir, c.Server.DataDir, DefaultDataDir()} {
		if dir == "" {
			dir = d
		}
	}
	if dir == "" {
		ps.add("audit.dir", "no directory for the audit store: no home directory (set audit.dir, server.data_dir or XDG_DATA_HOME)")
		return ResolvedAudit{}, ps.err()
	}
	r.Path = filepath.Join(dir, "audit.db")
	return r, nil
}

// checkAudit checks c.Audit and returns it resolved, without Path.
func (c *Config) checkAudit(ps *problems, present func(string) bool) ResolvedAudit {
	a := c.Audit
	r := ResolvedAudit{Disable: a.Disable, Buffer: DefaultAuditBuffer, CodeMax: DefaultAuditCodeMax, Sink: a.Sink}
	given := func(p string, zero bool) bool { return !zero || present(p) }
	if given("audit.dir", a.Dir == "") && !filepath.IsAbs(a.Dir) {
		ps.add("audit.dir", "%q is not an absolute path", a.Dir)
	}
	switch a.Failure {
	case "", AuditFailClosed:
	case AuditFailOpen:
		r.FailOpen = true
	default:
		ps.add("audit.failure", "unknown failure mode %q (want fail_closed or fail_open)", a.Failure)
	}
	if given("audit.buffer", a.Buffer == 0) {
		if a.Buffer < 1 || a.Buffer > MaxAuditBuffer {
			ps.add("audit.buffer", "invalid value %d (want a whole number from 1 to %d)", a.Buffer, MaxAuditBuffer)
		}
		r.Buffer = a.Buffer
	}
	if given("audit.code_max", a.CodeMax == "") {
		if strings.TrimSpace(a.CodeMax) == "none" {
			r.CodeMax = -1
		} else if n, err := ParseSize(a.CodeMax); err != nil {
			ps.add("audit.code_max", "%v (or none, to keep only the code's hash)", err)
		} else if n > 1<<30 {
			ps.add("audit.code_max", "%s is over 1GiB", a.CodeMax)
		} else {
			r.CodeMax = int(n)
		}
	}
	if given("audit.sink", a.Sink == "") && a.Sink != AuditSinkStdout && !filepath.IsAbs(a.Sink) {
		ps.add("audit.sink", "%q is neither stdout nor an absolute path", a.Sink)
	}
	if given("audit.retention.max_age", a.Retention.MaxAge == "") {
		d, err := parseDays(a.Retention.MaxAge)
		if err != nil {
			ps.add("audit.retention.max_age", "%v", err)
		}
		r.MaxAge = d
	}
	if given("audit.retention.max_records", a.Retention.MaxRecords == 0) {
		if a.Retention.MaxRecords < 1 {
			ps.add("audit.retention.max_records", "invalid value %d (want a positive number)", a.Retention.MaxRecords)
		}
		r.MaxRecords = a.Retention.MaxRecords
	}
	return r
}

// parseDays is ParseDuration that also takes whole days: "90d".
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(strings.TrimSpace(s), "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > 100*365 {
			return 0, fmt.Errorf("invalid duration %q (want e.g. 90d, 720h)", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return ParseDuration(s)
}

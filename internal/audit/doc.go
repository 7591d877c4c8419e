// Package audit is the last stage of moat's pipeline: a typed, append-only,
// hash-chained record of every execution, session event and auth failure, in an
// embedded SQLite file (pure Go, modernc.org/sqlite) in moat's data directory.
// Audit is not a log level: operational logs go to slog, and never hold code.
//
//	l, err := audit.Open(audit.Options{Path: "/var/lib/moat/audit.db", Redact: red.Redact})
//	p, err := l.Reserve()          // before an execution; fail closed: refused when the store fails
//	rec := &audit.Record{Kind: audit.KindExecute, Principal: "alice", ...}
//	rec.SetCode(code)              // hash now; redact and cap in the writer
//	p.Commit(rec)                  // after it: a mutex and an append, never I/O
//	defer l.Close()
//
// # Schema
//
// Record is the schema; its JSON field order is fixed, and fields are only ever
// added at the end. The table records keeps, per record, its seq (the chain
// position, from 1), the canonical body, the hash, and copies of the fields that
// queries filter on (time, kind, principal, session, status, number of
// violations), indexed by time, principal and session. checkpoint holds where the
// chain starts once retention has pruned it. Triggers refuse UPDATE, and DELETE
// outside Prune: that stops accidents, not an attacker who can write the file.
//
// # The hash chain
//
// A record's body is its JSON (Record.Body: fields in declaration order, empty
// ones omitted, time in UTC RFC 3339 with nanoseconds, no HTML escaping, no
// trailing newline) and includes seq and prev_hash; its hash is hex(SHA-256(body)).
// prev_hash is the previous record's hash, or 64 zeros for record 1. So a record
// edited in place no longer matches its hash, a deleted record leaves a gap and a
// prev_hash that names a record that is gone, and records moved or swapped hold
// another seq or follow the wrong hash. Store.Verify (moat audit verify) reads the
// chain oldest first and reports the first such broken link; it also checks the
// indexed copies against the body, so a query cannot be misled by an edited column.
//
// What a hash chain cannot show on its own: someone who can write the file may
// rewrite every record after the one they change, recomputing every hash, or cut
// the newest records off the end. Verify's report ends with the head hash; keep it
// (or ship the JSON-lines sink) somewhere that person cannot write, and compare.
// The table's AUTOINCREMENT counter is a tripwire for a cut end, not a defence.
//
// The JSON-lines sink and moat audit --json write Line: the body with
// ,"hash":"<hex>" added before its closing brace, so anyone can re-check a line by
// removing that field and hashing what remains.
//
// # Retention
//
// Retention (audit.retention: max_age, max_records) removes the oldest records.
// Prune does it in one transaction that also moves the checkpoint to the first
// record kept (its seq and the hash of the record before it) and appends an
// audit_prune record naming that seq, so the kept chain verifies from the
// checkpoint and Verify can tell retention from deletion.
//
// # Writing without blocking, and failures
//
// One writer goroutine appends queued records in batches, each batch one
// immediate transaction (several processes, moat serve and moat run, may share a
// file: SQLite serializes them and each reads the head inside its transaction). An
// execution takes a place in the bounded buffer with Reserve before it starts and
// fills it with Commit at its end; neither does I/O. What happens when the store
// fails (a full disk, a lock held too long) is Options.FailOpen:
//
//   - fail closed (the default): Reserve fails with ErrUnavailable while the store
//     fails or the buffer is full, so new executions are refused with a clear
//     error; executions already running keep their reserved place, and their
//     records are written when the store works again (the writer retries with
//     backoff). Events that cannot be refused (expiry, an auth failure) are queued
//     and, only if the buffer is full, lost.
//   - fail open: executions go on; records queue in the buffer and, once it is
//     full, are lost.
//
// No record is lost silently: each one is counted (Stats.Lost, exported as the
// metric moat_audit_records_lost_total) and logged at error level with its kind,
// principal, session and request id. Close writes what is queued, trying for up
// to 10 s on a failing store.
//
// # Code in records
//
// A record keeps the SHA-256 and length of the code as submitted, and the code
// itself with secrets redacted by the engine's output filter and then cut to
// Options.CodeMax bytes (64 KiB by default; none when negative). Redaction and
// capping happen in the writer, off the execution's path.
package audit

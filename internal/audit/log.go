package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults of Options.
const (
	DefaultBuffer  = 4096
	DefaultCodeMax = 64 << 10
	// batchMax bounds the records written in one transaction.
	batchMax = 512
	// pruneEvery is how often the writer applies the retention.
	pruneEvery = time.Hour
	// retryMin and retryMax bound the wait between attempts on a failing store.
	retryMin = 100 * time.Millisecond
	retryMax = 5 * time.Second
	// writeTimeout bounds one append transaction.
	writeTimeout = 30 * time.Second
	// closeWait bounds how long Close keeps trying to write what is queued.
	closeWait = 10 * time.Second
	// groupWait: under load (a batch written less than busyGap ago), the writer
	// waits this long after a wake-up to commit the records that arrive meanwhile
	// in the same transaction. A transaction costs about 0.2 ms of CPU whatever
	// its size, which the executions would otherwise share one by one. An idle
	// writer commits at once.
	groupWait = 2 * time.Millisecond
	busyGap   = 20 * time.Millisecond
)

// Options configure a Log.
type Options struct {
	// Path is the SQLite file, normally DATA_DIR/audit.db.
	Path string
	// FailOpen keeps executions running when the store fails: records that do not
	// fit the buffer are lost, counted (Stats.Lost) and logged. The default, fail
	// closed, refuses new executions (Reserve fails with ErrUnavailable) until the
	// store works again.
	FailOpen bool
	// Buffer bounds the records queued for the writer and reserved by running
	// executions (DefaultBuffer when 0).
	Buffer int
	// CodeMax is how many bytes of (redacted) code a record keeps: DefaultCodeMax
	// when 0, none when negative. The SHA-256 always covers the whole code.
	CodeMax int
	// Redact removes secrets from the code a record keeps (the engine's output
	// filter). Nil keeps the code as it is.
	Redact func(string) (string, int)
	// Sink, when set, receives each record once it is in the store, as one JSON
	// line (see Line). Its errors are counted (Stats.SinkErrors) and logged.
	Sink io.Writer
	// Retention bounds what the store keeps; the writer prunes at start and hourly.
	Retention Retention
	// Log receives the store's failures and recoveries and every lost record (its
	// kind, principal, session and request id; never code).
	Log *slog.Logger
}

// Stats are the Log's counters, for metrics.
type Stats struct {
	Written    uint64 // records in the store
	Lost       uint64 // records that could not be written (fail_open, or Close on a failed store)
	Queued     int    // records waiting for the writer
	SinkErrors uint64 // failed writes to the sink
	// CodeRedactions counts the secrets redacted from the code kept in records.
	CodeRedactions uint64
	Failing        bool // the last write to the store failed
}

// Log is the audit trail's writer: a bounded queue in front of one writer
// goroutine that appends to the Store in batches. Executions never wait for the
// store: Reserve and Commit only take a mutex. Build it with Open; Close it.
type Log struct {
	opts  Options
	store *Store // nil until opened (a fail_open Log may start without it)
	log   *slog.Logger
	// appendFn appends a batch; tests replace it to make the store fail.
	appendFn func(context.Context, []*Record) error

	mu       sync.Mutex
	queue    []*Record
	reserved int
	failErr  error // the store's last error; nil while it works
	closed   bool
	stats    Stats

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Open opens the store at opts.Path and starts the writer. If the store cannot be
// opened, a fail-closed Open returns the error (moat must not run unaudited); a
// fail-open Log starts anyway, logs the error and keeps trying, and Stats.Failing
// says so.
func Open(opts Options) (*Log, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.CodeMax == 0 {
		opts.CodeMax = DefaultCodeMax
	}
	l := &Log{
		opts: opts, log: opts.Log,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	st, err := OpenStore(opts.Path)
	if err != nil {
		if !opts.FailOpen {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		l.log.Error("audit store unavailable; serving on (audit.failure: fail_open), records queue and are lost when the buffer is full", "err", err)
		l.failErr = err
		l.stats.Failing = true
	} else {
		l.store = st
	}
	go l.run()
	return l, nil
}

// Store returns the Log's store for queries, or nil if it is not open (fail_open
// and the file could not be opened).
func (l *Log) Store() *Store {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.store
}

// Pending is a place in the Log's buffer, taken by Reserve before an execution
// starts. The caller must call Commit exactly once.
type Pending struct {
	l    *Log
	once sync.Once
}

// Reserve takes a place in the buffer for the record of an execution about to
// start. Fail closed, it fails with an error wrapping ErrUnavailable when the store
// is failing or the buffer is full, and the execution must not start; fail open,
// it never fails.
func (l *Log) Reserve() (*Pending, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.opts.FailOpen {
		switch {
		case l.closed:
			return nil, fmt.Errorf("%w: the audit log is closed", ErrUnavailable)
		case l.failErr != nil:
			return nil, fmt.Errorf("%w: the audit store is failing (%v); executions are refused until it works again (audit.failure: fail_closed)", ErrUnavailable, l.failErr)
		case len(l.queue)+l.reserved >= l.opts.Buffer:
			return nil, fmt.Errorf("%w: the audit buffer is full (%d records waiting for the store); executions are refused until it drains (audit.failure: fail_closed)", ErrUnavailable, l.opts.Buffer)
		}
		l.reserved++
		return &Pending{l: l}, nil
	}
	return &Pending{l: l}, nil
}

// Commit queues r in the reserved place. Calls after the first do nothing.
func (p *Pending) Commit(r *Record) {
	p.once.Do(func() {
		l := p.l
		l.mu.Lock()
		if !l.opts.FailOpen {
			l.reserved--
		}
		l.enqueueLocked(r)
		l.mu.Unlock()
	})
}

// Append queues r without a reservation: for events that cannot be refused
// (expiry, a lost box, an auth failure). If the buffer is full, r is lost,
// counted and logged.
func (l *Log) Append(r *Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.enqueueLocked(r)
}

func (l *Log) enqueueLocked(r *Record) {
	if l.closed {
		l.loseLocked(r, "the audit log is closed")
		return
	}
	if len(l.queue)+l.reserved >= l.opts.Buffer {
		l.loseLocked(r, "the audit buffer is full")
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	l.queue = append(l.queue, r)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Log) loseLocked(r *Record, why string) {
	l.stats.Lost++
	l.log.Error("audit record lost", "why", why, "kind", r.Kind, "principal", r.Principal,
		"session", r.Session, "request_id", r.RequestID, "status", r.Status, "lost_total", l.stats.Lost)
}

// SetCode gives r the code it records: the hash and length of all of it, and a
// copy that the writer redacts and caps (Options.CodeMax) off the execution's path.
func (r *Record) SetCode(code []byte) {
	sum := sha256.Sum256(code)
	r.CodeSHA256 = hex.EncodeToString(sum[:])
	r.CodeBytes = len(code)
	r.raw = append([]byte(nil), code...)
}

// prepare turns r's raw code into the recorded Code.
func (l *Log) prepare(r *Record) {
	if r.raw == nil {
		return
	}
	code := string(r.raw)
	r.raw = nil
	if l.opts.CodeMax < 0 {
		return
	}
	if l.opts.Redact != nil {
		code, r.CodeRedactions = l.opts.Redact(code)
	}
	if len(code) > l.opts.CodeMax {
		cut := l.opts.CodeMax
		for cut > 0 && !utf8.RuneStart(code[cut]) {
			cut--
		}
		code, r.CodeTruncated = code[:cut], true
	}
	r.Code = code
}

// Stats returns the Log's counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Queued = len(l.queue)
	return s
}

// Err returns the store's last error, or nil while it works.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failErr
}

// Flush waits until every record queued so far is written (or lost), or ctx ends.
func (l *Log) Flush(ctx context.Context) error {
	for {
		l.mu.Lock()
		n, failing := len(l.queue), l.failErr
		l.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if failing != nil {
				return fmt.Errorf("%w: %d records not written: %v", ErrUnavailable, n, failing)
			}
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// Close stops taking records, writes what is queued (trying for up to 10 s on a
// failing store; what is still queued then is lost, counted and logged), and
// closes the store.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	l.mu.Lock()
	for _, r := range l.queue {
		l.loseLocked(r, "the audit store failed until moat stopped")
	}
	lost := len(l.queue)
	l.queue = nil
	st := l.store
	l.mu.Unlock()
	var err error
	if st != nil {
		err = st.Close()
	}
	if lost > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d audit records lost at close", ErrUnavailable, lost))
	}
	return err
}

// run is the writer goroutine.
func (l *Log) run() {
	defer close(l.done)
	retry := time.Duration(0)
	var lastPrune, lastWrite time.Time
	var stopAt time.Time // set once Close is called
	for {
		if stopAt.IsZero() {
			// While the store fails, new records wait for the next retry.
			var timer <-chan time.Time
			wake := l.wake
			if retry > 0 {
				timer, wake = time.After(retry), nil
			}
			select {
			case <-wake:
				if time.Since(lastWrite) < busyGap {
					time.Sleep(groupWait)
				}
			case <-timer:
			case <-l.stop:
				stopAt = time.Now().Add(closeWait)
			}
		}
		if l.ensureStore() {
			if time.Since(lastPrune) >= pruneEvery {
				lastPrune = time.Now()
				l.prune()
			}
			for l.writeBatch() {
				lastWrite = time.Now()
			}
		}
		l.mu.Lock()
		failing, empty := l.failErr != nil, len(l.queue) == 0
		l.mu.Unlock()
		switch {
		case !stopAt.IsZero() && (empty || time.Now().After(stopAt)):
			return
		case failing:
			retry = min(max(2*retry, retryMin), retryMax)
			if !stopAt.IsZero() {
				time.Sleep(min(retry, time.Until(stopAt)))
			}
		default:
			retry = 0
		}
	}
}

// ensureStore opens the store if a fail-open start could not; it reports whether
// the store is open.
func (l *Log) ensureStore() bool {
	l.mu.Lock()
	st := l.store
	l.mu.Unlock()
	if st != nil {
		return true
	}
	st, err := OpenStore(l.opts.Path)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failErr = err
		l.stats.Failing = true
		return false
	}
	l.store = st
	return true
}

// writeBatch writes up to batchMax queued records; it reports whether it wrote
// any and more may be waiting.
func (l *Log) writeBatch() bool {
	l.mu.Lock()
	n := min(len(l.queue), batchMax)
	batch := append([]*Record(nil), l.queue[:n]...)
	st := l.store
	l.mu.Unlock()
	if n == 0 {
		return false
	}
	for _, r := range batch {
		l.prepare(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var err error
	if l.appendFn != nil {
		err = l.appendFn(ctx, batch)
	} else {
		err = st.Append(ctx, batch)
	}
	l.mu.Lock()
	if err != nil {
		if l.failErr == nil {
			l.log.Error("audit store failing", "err", err, "queued", len(l.queue), "fail_open", l.opts.FailOpen)
		}
		l.failErr = err
		l.stats.Failing = true
		l.mu.Unlock()
		return false
	}
	if l.failErr != nil {
		l.log.Info("audit store works again", "queued", len(l.queue))
	}
	l.failErr = nil
	l.stats.Failing = false
	l.queue = l.queue[n:]
	if len(l.queue) == 0 {
		l.queue = nil // let the backing array go
	}
	l.stats.Written += uint64(n)
	for _, r := range batch {
		l.stats.CodeRedactions += uint64(r.CodeRedactions)
	}
	l.mu.Unlock()
	l.toSink(batch)
	return true
}

// toSink writes a written batch to the JSON-lines sink.
func (l *Log) toSink(batch []*Record) {
	if l.opts.Sink == nil {
		return
	}
	var buf []byte
	for _, r := range batch {
		body, err := r.Body()
		if err != nil {
			continue // Append encoded it already
		}
		buf = append(buf, Line(body, r.Hash)...)
	}
	if _, err := l.opts.Sink.Write(buf); err != nil {
		l.mu.Lock()
		l.stats.SinkErrors++
		first := l.stats.SinkErrors == 1
		l.mu.Unlock()
		if first {
			l.log.Error("audit sink write failed; the records are in the store", "err", err)
		}
	}
}

func (l *Log) prune() {
	if l.opts.Retention == (Retention{}) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	n, err := l.store.Prune(ctx, l.opts.Retention, time.Now())
	if err != nil {
		l.log.Error("audit retention", "err", err)
		return
	}
	if n > 0 {
		l.log.Info("audit retention removed old records", "records", n)
		l.mu.Lock()
		l.stats.Written++ // the prune record
		l.mu.Unlock()
	}
}

package session

import (
	"cmp"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Box is what the store keeps alive: internal/box.Session satisfies it.
type Box interface {
	// Close destroys the box. The store calls it exactly once per committed box.
	Close() error
	// Done is closed when the box is gone, on its own (killed, crashed) or by Close.
	Done() <-chan struct{}
	// Err says why the box is gone.
	Err() error
}

// Defaults for the zero fields of Options.
const (
	DefaultIdleTTL     = 10 * time.Minute
	DefaultMaxLifetime = time.Hour
	DefaultMaxTotal    = 64
	DefaultSweepEvery  = 5 * time.Second
)

// Tombstones: how long and how many lost sessions are remembered.
const (
	tombstoneTTL  = 24 * time.Hour
	maxTombstones = 10000
)

// reasonRestart is the LostError reason of sessions found in Options.Dir by New.
const reasonRestart = "the server restarted; the session's state is gone"

// Options configure a Store. The zero value of each field means its default.
type Options struct {
	// IdleTTL: a session is destroyed after this long without a call or file
	// operation. Default DefaultIdleTTL.
	IdleTTL time.Duration
	// MaxLifetime: a session is destroyed this long after its creation, busy or not
	// (a running call fails). Default DefaultMaxLifetime.
	MaxLifetime time.Duration
	// MaxTotal bounds the live (and reserved) sessions in the store. Default
	// DefaultMaxTotal.
	MaxTotal int
	// Dir, if set, is a directory (created 0700) where the store records the live
	// sessions, so that New can report them lost after a crash. See the package doc.
	Dir string
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
	// SweepEvery is how often Run sweeps. Default DefaultSweepEvery.
	SweepEvery time.Duration
	// Log receives session starts and ends; nil discards them.
	Log *slog.Logger
	// OnEnd, when set, is called once for every session that ends, after its box
	// is closed, without the store's lock, on the goroutine that ended it (a
	// Delete's caller, the sweeper, a box watcher, Close); and, from New, for each
	// session a previous run left (EndRestart). It must not call the store back
	// and should return quickly. The audit trail uses it.
	OnEnd func(End)
}

// End describes a session that ended.
type End struct {
	// Info is the session's last description (for EndRestart: ID, Owner and
	// CreatedAt only).
	Info Info
	// Cause says how it ended; Reason says it in words, as a LostError would
	// (empty for EndDeleted and EndShutdown).
	Cause  EndCause
	Reason string
}

// EndCause is how a session ended.
type EndCause string

// Causes of a session's end.
const (
	EndDeleted  EndCause = "deleted"  // its owner deleted it
	EndShutdown EndCause = "shutdown" // the store was closed
	EndExpired  EndCause = "expired"  // idle TTL or maximum lifetime
	EndLost     EndCause = "lost"     // its box died
	EndRestart  EndCause = "restart"  // found by New: the previous run ended without it
)

// Info describes a session.
type Info struct {
	ID       string
	Owner    string
	Language string
	Profile  string
	// CreatedAt is when Slot.Commit added the session.
	CreatedAt time.Time
	// LastUsed is the end of the last call or file operation (or CreatedAt).
	LastUsed time.Time
	// ExpiresAt is when the session ends if left idle: the earlier of
	// LastUsed+IdleTTL and CreatedAt+MaxLifetime.
	ExpiresAt time.Time
	// Busy: a call or file operation is running (between Acquire and its release).
	Busy bool
	// Calls counts the finished calls (file operations are not calls).
	Calls int
	// IdleTTL and MaxLifetime are the session's own; in Slot.Commit zero means the
	// store's, and larger than the store's is clamped to it.
	IdleTTL     time.Duration
	MaxLifetime time.Duration
}

// Store keeps the live sessions of all owners, ends them when they expire or their box
// dies, and remembers the ended ones as tombstones for a while. Its methods are safe
// for concurrent use.
type Store[B Box] struct {
	opts Options // defaults filled in
	now  func() time.Time
	log  *slog.Logger

	mu sync.Mutex
	// live maps ids to committed sessions.
	live map[string]*entry[B]
	// held counts live sessions plus reserved slots; perOwner the same by owner.
	held     int
	perOwner map[string]int
	// tombs maps ids to elements of tombOrder (*tombstone values, oldest first).
	tombs     map[string]*list.Element
	tombOrder *list.List
	seq       uint64
	closed    bool
	// done is closed by Close; it stops Run.
	done chan struct{}

	// watchers counts the goroutines waiting on a box's Done.
	watchers sync.WaitGroup
}

// entry is a live session. Its fields are guarded by the store's mu, except box and
// gone, which never change.
type entry[B Box] struct {
	info Info // Busy and ExpiresAt are filled in by snapshot
	busy bool
	seq  uint64 // creation order, for List
	box  B
	// gone is closed when the store lets go of the session; it ends the watcher.
	gone chan struct{}
}

type tombstone struct {
	id, owner, reason string
	at                time.Time
}

// ended is a session the store has let go of: its box is closed and its record
// removed by finish, outside the lock.
type ended[B Box] struct {
	id, owner string
	box       B
	reason    string // empty for Delete and Close
	info      Info
	cause     EndCause
	// keepRecord leaves the record in Options.Dir (Close: the next start reports the
	// session lost).
	keepRecord bool
}

// New returns a store. If opts.Dir holds records left by a previous run (closed, or
// crashed, or killed with -9), each becomes a tombstone with the reason "the
// server restarted; the session's state is gone" and the record is removed.
// Malformed records are logged and removed. Run must be started for expiry to happen
// on time; Close must be called.
func New[B Box](opts Options) (*Store[B], error) {
	if opts.IdleTTL < 0 || opts.MaxLifetime < 0 || opts.MaxTotal < 0 || opts.SweepEvery < 0 {
		return nil, errors.New("session store: negative idle TTL, lifetime, total or sweep interval")
	}
	if opts.IdleTTL == 0 {
		opts.IdleTTL = DefaultIdleTTL
	}
	if opts.MaxLifetime == 0 {
		opts.MaxLifetime = DefaultMaxLifetime
	}
	if opts.MaxTotal == 0 {
		opts.MaxTotal = DefaultMaxTotal
	}
	if opts.SweepEvery == 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	s := &Store[B]{
		opts:      opts,
		now:       opts.Now,
		log:       opts.Log,
		live:      make(map[string]*entry[B]),
		perOwner:  make(map[string]int),
		tombs:     make(map[string]*list.Element),
		tombOrder: list.New(),
		done:      make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opts.Dir != "" {
		if err := prepareDir(opts.Dir, s.log); err != nil {
			return nil, fmt.Errorf("session dir %s: %w", opts.Dir, err)
		}
		recs, err := loadRecords(opts.Dir, s.log)
		if err != nil {
			return nil, fmt.Errorf("session dir %s: %w", opts.Dir, err)
		}
		slices.SortFunc(recs, func(a, b record) int { return a.CreatedAt.Compare(b.CreatedAt) })
		now := s.now()
		for _, r := range recs {
			s.addTombLocked(r.ID, r.Owner, reasonRestart, now)
			s.log.Info("session lost in a restart", "session_id", r.ID, "owner", r.Owner, "created_at", r.CreatedAt)
			if opts.OnEnd != nil {
				opts.OnEnd(End{Info: Info{ID: r.ID, Owner: r.Owner, CreatedAt: r.CreatedAt}, Cause: EndRestart, Reason: reasonRestart})
			}
		}
	}
	return s, nil
}

// Slot is a place for one session, taken by Reserve. The caller must call Commit or
// Cancel exactly once.
type Slot[B Box] struct {
	s     *Store[B]
	owner string
	used  bool // guarded by s.mu
}

// Reserve takes a slot for a new session of owner, so the slow start of its box
// happens outside the store's lock without overshooting the limits. It fails with a
// *LimitError when the store holds MaxTotal sessions (live or reserved) or the owner
// holds maxPerOwner; maxPerOwner < 1 allows the owner none. The caller starts the box
// and then calls Slot.Commit, or Slot.Cancel if the start failed.
func (s *Store[B]) Reserve(owner string, maxPerOwner int) (*Slot[B], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.held >= s.opts.MaxTotal {
		return nil, &LimitError{Scope: ScopeTotal, Limit: s.opts.MaxTotal}
	}
	if maxPerOwner < 0 {
		maxPerOwner = 0
	}
	if s.perOwner[owner] >= maxPerOwner {
		return nil, &LimitError{Scope: ScopeOwner, Limit: maxPerOwner}
	}
	s.held++
	s.perOwner[owner]++
	return &Slot[B]{s: s, owner: owner}, nil
}

// Commit adds box as a new session of the slot's owner and returns its Info, with a
// fresh ID. From info it takes Language, Profile and the per-session IdleTTL and
// MaxLifetime (see Info); the rest is set by the store. From here on the store owns
// box and closes it exactly once. If Commit fails (the store is closed, the record
// cannot be written) it closes box itself and frees the slot.
func (sl *Slot[B]) Commit(info Info, box B) (Info, error) {
	s := sl.s
	if any(box) == nil {
		sl.Cancel()
		return Info{}, errNilBox
	}
	s.mu.Lock()
	if sl.used {
		s.mu.Unlock()
		closeQuietly(box)
		return Info{}, errSlotUsed
	}
	sl.used = true
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return Info{}, sl.fail(box, ErrClosed)
	}

	now := s.now()
	e := &entry[B]{
		info: Info{
			ID:          newID(),
			Owner:       sl.owner,
			Language:    info.Language,
			Profile:     info.Profile,
			CreatedAt:   now,
			LastUsed:    now,
			IdleTTL:     clamp(info.IdleTTL, s.opts.IdleTTL),
			MaxLifetime: clamp(info.MaxLifetime, s.opts.MaxLifetime),
		},
		box:  box,
		gone: make(chan struct{}),
	}
	id := e.info.ID
	if s.opts.Dir != "" {
		rec := record{ID: id, Owner: sl.owner, CreatedAt: now}
		if err := writeRecord(s.opts.Dir, rec); err != nil {
			return Info{}, sl.fail(box, fmt.Errorf("record session %s: %w", id, err))
		}
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.removeRecord(id)
		return Info{}, sl.fail(box, ErrClosed)
	}
	s.seq++
	e.seq = s.seq
	s.live[id] = e
	s.watchers.Add(1)
	go s.watch(e)
	out := e.snapshot()
	s.mu.Unlock()
	s.log.Info("session started", "session_id", id, "owner", sl.owner, "language", info.Language,
		"idle_ttl", e.info.IdleTTL, "max_lifetime", e.info.MaxLifetime)
	return out, nil
}

// fail frees the slot of a Commit that did not happen and closes its box.
func (sl *Slot[B]) fail(box B, err error) error {
	sl.s.mu.Lock()
	sl.s.freeLocked(sl.owner)
	sl.s.mu.Unlock()
	if cerr := box.Close(); cerr != nil {
		sl.s.log.Warn("close box of a failed session commit", "owner", sl.owner, "err", cerr)
	}
	return err
}

// Cancel gives the slot back. It does nothing after Commit or a first Cancel.
func (sl *Slot[B]) Cancel() {
	sl.s.mu.Lock()
	defer sl.s.mu.Unlock()
	if !sl.used {
		sl.used = true
		sl.s.freeLocked(sl.owner)
	}
}

// Acquire marks owner's session id busy for one call or file operation and returns
// its box. The caller must call release exactly once when the operation ends (later
// calls do nothing); countCall says whether it was a call, for Info.Calls. release
// refreshes LastUsed, which restarts the idle TTL. If the session ends while busy
// (Delete, its maximum lifetime, Close), its box is closed under the caller, whose
// operation then fails; release still must be called and does nothing.
//
// Errors: ErrNotFound, *LostError, ErrBusy, ErrClosed.
func (s *Store[B]) Acquire(owner, id string) (b B, release func(countCall bool), err error) {
	s.mu.Lock()
	e, ends, err := s.lookupLocked(owner, id)
	if err != nil {
		s.mu.Unlock()
		s.finish(ends...)
		return b, nil, err
	}
	if e.busy {
		s.mu.Unlock()
		return b, nil, ErrBusy
	}
	e.busy = true
	s.mu.Unlock()
	var once sync.Once
	return e.box, func(countCall bool) {
		once.Do(func() { s.release(e, countCall) })
	}, nil
}

func (s *Store[B]) release(e *entry[B], countCall bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[e.info.ID] != e {
		return // ended while busy
	}
	e.busy = false
	e.info.LastUsed = s.now()
	if countCall {
		e.info.Calls++
	}
}

// Get describes owner's session id. Errors: ErrNotFound, *LostError, ErrClosed.
func (s *Store[B]) Get(owner, id string) (Info, error) {
	s.mu.Lock()
	e, ends, err := s.lookupLocked(owner, id)
	if err != nil {
		s.mu.Unlock()
		s.finish(ends...)
		return Info{}, err
	}
	info := e.snapshot()
	s.mu.Unlock()
	return info, nil
}

// lookupLocked finds owner's live session id. A session that should have ended (its
// box died, it expired) but has not been swept yet is ended now, with a *LostError;
// the caller must pass ends to finish after unlocking.
func (s *Store[B]) lookupLocked(owner, id string) (e *entry[B], ends []ended[B], err error) {
	if s.closed {
		return nil, nil, ErrClosed
	}
	now := s.now()
	if e, ok := s.live[id]; ok && e.info.Owner == owner {
		if reason := s.endReasonLocked(e, now); reason != "" {
			return nil, []ended[B]{s.endLocked(e, reason)}, &LostError{ID: id, Reason: reason}
		}
		return e, nil, nil
	}
	if t := s.tombLocked(owner, id, now); t != nil {
		return nil, nil, &LostError{ID: id, Reason: t.reason}
	}
	return nil, nil, ErrNotFound
}

// List describes owner's live sessions, oldest first. It is empty after Close.
func (s *Store[B]) List(owner string) []Info {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	now := s.now()
	var es []*entry[B]
	var ends []ended[B]
	for _, e := range s.live {
		if e.info.Owner != owner {
			continue
		}
		if reason := s.endReasonLocked(e, now); reason != "" {
			ends = append(ends, s.endLocked(e, reason))
			continue
		}
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry[B]) int { return cmp.Compare(a.seq, b.seq) })
	infos := make([]Info, len(es))
	for i, e := range es {
		infos[i] = e.snapshot()
	}
	s.mu.Unlock()
	s.finish(ends...)
	return infos
}

// Delete destroys owner's session id: it closes the box (even if busy: the running
// operation fails) and forgets the session. Deleting a lost session forgets its
// tombstone. The error is ErrNotFound, ErrClosed, or the box's Close error (the
// session is gone all the same).
func (s *Store[B]) Delete(owner, id string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if e, ok := s.live[id]; ok && e.info.Owner == owner {
		d := s.endLocked(e, "")
		s.mu.Unlock()
		return s.finish(d)
	}
	err := ErrNotFound
	if t := s.tombLocked(owner, id, s.now()); t != nil {
		s.dropTombLocked(id)
		err = nil
	}
	s.mu.Unlock()
	return err
}

// Len returns the number of live sessions (reserved slots not counted).
func (s *Store[B]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Run sweeps every Options.SweepEvery until ctx ends or the store is closed.
func (s *Store[B]) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// Sweep ends every session that has expired (idle TTL, maximum lifetime) or whose box
// died, leaving tombstones, and forgets old tombstones. Run calls it; tests call it
// with a fake clock.
func (s *Store[B]) Sweep() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	now := s.now()
	var ends []ended[B]
	for _, e := range s.live {
		if reason := s.endReasonLocked(e, now); reason != "" {
			ends = append(ends, s.endLocked(e, reason))
		}
	}
	for el := s.tombOrder.Front(); el != nil; el = s.tombOrder.Front() {
		if t := el.Value.(*tombstone); now.Sub(t.at) < tombstoneTTL {
			break
		}
		s.dropTombLocked(el.Value.(*tombstone).id)
	}
	s.mu.Unlock()
	s.finish(ends...)
}

// Close closes every box (in parallel) and waits for the store's goroutines. It
// keeps the records in Options.Dir: a server that restarts (cleanly or not) reports
// those sessions lost with the restart reason, rather than unknown. Afterwards the store refuses work with ErrClosed, and a
// pending Slot.Commit closes its box. Close returns the boxes' Close errors; calling it
// again does nothing.
func (s *Store[B]) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	ends := make([]ended[B], 0, len(s.live))
	for _, e := range s.live {
		d := s.endLocked(e, "")
		d.keepRecord = true // the next start reports these sessions lost
		d.cause = EndShutdown
		ends = append(ends, d)
	}
	s.mu.Unlock()
	err := s.finish(ends...)
	s.watchers.Wait()
	return err
}

// watch ends the session when its box dies on its own.
func (s *Store[B]) watch(e *entry[B]) {
	defer s.watchers.Done()
	select {
	case <-e.gone:
		return
	case <-e.box.Done():
	}
	s.mu.Lock()
	if s.live[e.info.ID] != e {
		s.mu.Unlock()
		return
	}
	d := s.endLocked(e, diedReason(e.box.Err()))
	s.mu.Unlock()
	s.finish(d)
}

// endReasonLocked says why e must end now, or "" if it lives on.
func (s *Store[B]) endReasonLocked(e *entry[B], now time.Time) string {
	select {
	case <-e.box.Done():
		return diedReason(e.box.Err())
	default:
	}
	if !now.Before(e.info.CreatedAt.Add(e.info.MaxLifetime)) {
		return fmt.Sprintf("reached its maximum lifetime of %s", e.info.MaxLifetime)
	}
	if !e.busy && !now.Before(e.info.LastUsed.Add(e.info.IdleTTL)) {
		return fmt.Sprintf("expired after %s idle", e.info.IdleTTL)
	}
	return ""
}

func diedReason(err error) string {
	if err == nil {
		return "the box died"
	}
	return "the box died: " + err.Error()
}

// endLocked removes e from the live sessions, frees its slot, stops its watcher and,
// with a reason, leaves a tombstone. The caller must pass the result to finish after
// unlocking: closing a box can take long.
func (s *Store[B]) endLocked(e *entry[B], reason string) ended[B] {
	delete(s.live, e.info.ID)
	s.freeLocked(e.info.Owner)
	close(e.gone)
	cause := EndDeleted
	if reason != "" {
		s.addTombLocked(e.info.ID, e.info.Owner, reason, s.now())
		cause = EndExpired
		select {
		case <-e.box.Done():
			cause = EndLost
		default:
		}
	}
	return ended[B]{id: e.info.ID, owner: e.info.Owner, box: e.box, reason: reason, info: e.snapshot(), cause: cause}
}

// finish closes the boxes of ended sessions, in parallel, and removes their records.
// It must be called without the lock, exactly once per ended session.
func (s *Store[B]) finish(ends ...ended[B]) error {
	switch len(ends) {
	case 0:
		return nil
	case 1:
		return s.destroy(ends[0])
	}
	errs := make([]error, len(ends))
	var wg sync.WaitGroup
	for i, d := range ends {
		wg.Go(func() { errs[i] = s.destroy(d) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Store[B]) destroy(d ended[B]) error {
	err := d.box.Close()
	if !d.keepRecord {
		s.removeRecord(d.id)
	}
	log := s.log.With("session_id", d.id, "owner", d.owner)
	if d.reason != "" {
		log.Info("session lost", "reason", d.reason)
	} else {
		log.Info("session closed")
	}
	if s.opts.OnEnd != nil {
		s.opts.OnEnd(End{Info: d.info, Cause: d.cause, Reason: d.reason})
	}
	if err != nil {
		log.Warn("close session box", "err", err)
		return fmt.Errorf("close session %s: %w", d.id, err)
	}
	return nil
}

func (s *Store[B]) removeRecord(id string) {
	if s.opts.Dir == "" {
		return
	}
	if err := removeRecord(s.opts.Dir, id); err != nil {
		s.log.Error("remove session record", "session_id", id, "err", err)
	}
}

func (s *Store[B]) freeLocked(owner string) {
	s.held--
	if s.perOwner[owner]--; s.perOwner[owner] <= 0 {
		delete(s.perOwner, owner)
	}
}

// addTombLocked remembers a lost session, dropping the oldest tombstone beyond
// maxTombstones.
func (s *Store[B]) addTombLocked(id, owner, reason string, at time.Time) {
	s.dropTombLocked(id)
	s.tombs[id] = s.tombOrder.PushBack(&tombstone{id: id, owner: owner, reason: reason, at: at})
	for s.tombOrder.Len() > maxTombstones {
		s.dropTombLocked(s.tombOrder.Front().Value.(*tombstone).id)
	}
}

// tombLocked returns owner's tombstone for id, or nil (none, too old, or another
// owner's).
func (s *Store[B]) tombLocked(owner, id string, now time.Time) *tombstone {
	el, ok := s.tombs[id]
	if !ok {
		return nil
	}
	t := el.Value.(*tombstone)
	if now.Sub(t.at) >= tombstoneTTL {
		s.dropTombLocked(id)
		return nil
	}
	if t.owner != owner {
		return nil
	}
	return t
}

func (s *Store[B]) dropTombLocked(id string) {
	if el, ok := s.tombs[id]; ok {
		s.tombOrder.Remove(el)
		delete(s.tombs, id)
	}
}

func (e *entry[B]) snapshot() Info {
	info := e.info
	info.Busy = e.busy
	info.ExpiresAt = info.LastUsed.Add(info.IdleTTL)
	if end := info.CreatedAt.Add(info.MaxLifetime); end.Before(info.ExpiresAt) {
		info.ExpiresAt = end
	}
	return info
}

// clamp returns d within (0, max]: zero or negative means max.
func clamp(d, max time.Duration) time.Duration {
	if d <= 0 || d > max {
		return max
	}
	return d
}

// idEncoding is lower-case base32 without padding: ids are safe as file names and
// in URLs.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

const (
	idPrefix = "s_"
	idLen    = len(idPrefix) + 26 // 16 random bytes
)

// newID returns "s_" and 128 random bits: unguessable, so an id alone reveals nothing
// and cannot be found by trying.
func newID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return idPrefix + idEncoding.EncodeToString(b[:])
}

// validID reports whether id has newID's form.
func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(id) != idLen {
		return false
	}
	for _, c := range []byte(rest) {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func closeQuietly(b Box) { _ = b.Close() }

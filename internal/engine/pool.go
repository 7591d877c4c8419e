package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/policy/python"
)

// The warm pool: boxes made ahead of time for one-shot executions.
//
// # What it holds
//
// A pooled box is a session box (box.SessionBackend) whose interpreter has started,
// confined itself and said it is ready — exactly what a cold one-shot box reaches
// before its code runs. It is kept per key: language, profile and limits, so a box
// never runs code under another profile's policy or limits. Only Python is pooled (the
// runner's session mode); requests with their own environment variables go cold.
//
// # Why it is as safe as a cold box
//
// A pooled box serves exactly one execution and is destroyed after it: take removes
// it from the pool before the caller sees it, and the caller closes it whatever
// happens. No code has run in a box before it is taken, so no state can pass from one
// execution to the next; the box has its own namespaces, cgroup, seccomp filter and
// Landlock domain, made for it, like every box.
//
// # Bounds
//
// At most PoolOptions.Size ready boxes per key, at most MaxKeys keys, at most Refills
// boxes being made at once across the pool (so refilling never starves executions of
// the host's CPUs), and a key unused for IdleKeyTTL is drained. A box that fails to
// start backs the key off for a while instead of retrying in a loop.

// PoolOptions configure the warm pool (EnablePool). Zero fields take the defaults.
type PoolOptions struct {
	// Size is how many ready boxes are kept per key. Default 2.
	Size int
	// MaxKeys bounds the (language, profile, limits) combinations kept warm. Default 4.
	MaxKeys int
	// Refills bounds the boxes being made at once. Default 2.
	Refills int
	// IdleKeyTTL drains a key not used for this long. Default 5 minutes.
	IdleKeyTTL time.Duration
	// Warm are the profiles whose Python boxes (with the config's limits) are made
	// at start, before any request. Other keys become warm on first use.
	Warm []string
	// NoZygote makes the pool's boxes start their interpreters rather than ask the
	// backend to fork them from a zygote (box.SessionSpec.Zygote).
	NoZygote bool
}

func (o PoolOptions) withDefaults() PoolOptions {
	if o.Size <= 0 {
		o.Size = 2
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 4
	}
	if o.Refills <= 0 {
		o.Refills = 2
	}
	if o.IdleKeyTTL <= 0 {
		o.IdleKeyTTL = 5 * time.Minute
	}
	return o
}

// poolKey identifies interchangeable boxes.
type poolKey struct {
	lang, profile string
	limits        box.Limits
}

// poolBackoff is how long a key that failed to make a box waits before trying again.
const poolBackoff = 5 * time.Second

type poolEntry struct {
	spec     *box.SessionSpec // how its boxes are made
	ready    []box.Session
	making   int
	lastUsed time.Time
	failedAt time.Time
}

// pool is the warm pool. Its methods are safe for concurrent use.
type pool struct {
	backend box.SessionBackend
	opts    PoolOptions
	log     *slog.Logger
	sem     chan struct{} // refill concurrency
	ctx     context.Context
	cancel  context.CancelFunc

	mu     sync.Mutex
	keys   map[poolKey]*poolEntry
	closed bool
	wg     sync.WaitGroup // boxes being made or closed

	hits, misses int64
}

func newPool(b box.SessionBackend, opts PoolOptions, log *slog.Logger) *pool {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &pool{backend: b, opts: opts, log: log, sem: make(chan struct{}, opts.Refills),
		ctx: ctx, cancel: cancel, keys: map[poolKey]*poolEntry{}}
}

// take returns a ready box for key, or nil on a miss. Either way it keeps the key
// warm: spec makes the spec of its boxes, called only for a key the pool does not
// hold yet. The caller owns the box and must close it.
func (p *pool) take(key poolKey, spec func() *box.SessionSpec) box.Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	e := p.keys[key]
	if e == nil {
		if len(p.keys) >= p.opts.MaxKeys && !p.evictLocked() {
			p.misses++
			return nil
		}
		e = &poolEntry{spec: spec()}
		p.keys[key] = e
	}
	e.lastUsed = time.Now()
	var s box.Session
	for len(e.ready) > 0 && s == nil {
		s, e.ready = e.ready[0], e.ready[1:]
		if s.Err() != nil { // died while it waited: never handed out
			p.closeLater(s)
			s = nil
		}
	}
	if s != nil {
		p.hits++
	} else {
		p.misses++
	}
	p.refillLocked(key, e)
	return s
}

// evictLocked drops the least recently used key to make room; false if every key is
// busy making boxes.
func (p *pool) evictLocked() bool {
	var oldest poolKey
	var at time.Time
	found := false
	for k, e := range p.keys {
		if e.making == 0 && (!found || e.lastUsed.Before(at)) {
			oldest, at, found = k, e.lastUsed, true
		}
	}
	if !found {
		return false
	}
	p.dropLocked(oldest)
	return true
}

func (p *pool) dropLocked(k poolKey) {
	for _, s := range p.keys[k].ready {
		p.closeLater(s)
	}
	delete(p.keys, k)
}

// refillLocked starts making boxes until the key has Size ready or on the way.
func (p *pool) refillLocked(key poolKey, e *poolEntry) {
	if time.Since(e.failedAt) < poolBackoff {
		return
	}
	for len(e.ready)+e.making < p.opts.Size {
		e.making++
		p.wg.Add(1)
		go p.make(key, e)
	}
}

// make starts one box for key (waiting for a refill slot first) and adds it to the
// key's ready boxes.
func (p *pool) make(key poolKey, e *poolEntry) {
	defer p.wg.Done()
	var s box.Session
	var err error
	select {
	case p.sem <- struct{}{}:
		s, err = p.backend.StartSession(p.ctx, e.spec)
		<-p.sem
	case <-p.ctx.Done():
		err = p.ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e.making--
	switch {
	case err != nil:
		e.failedAt = time.Now()
		if !p.closed {
			p.log.Warn("warm pool: a box failed to start", "language", key.lang, "profile", key.profile, "err", err)
		}
	case p.closed || p.keys[key] != e:
		p.closeLater(s) // the pool or the key went away meanwhile
	default:
		e.ready = append(e.ready, s)
	}
}

// closeLater destroys a box in the background; close waits for it.
func (p *pool) closeLater(s box.Session) {
	p.wg.Add(1)
	go func() { defer p.wg.Done(); _ = s.Close() }()
}

// release destroys a box an execution took, in the background.
func (p *pool) release(s box.Session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLater(s)
}

// sweep drains keys unused for IdleKeyTTL.
func (p *pool) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.keys {
		if e.making == 0 && time.Since(e.lastUsed) > p.opts.IdleKeyTTL {
			p.dropLocked(k)
		}
	}
}

// run sweeps until the pool closes.
func (p *pool) run() {
	t := time.NewTicker(max(p.opts.IdleKeyTTL/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			p.sweep()
		}
	}
}

// PoolStats says how the warm pool is doing.
type PoolStats struct {
	Keys   int   `json:"keys"`
	Ready  int   `json:"ready"`
	Making int   `json:"making"`
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
}

func (p *pool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PoolStats{Keys: len(p.keys), Hits: p.hits, Misses: p.misses}
	for _, e := range p.keys {
		st.Ready += len(e.ready)
		st.Making += e.making
	}
	return st
}

// close destroys every pooled box and waits until they, and the boxes being made or
// released, are gone.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.cancel()
	for k := range p.keys {
		p.dropLocked(k)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// EnablePool gives the engine a warm pool for one-shot executions and starts making
// the boxes of opts.Warm. Call it once, before serving; Close destroys the pool.
func (e *Engine) EnablePool(opts PoolOptions) error {
	sb, ok := e.backend.(box.SessionBackend)
	if !ok {
		return fmt.Errorf("the %s backend has no warm pool", e.backend.Name())
	}
	p := newPool(sb, opts, e.log)
	for _, profile := range p.opts.Warm {
		name, prof, err := e.profile(profile)
		if err != nil {
			return err
		}
		lim, err := e.limits(prof, box.Limits{})
		if err != nil {
			return err
		}
		spec := &box.Spec{Language: "python", Limits: lim, Network: "none"}
		p.warm(poolKey{lang: "python", profile: name, limits: lim}, p.pooledSpec(e.oneShotSpec(spec, name, prof)))
	}
	e.pool = p
	go p.run()
	return nil
}

// PoolStats reports the warm pool's state; zero without a pool.
func (e *Engine) PoolStats() PoolStats {
	if e.pool == nil {
		return PoolStats{}
	}
	return e.pool.stats()
}

// warm makes key's boxes ahead of its first use.
func (p *pool) warm(key poolKey, spec *box.SessionSpec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.keys[key]; ok || len(p.keys) >= p.opts.MaxKeys {
		return
	}
	e := &poolEntry{spec: spec, lastUsed: time.Now()}
	p.keys[key] = e
	p.refillLocked(key, e)
}

// takePooled returns a ready box of the warm pool for an execution or a session of
// lang under profile with lim, or nil when there is no pool, none is ready, or the
// box could not be a pooled one: only Python is pooled, and a box with its own
// environment variables is made for its caller. spec makes the spec of the key's
// boxes (only for a key the pool does not hold yet).
func (e *Engine) takePooled(ctx context.Context, lang, profile string, lim box.Limits, env []string, spec func() *box.SessionSpec) box.Session {
	if e.pool == nil || lang != "python" || len(env) > 0 {
		return nil
	}
	key := poolKey{lang: lang, profile: profile, limits: lim}
	if s := e.pool.take(key, func() *box.SessionSpec { return e.pool.pooledSpec(spec()) }); s != nil {
		return s
	}
	// A miss. Where the backend forks the key's boxes from a running zygote, making
	// one now costs what the pool pays for it: far less than a cold box.
	zb, ok := e.backend.(box.ZygoteBackend)
	ps := e.pool.spec(key)
	if !ok || ps == nil || !zb.ZygoteReady(ps) {
		return nil
	}
	s, err := zb.StartSession(ctx, ps)
	if err != nil {
		e.log.Debug("warm pool: a box for a miss failed to start; the execution goes cold", "err", err)
		return nil
	}
	return s
}

// spec returns the spec of key's boxes, nil if the pool does not hold key.
func (p *pool) spec(key poolKey) *box.SessionSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.keys[key]; e != nil {
		return e.spec
	}
	return nil
}

// pooledSpec is the spec of a key's boxes: spec, with the zygote that backends able
// to may fork them from (a box serves one execution or session; the zygote makes
// each of them as fast as they are taken), unless the pool is told not to.
func (p *pool) pooledSpec(spec *box.SessionSpec) *box.SessionSpec {
	s := *spec
	if s.Language == "python" && !p.opts.NoZygote {
		s.Zygote = python.ZygoteInterpreter(s.Interpreter)
	}
	return &s
}

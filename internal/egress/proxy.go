package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts and sizes. Every read from a box is bounded in size, and every wait
// for a box is bounded in time where the protocol allows it.
const (
	// maxHeaderBytes bounds a request's header block (request line included);
	// a longer one gets 431.
	maxHeaderBytes = 64 << 10
	// maxRespHeaderBytes bounds a response's header block from upstream.
	maxRespHeaderBytes = 1 << 20
	// idleTimeout bounds the wait for a request header, from the end of the
	// previous exchange (or from accept) to the end of the header block.
	idleTimeout = 30 * time.Second
	// helloTimeout bounds the wait for the rest of a TLS ClientHello once its
	// first byte arrived, and each TLS handshake of an interception.
	helloTimeout = 10 * time.Second
	// writeTimeout bounds writing a refusal or an error to a box that does not
	// read.
	writeTimeout = 5 * time.Second
	// resolveTimeout bounds one name resolution.
	resolveTimeout = 5 * time.Second
	// dialTimeout is the default Dial's timeout.
	dialTimeout = 10 * time.Second
	// maxDialAddrs is how many of a name's addresses are tried, in order.
	maxDialAddrs = 4
	// maxClientConns bounds the proxy connections a box may hold open at once;
	// the box's own file limit is usually lower.
	maxClientConns = 1024
	// lingerTimeout and maxLinger bound lingerClose.
	lingerTimeout = 500 * time.Millisecond
	maxLinger     = 256 << 10
	// pipeChunk is the most a tunnel copies between two looks at the limits.
	pipeChunk = 1 << 20
)

// Options configures a Proxy. The zero Options is usable.
type Options struct {
	// Resolve looks up a name's addresses; the default is
	// net.DefaultResolver.LookupNetIP(ctx, "ip", host). It is not called for
	// names in Policy.Hosts or IP literals.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an address ("1.2.3.4:443", "[2001:db8::1]:80") that the
	// proxy has checked; the default is a net.Dialer with a 10 s timeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// CA, when set, lets the proxy intercept TLS to the hosts that have secrets,
	// so it can substitute them in HTTPS requests. Without it secrets are
	// substituted in plain HTTP only: HTTPS to a secret's host then passes
	// through untouched and the placeholder stays a placeholder.
	CA *CA
	// UpstreamRoots verifies upstream servers when intercepting; nil means the
	// system roots.
	UpstreamRoots *x509.CertPool
	// Log receives the proxy's own problems (never a secret value); nil
	// discards them. Decisions go to the Event callback of Attach.
	Log *slog.Logger
}

// Proxy is moat's egress proxy. One serves every box of a process: each Attach
// serves one box under its own Policy. A Proxy is safe for concurrent use.
type Proxy struct {
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	ca      *CA
	roots   *x509.CertPool
	log     *slog.Logger

	// idleTimeout and helloTimeout are the constants of the same names; tests
	// shorten them.
	idleTimeout, helloTimeout time.Duration
}

// New returns a Proxy with the given options.
func New(opts Options) *Proxy {
	p := &Proxy{
		resolve: opts.Resolve,
		dial:    opts.Dial,
		ca:      opts.CA,
		roots:   opts.UpstreamRoots,
		log:     opts.Log,

		idleTimeout:  idleTimeout,
		helloTimeout: helloTimeout,
	}
	if p.resolve == nil {
		p.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if p.dial == nil {
		d := &net.Dialer{Timeout: dialTimeout}
		p.dial = d.DialContext
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p
}

// Stats are a box's egress totals.
type Stats struct {
	// Conns is the number of connections the proxy opened (or tried to open)
	// to the outside world for the box: one per CONNECT, one per plain HTTP
	// request.
	Conns int
	// Refused is the number of refusals: HTTP requests, CONNECTs and DNS
	// queries.
	Refused int
	// BytesOut and BytesIn are the bytes sent to and received from the outside
	// world, as counted on the upstream connections.
	BytesOut, BytesIn int64
}

// Event reports one decision of the proxy: a refusal at once, an allowed
// connection or request when it ends.
type Event struct {
	// Time is when the request or connection arrived.
	Time time.Time
	// Kind is "http" (one plain HTTP request, or one request inside an
	// intercepted tunnel), "connect" (one CONNECT tunnel) or "dns" (one query).
	// The bytes of an intercepted tunnel's "http" events are part of its
	// "connect" event's: add up one or the other.
	Kind string
	// Host and Port are the destination the box asked for (Port is 0 for DNS),
	// Host in canonical form when it is valid.
	Host string
	Port uint16
	// Addr is the address dialled ("1.2.3.4:443"), when one was.
	Addr string
	// Allowed reports the decision.
	Allowed bool
	// Reason says why the destination was refused; "" when it was allowed.
	Reason string
	// Error says what went wrong with an allowed destination: it did not
	// resolve, the connection failed, a byte limit cut it off. "" otherwise.
	Error string
	// BytesOut and BytesIn are the bytes sent and received upstream for this
	// request or connection.
	BytesOut, BytesIn int64
	// Duration is how long the request or connection took.
	Duration time.Duration
	// Secrets names (by Env) the secrets substituted in this request or
	// connection.
	Secrets []string
}

// Box is one box's attachment to the proxy; Close ends it.
type Box struct {
	p   *Proxy
	pol *Policy
	// invalid is set when the policy failed Validate; then everything is
	// refused.
	invalid bool
	l       net.Listener
	dns     net.PacketConn
	ev      func(Event)
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool                   // +checklocks:mu
	conns  map[io.Closer]struct{} // +checklocks:mu; every live connection, both sides
	cut    string                 // +checklocks:mu; why the byte limits closed everything

	evMu sync.Mutex // serializes calls of ev

	dials, refused    atomic.Int64
	bytesOut, bytesIn atomic.Int64
	live              atomic.Int64 // open proxy connections from the box

	closeOnce sync.Once
}

// Attach serves one box: proxy connections accepted on l and DNS queries read
// from dns (which may be nil), under pol, until Close. The Box owns l and dns
// and closes them. pol is copied; a nil pol, or one that fails Validate,
// refuses everything (the problem is logged), so callers should Validate
// first.
//
// ev, which may be nil, receives every decision (see Event). It is called
// synchronously from the goroutine serving the connection, one call at a time,
// and never after Close returns; it must be quick and must not call Close.
func (p *Proxy) Attach(pol *Policy, l net.Listener, dns net.PacketConn, ev func(Event)) *Box {
	if pol == nil {
		pol = &Policy{} // refuses everything
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Box{
		p:      p,
		pol:    pol.clone(),
		l:      l,
		dns:    dns,
		ev:     ev,
		log:    p.log,
		ctx:    ctx,
		cancel: cancel,
		conns:  map[io.Closer]struct{}{},
	}
	if err := b.pol.Validate(); err != nil {
		b.invalid = true
		b.log.Error("egress: invalid policy, refusing everything", "err", err)
	}
	b.wg.Add(1)
	go b.serve()
	if dns != nil {
		b.wg.Add(1)
		go b.serveDNS()
	}
	return b
}

// Close stops accepting, closes the listener, the DNS socket and every live
// connection of the box, waits for its goroutines and returns the totals. It is
// idempotent; later calls return the same totals.
func (b *Box) Close() Stats {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		conns := b.conns
		b.conns = nil
		b.mu.Unlock()
		b.cancel()
		b.l.Close()
		if b.dns != nil {
			b.dns.Close()
		}
		for c := range conns {
			c.Close()
		}
		b.wg.Wait()
	})
	return b.Stats()
}

// Stats returns the box's totals so far.
func (b *Box) Stats() Stats {
	return Stats{
		Conns:    int(b.dials.Load()),
		Refused:  int(b.refused.Load()),
		BytesOut: b.bytesOut.Load(),
		BytesIn:  b.bytesIn.Load(),
	}
}

// serve accepts proxy connections until the listener is closed.
func (b *Box) serve() {
	defer b.wg.Done()
	var delay time.Duration
	for {
		c, err := b.l.Accept()
		if err != nil {
			if b.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			b.log.Warn("egress: accept", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-b.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		if !b.track(c) {
			c.Close()
			return
		}
		b.wg.Add(1)
		go b.handle(c)
	}
}

// handle serves one proxy connection from the box.
func (b *Box) handle(c net.Conn) {
	defer b.wg.Done()
	defer b.untrack(c)
	defer lingerClose(c)
	defer b.recoverPanic("proxy connection")
	if b.live.Add(1) > maxClientConns {
		defer b.live.Add(-1)
		writeError(c, 503, "moat: too many open proxy connections\n")
		return
	}
	defer b.live.Add(-1)
	b.serveClient(c)
}

// lingerClose closes a client connection gracefully: it sends FIN, then reads
// and drops what the client still sends, for lingerTimeout at most. Closing a
// socket with unread data makes the kernel send RST, which can destroy an
// answer written just before (a 431 for a header the proxy stopped reading);
// net/http's closeWriteAndWait does the same.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		c.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.CopyN(io.Discard, c, maxLinger)
	}
	c.Close()
}

// goTracked runs f in a goroutine that Close waits for, with panics recovered.
func (b *Box) goTracked(what string, f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer b.recoverPanic(what)
		f()
	}()
}

// recoverPanic logs a panic of a handler instead of letting it end the
// process: a bug reached by one box's input must not take down the server and
// every other box. The deferred Close of the handler then ends the connection.
func (b *Box) recoverPanic(what string) {
	if r := recover(); r != nil {
		b.log.Error("egress: panic in "+what, "panic", b.scrub(fmt.Sprint(r)), "stack", string(debug.Stack()))
	}
}

// track registers a live connection for Close and for the byte limits; it
// returns false (and the caller must close c) when the box is closed.
func (b *Box) track(c io.Closer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *Box) untrack(c io.Closer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
}

// emit reports a decision.
func (b *Box) emit(e Event) {
	if !e.Allowed {
		b.refused.Add(1)
	}
	e.Reason = b.scrub(e.Reason)
	e.Error = b.scrub(e.Error)
	b.log.Debug("egress", "kind", e.Kind, "host", e.Host, "port", e.Port, "allowed", e.Allowed,
		"reason", e.Reason, "error", e.Error, "bytes_out", e.BytesOut, "bytes_in", e.BytesIn)
	if b.ev == nil {
		return
	}
	b.evMu.Lock()
	defer b.evMu.Unlock()
	b.ev(e)
}

// scrub replaces every secret value in s (an error text that quotes what a
// server sent, say) with the secret's name, so no value reaches an Event, a
// log line or the box.
func (b *Box) scrub(s string) string {
	for _, sec := range b.pol.Secrets {
		if sec.Value != "" && strings.Contains(s, sec.Value) {
			s = strings.ReplaceAll(s, sec.Value, "[secret "+sec.Env+"]")
		}
	}
	return s
}

// refuseAll returns why every destination is refused now, or "".
func (b *Box) refuseAll() string {
	if b.invalid {
		return "the box's egress policy is invalid"
	}
	return b.cutReason()
}

// cutReason returns why the byte limits closed the box's connections, or "".
func (b *Box) cutReason() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut
}

// addBytes adds n bytes out (out) or in to the totals and, when a total passes
// its limit, closes every connection of the box.
func (b *Box) addBytes(out bool, n int64) {
	if n <= 0 {
		return
	}
	var total, limit int64
	var dir string
	if out {
		total, limit, dir = b.bytesOut.Add(n), b.pol.Limits.BytesOut, "out"
	} else {
		total, limit, dir = b.bytesIn.Add(n), b.pol.Limits.BytesIn, "in"
	}
	if limit > 0 && total > limit {
		b.cutAll(fmt.Sprintf("byte limit of %d bytes %s reached", limit, dir))
	}
}

// remaining returns how many bytes may still go out (out) or in before the
// limit, or -1 for no limit.
func (b *Box) remaining(out bool) int64 {
	total, limit := b.bytesIn.Load(), b.pol.Limits.BytesIn
	if out {
		total, limit = b.bytesOut.Load(), b.pol.Limits.BytesOut
	}
	if limit <= 0 {
		return -1
	}
	return max(0, limit-total)
}

// cutAll closes every connection of the box; later requests are refused with
// reason.
func (b *Box) cutAll(reason string) {
	b.mu.Lock()
	if b.cut != "" || b.closed {
		b.mu.Unlock()
		return
	}
	b.cut = reason
	conns := make([]io.Closer, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	b.log.Info("egress: closing every connection of the box", "reason", reason)
	for _, c := range conns {
		c.Close()
	}
}

// errCut is returned by reads and writes after a byte limit was passed.
var errCut = errors.New("egress byte limit reached")

// lookup returns the addresses of host (canonical): itself for an IP literal,
// else Policy.Hosts, else the resolver. IPv4-mapped addresses are unmapped.
func (b *Box) lookup(host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if addrs, ok := b.pol.Hosts[host]; ok {
		return addrs, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, resolveTimeout)
	defer cancel()
	addrs, err := b.p.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.Unmap().WithZone(""))
	}
	return out, nil
}

// admit decides on a destination the box asked for: the policy judges the name,
// then the addresses it resolves to are filtered. It returns the addresses
// the proxy may dial, or a refusal, or an error (the name did not resolve).
func (b *Box) admit(host string, port uint16) (addrs []netip.AddrPort, refusal string, err error) {
	if why := b.refuseAll(); why != "" {
		return nil, why, nil
	}
	if ok, why := b.pol.Allowed(host, port); !ok {
		return nil, why, nil
	}
	ips, err := b.lookup(host)
	if err != nil {
		return nil, "", fmt.Errorf("could not resolve %s: %w", host, err)
	}
	var first string
	for _, a := range ips {
		if ok, why := b.pol.addrAllowed(a, port); ok {
			addrs = append(addrs, netip.AddrPortFrom(a, port))
		} else if first == "" {
			first = fmt.Sprintf("%s is %s address", a, article(why))
		}
	}
	if len(addrs) == 0 {
		if first == "" {
			return nil, "", fmt.Errorf("could not resolve %s: no addresses", host)
		}
		return nil, fmt.Sprintf("%s resolves only to addresses moat refuses (%s)", host, first), nil
	}
	return addrs, "", nil
}

// dialOut opens a connection to the first of addrs that answers, counting it
// against the connection limit. The connection is tracked; the caller must
// untrack and close it.
func (b *Box) dialOut(addrs []netip.AddrPort) (conn net.Conn, addr string, refusal string, err error) {
	n := b.dials.Add(1)
	if limit := b.pol.Limits.Conns; limit > 0 && n > int64(limit) {
		b.dials.Add(-1)
		return nil, "", fmt.Sprintf("connection limit of %d reached", limit), nil
	}
	for _, ap := range addrs[:min(len(addrs), maxDialAddrs)] {
		addr = ap.String()
		conn, err = b.p.dial(b.ctx, "tcp", addr)
		if err != nil {
			continue
		}
		if !b.track(conn) {
			conn.Close()
			return nil, "", "", net.ErrClosed
		}
		return conn, addr, "", nil
	}
	return nil, addr, "", fmt.Errorf("could not connect: %w", err)
}

// countConn counts an upstream connection's bytes for its event and the box's
// totals, and fails once a byte limit was passed.
type countConn struct {
	net.Conn
	b       *Box
	out, in atomic.Int64
}

// Read reads no further than just past the limit, so a limit is overshot by
// one byte at most (per connection racing for the last bytes).
func (c *countConn) Read(p []byte) (int, error) {
	if c.b.cutReason() != "" {
		return 0, errCut
	}
	if rem := c.b.remaining(false); rem >= 0 && int64(len(p)) > rem+1 {
		p = p[:rem+1]
	}
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	c.b.addBytes(false, int64(n))
	return n, err
}

// Write writes no further than just past the limit, then fails with errCut.
func (c *countConn) Write(p []byte) (int, error) {
	if c.b.cutReason() != "" {
		return 0, errCut
	}
	short := false
	if rem := c.b.remaining(true); rem >= 0 && int64(len(p)) > rem+1 {
		p, short = p[:rem+1], true
	}
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	c.b.addBytes(true, int64(n))
	if err == nil && short {
		err = errCut
	}
	return n, err
}

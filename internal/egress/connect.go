package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"
)

// recordTypeHandshake is the first byte of a TLS record carrying a handshake
// message: how every TLS connection starts, with the ClientHello.
const recordTypeHandshake = 0x16

// maxHelloBytes bounds what is read of a ClientHello: two full TLS records,
// room for the largest hellos in use (post-quantum key shares take about 1.2 KB).
const maxHelloBytes = 2 * (5 + 16384)

// tunnelResult is how a tunnel ended.
type tunnelResult struct {
	out, in int64
	secrets []string
	// refusal is set when the tunnel was refused after it was established
	// (the TLS SNI did not match the CONNECT host).
	refusal string
	err     error
}

// connect serves a CONNECT request: once admitted and connected, c becomes a
// tunnel to host:port, checked by its TLS SNI and, for the hosts of secrets,
// intercepted.
func (b *Box) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	ev := Event{Time: time.Now(), Kind: "connect"}
	if _, p, err := net.SplitHostPort(req.URL.Host); err != nil || p == "" {
		writeError(c, http.StatusBadRequest, "moat: CONNECT needs host:port, e.g. CONNECT example.com:443\n")
		return
	}
	host, port, ok := splitHost(req.URL.Host, 0)
	if !ok {
		ev.Host = clip(req.URL.Host)
		b.refuse(c, &ev, "not a valid host and port")
		return
	}
	ev.Host, ev.Port = host, port
	addrs, refusal, err := b.admit(host, port)
	if refusal != "" {
		b.refuse(c, &ev, refusal)
		return
	}
	if err != nil {
		b.fail(c, &ev, http.StatusBadGateway, err)
		return
	}
	up, addr, refusal, err := b.dialOut(addrs)
	ev.Addr = addr
	if refusal != "" {
		b.refuse(c, &ev, refusal)
		return
	}
	if err != nil {
		b.fail(c, &ev, http.StatusBadGateway, err)
		return
	}
	defer b.untrack(up)
	defer up.Close()

	var r tunnelResult
	c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	c.SetWriteDeadline(time.Time{})
	switch {
	case err != nil:
		r.err = err
	case b.p.ca != nil && b.pol.hasSecrets(host, port):
		r = b.intercept(c, br, up, host, port, addr)
	default:
		r = b.passthrough(c, br, up, host)
	}
	ev.BytesOut, ev.BytesIn = r.out, r.in
	ev.Secrets = r.secrets
	ev.Duration = time.Since(ev.Time)
	if r.refusal != "" {
		ev.Reason = r.refusal
		b.emit(ev)
		return
	}
	ev.Allowed = true
	if r.err != nil {
		ev.Error = b.errorText(r.err)
	}
	b.emit(ev)
}

// passthrough relays the tunnel untouched, after checking the TLS SNI if the
// client speaks TLS. Server bytes flow to the client from the start: in
// protocols where the server speaks first (SSH, SMTP) the client waits for them.
func (b *Box) passthrough(c net.Conn, br *bufio.Reader, up net.Conn, host string) tunnelResult {
	down := b.startDown(c, up)
	r := b.checkedUp(c, br, up, host)
	if r.refusal != "" {
		c.Close()
		up.Close()
	}
	d := <-down
	r.in = d.n
	if r.err == nil {
		r.err = d.err
	}
	return r
}

// checkedUp relays the client's bytes to up; if they start a TLS connection,
// its SNI must name host.
func (b *Box) checkedUp(c net.Conn, br *bufio.Reader, up net.Conn, host string) tunnelResult {
	// No deadline for the first byte: the server may have to speak first.
	first, err := br.Peek(1)
	if err != nil {
		closeWrite(up)
		return tunnelResult{}
	}
	var head []byte
	if first[0] == recordTypeHandshake {
		var refusal string
		head, refusal = b.checkHello(c, br, host)
		if refusal != "" {
			return tunnelResult{refusal: refusal}
		}
	}
	n, err := b.pipeUp(c, br, up, head)
	return tunnelResult{out: n, err: err}
}

// checkHello reads the client's TLS ClientHello (its first byte already
// buffered in br) and checks that its SNI, if any, names host. It returns the
// bytes it read, which the caller must relay first, or a refusal.
//
// The SNI check stops a box from reaching another site that shares the allowed
// host's addresses (a CDN's edge, a shared host) by naming the allowed host in
// CONNECT and the other one in TLS. Without interception, fronting inside the
// TLS session (an inner Host header) cannot be seen; the big CDNs refuse it.
func (b *Box) checkHello(c net.Conn, br *bufio.Reader, host string) (raw []byte, refusal string) {
	c.SetReadDeadline(time.Now().Add(b.p.helloTimeout))
	defer c.SetReadDeadline(time.Time{})
	name, raw, err := readClientHello(br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, fmt.Sprintf("no complete TLS ClientHello within %s", b.p.helloTimeout)
	}
	if err != nil {
		return nil, "no valid TLS ClientHello: " + err.Error()
	}
	if name != "" && !equalHost(name, host) {
		return nil, fmt.Sprintf("TLS SNI %s does not match CONNECT host %s", name, host)
	}
	return raw, ""
}

// equalHost compares an SNI name with a canonical host.
func equalHost(name, host string) bool {
	canon, ok := canonHost(name)
	return ok && canon == host
}

// errHelloDone stops the handshake in readClientHello once the hello is parsed.
var errHelloDone = errors.New("client hello read")

// readClientHello reads one TLS ClientHello from r and returns its SNI ("" if
// none) and every byte it read. It lets crypto/tls parse the hello: a server
// handshake over a connection that only records what it reads (and drops what
// the handshake would write), stopped from GetConfigForClient, which sees the
// parsed hello. A hello crypto/tls would reject is refused, so the server
// never sees a hello this check did not understand.
func readClientHello(r io.Reader) (serverName string, raw []byte, err error) {
	rc := &recordConn{r: r}
	seen := false
	cfg := &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			serverName, seen = h.ServerName, true
			return nil, errHelloDone
		},
	}
	err = tls.Server(rc, cfg).Handshake()
	if !seen {
		if rc.full {
			return "", nil, fmt.Errorf("longer than %d bytes", maxHelloBytes)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return "", nil, errors.New("connection closed in the ClientHello")
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "", nil, err
		}
		return "", nil, errors.New("malformed")
	}
	return serverName, rc.buf, nil
}

// recordConn is the net.Conn of readClientHello: reads come from r, at most
// maxHelloBytes, and are recorded; writes are dropped.
type recordConn struct {
	r    io.Reader
	buf  []byte
	full bool
}

func (c *recordConn) Read(p []byte) (int, error) {
	room := maxHelloBytes - len(c.buf)
	if room <= 0 {
		c.full = true
		return 0, errors.New("client hello too large")
	}
	n, err := c.r.Read(p[:min(len(p), room)])
	c.buf = append(c.buf, p[:n]...)
	return n, err
}

func (c *recordConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *recordConn) Close() error                     { return nil }
func (c *recordConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *recordConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *recordConn) SetDeadline(time.Time) error      { return nil }
func (c *recordConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

// intercept terminates the client's TLS with a certificate from the CA,
// substitutes secrets in the requests and forwards them over TLS to the
// server, which is verified as any client would (UpstreamRoots, ServerName =
// host). Both sides speak HTTP/1.1 only. A client that does not start with TLS
// is relayed untouched, as by passthrough; but server bytes flow only once the
// client has spoken, so a server-speaks-first protocol to a secret's host waits.
func (b *Box) intercept(c net.Conn, br *bufio.Reader, raw net.Conn, host string, port uint16, addr string) (r tunnelResult) {
	first, err := br.Peek(1)
	if err != nil {
		return tunnelResult{}
	}
	if first[0] != recordTypeHandshake {
		return b.passthrough(c, br, raw, host)
	}
	hello, refusal := b.checkHello(c, br, host)
	if refusal != "" {
		return tunnelResult{refusal: refusal}
	}
	leaf, err := b.p.ca.leaf(host)
	if err != nil {
		return tunnelResult{err: err}
	}
	// The client's bytes: the hello already read, then the rest.
	cc := &replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(hello), br)}
	tc := tls.Server(cc, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	defer tc.Close()
	ctx, cancel := context.WithTimeout(b.ctx, b.p.helloTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		return tunnelResult{err: fmt.Errorf("TLS handshake with the box: %w", err)}
	}

	up := &countConn{Conn: raw, b: b}
	defer func() { r.out, r.in = up.out.Load(), up.in.Load() }()
	uc := tls.Client(up, &tls.Config{
		ServerName: host,
		RootCAs:    b.p.roots,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	ctx, cancel = context.WithTimeout(b.ctx, b.p.helloTimeout)
	err = uc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		err = fmt.Errorf("TLS handshake with the server: %w", err)
		writeError(tc, http.StatusBadGateway, "moat: egress to "+hostPort(host, port)+" failed: "+b.scrub(err.Error())+"\n")
		return tunnelResult{err: err}
	}
	u := newUpstream(uc)
	tbr := bufio.NewReaderSize(tc, maxHeaderBytes)
	for {
		tc.SetReadDeadline(time.Now().Add(b.p.idleTimeout))
		req, hostHdr, err := readRequest(tbr)
		if err != nil {
			b.badRequest(tc, err)
			return r
		}
		tc.SetReadDeadline(time.Time{})
		ev := Event{Time: time.Now(), Kind: "http", Host: host, Port: port, Addr: addr}
		if why := tunnelTarget(req, hostHdr, host, port); why != "" {
			b.refuse(tc, &ev, why)
			return r
		}
		out0, in0 := up.out.Load(), up.in.Load()
		clientClose := req.Close
		ev.Secrets = b.prepare(tc, req, host, port, 443)
		keep, err := b.exchange(tc, u, req, host, port, clientClose, true)
		ev.BytesOut, ev.BytesIn = up.out.Load()-out0, up.in.Load()-in0
		ev.Duration = time.Since(ev.Time)
		ev.Allowed = true
		if err != nil {
			ev.Error = b.errorText(err)
		}
		b.emit(ev)
		for _, s := range ev.Secrets {
			if !slices.Contains(r.secrets, s) {
				r.secrets = append(r.secrets, s)
			}
		}
		if !keep {
			return r
		}
	}
}

// tunnelTarget checks that a request inside an intercepted tunnel is for the
// tunnel's host:port, and says why not.
func tunnelTarget(req *http.Request, hostHdr []string, host string, port uint16) string {
	if req.Method == http.MethodConnect {
		return "CONNECT inside a tunnel"
	}
	names := hostHdr
	if req.URL.IsAbs() {
		names = append(slices.Clone(names), req.URL.Host)
	}
	for _, n := range names {
		if h, p, ok := splitHost(n, 443); !ok || h != host || p != port {
			return fmt.Sprintf("Host header names %q but the tunnel is to %s", clip(n), hostPort(host, port))
		}
	}
	return ""
}

// replayConn reads from r (bytes already read from Conn, then Conn) and does
// the rest on Conn.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// pipeResult is how one direction of a tunnel ended.
type pipeResult struct {
	n   int64
	err error
}

// startDown starts relaying up to the client c, in a goroutine Close waits for.
// When up ends, the client's write side is closed; on an error, both
// connections are.
func (b *Box) startDown(c, up net.Conn) <-chan pipeResult {
	ch := make(chan pipeResult, 1)
	b.goTracked("tunnel", func() {
		var r pipeResult
		defer func() { ch <- r }()
		r.n, r.err = b.pipe(c, up, false)
		if r.err == nil {
			closeWrite(c)
		} else {
			c.Close()
			up.Close()
		}
	})
	return ch
}

// pipeUp relays the client to up: head first, then what br holds, then the
// client connection itself.
func (b *Box) pipeUp(c net.Conn, br *bufio.Reader, up net.Conn, head []byte) (total int64, err error) {
	// write writes p as pipe copies: no further than just past the limit.
	write := func(p []byte) error {
		for len(p) > 0 {
			if b.cutReason() != "" {
				return errCut
			}
			n := int64(len(p))
			if rem := b.remaining(true); rem >= 0 {
				n = min(n, rem+1)
			}
			w, err := up.Write(p[:n])
			total += int64(w)
			b.addBytes(true, int64(w))
			if err != nil {
				return err
			}
			p = p[n:]
		}
		return nil
	}
	if len(head) > 0 {
		err = write(head)
	}
	if n := br.Buffered(); n > 0 && err == nil {
		p, _ := br.Peek(n)
		err = write(p)
		br.Discard(n)
	}
	if err == nil {
		var n int64
		n, err = b.pipe(up, c, true)
		total += n
	}
	if err == nil {
		closeWrite(up)
	} else {
		c.Close()
		up.Close()
	}
	return total, err
}

// pipe copies src to dst until src ends (nil error) or either fails. It copies
// in chunks of at most pipeChunk, and no further than just past the byte
// limit, so the box's totals stay current and a limit cuts in time. Between
// two TCP connections each chunk moves through the kernel's splice(2),
// without a copy in user space.
func (b *Box) pipe(dst, src net.Conn, out bool) (int64, error) {
	var total int64
	for {
		if b.cutReason() != "" {
			return total, errCut
		}
		chunk := int64(pipeChunk)
		if rem := b.remaining(out); rem >= 0 {
			chunk = max(1, min(chunk, rem+1))
		}
		n, err := io.Copy(dst, &io.LimitedReader{R: src, N: chunk})
		total += n
		b.addBytes(out, n)
		if err != nil {
			return total, err
		}
		if n < chunk {
			return total, nil // src ended
		}
	}
}

// closeWrite half-closes c if it can (TCP), else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

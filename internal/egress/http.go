package egress

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"time"
)

// serveClient serves the requests of one proxy connection from the box: plain
// HTTP requests in absolute form, any number of them (keep-alive), or one
// CONNECT, which turns the connection into a tunnel.
func (b *Box) serveClient(c net.Conn) {
	br := bufio.NewReaderSize(c, maxHeaderBytes)
	for {
		c.SetReadDeadline(time.Now().Add(b.p.idleTimeout))
		req, hostHdr, err := readRequest(br)
		if err != nil {
			b.badRequest(c, err)
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			b.connect(c, br, req)
			return
		}
		if !b.plainHTTP(c, req, hostHdr) {
			return
		}
	}
}

// badRequest answers a request that could not be read, if it is worth an
// answer: a client that closed or went idle between requests just goes.
func (b *Box) badRequest(c net.Conn, err error) {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, io.ErrUnexpectedEOF):
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(c, http.StatusRequestTimeout, "moat: no complete request header within "+b.p.idleTimeout.String()+"\n")
	case errors.Is(err, errHeaderTooLarge):
		writeError(c, http.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("moat: request header larger than %d bytes\n", maxHeaderBytes))
	default:
		var ne net.Error
		if errors.As(err, &ne) {
			return // a reset or the like: nobody to answer
		}
		writeError(c, http.StatusBadRequest, "moat: malformed request: "+b.scrub(err.Error())+"\n")
	}
}

// readRequest reads one request, header and all, from br, whose buffer must be
// maxHeaderBytes large. It also returns the values of the Host header, which
// http.ReadRequest drops when the request line has an absolute URL.
//
// The header block is peeked whole into br's buffer before it is parsed: so
// a header larger than the buffer is refused without reading more, however
// slowly it arrives (net/http's own limit works the same way, with a limited
// reader under the buffer).
func readRequest(br *bufio.Reader) (req *http.Request, hostHdr []string, err error) {
	block, err := peekHeader(br)
	if err != nil {
		return nil, nil, err
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block)))
	if _, err := tp.ReadLine(); err == nil {
		if h, err := tp.ReadMIMEHeader(); err == nil {
			hostHdr = h.Values("Host")
		}
	}
	req, err = http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	// What net/http's server checks and ReadRequest does not: a header that
	// would be written upstream as it came must be well-formed.
	for _, h := range hostHdr {
		if !validHostHeader(h) {
			return nil, nil, errors.New("malformed Host header")
		}
	}
	for name, vs := range req.Header {
		if !validToken(name) {
			return nil, nil, fmt.Errorf("invalid header name %q", name)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				return nil, nil, fmt.Errorf("invalid value of header %q", name)
			}
		}
	}
	return req, hostHdr, nil
}

// validToken reports whether s is an RFC 9110 token, as a header name must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHostHeader reports whether a Host header holds only characters of a
// URL authority (RFC 3986: unreserved, sub-delims, ':', '[', ']', '%').
func validHostHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-._~!$&'()*+,;=:[]%", c) >= 0) {
			return false
		}
	}
	return true
}

// peekHeader waits until br's buffer holds a whole header block (up to and
// including the empty line) and returns it, without consuming it.
func peekHeader(br *bufio.Reader) ([]byte, error) {
	from := 0
	for n := 1; ; {
		buf, err := br.Peek(n)
		if i := headerEnd(buf, from); i >= 0 {
			return buf[:i], nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errHeaderTooLarge
		}
		if err != nil {
			if len(buf) == 0 {
				// Nothing of a request came: the client closed, or an idle
				// keep-alive connection timed out. Close without an answer.
				return nil, io.EOF
			}
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		from = max(0, len(buf)-2)
		n = len(buf) + 1
		if n > br.Size() {
			return nil, errHeaderTooLarge
		}
	}
}

// headerEnd returns the end of the header block in buf (after "\n\r\n" or
// "\n\n", the forms textproto accepts), searching from from, or -1.
func headerEnd(buf []byte, from int) int {
	for i := from; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		if i+1 < len(buf) && buf[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// plainHTTP forwards one plain HTTP request (absolute form) and its response.
// It returns whether the client connection may serve another request.
func (b *Box) plainHTTP(c net.Conn, req *http.Request, hostHdr []string) (keep bool) {
	start := time.Now()
	if !req.URL.IsAbs() || req.URL.Host == "" {
		writeError(c, http.StatusBadRequest, "moat: this is moat's egress proxy, not a web server: "+
			"send requests in absolute form (GET http://host/path), as clients do when HTTP_PROXY is set, "+
			"or use CONNECT for https\n")
		return false
	}
	if req.URL.Scheme != "http" {
		writeError(c, http.StatusBadRequest, fmt.Sprintf("moat: %q URLs cannot go through as plain requests; "+
			"https goes through CONNECT (set HTTPS_PROXY)\n", req.URL.Scheme))
		return false
	}
	ev := Event{Time: start, Kind: "http"}
	host, port, ok := splitHost(req.URL.Host, 80)
	if !ok {
		ev.Host, ev.Port = clip(req.URL.Host), 80
		b.refuse(c, &ev, "not a valid host name")
		return false
	}
	ev.Host, ev.Port = host, port
	for _, h := range hostHdr {
		hh, hp, ok := splitHost(h, 80)
		if !ok || hh != host || hp != port {
			b.refuse(c, &ev, fmt.Sprintf("Host header names %q but the request is for %s", clip(h), hostPort(host, port)))
			return false
		}
	}
	addrs, refusal, err := b.admit(host, port)
	if refusal != "" {
		b.refuse(c, &ev, refusal)
		return false
	}
	if err != nil {
		b.fail(c, &ev, http.StatusBadGateway, err)
		return false
	}
	raw, addr, refusal, err := b.dialOut(addrs)
	ev.Addr = addr
	if refusal != "" {
		b.refuse(c, &ev, refusal)
		return false
	}
	if err != nil {
		b.fail(c, &ev, http.StatusBadGateway, err)
		return false
	}
	defer b.untrack(raw)
	defer raw.Close()
	cc := &countConn{Conn: raw, b: b}

	// One upstream connection per request: simpler than a pool, and each
	// request is judged and counted on its own anyway.
	clientClose := req.Close
	req.Close = true
	ev.Secrets = b.prepare(c, req, host, port, 80)
	keep, err = b.exchange(c, newUpstream(cc), req, host, port, clientClose, false)
	ev.BytesOut, ev.BytesIn = cc.out.Load(), cc.in.Load()
	ev.Duration = time.Since(start)
	ev.Allowed = true
	if err != nil {
		ev.Error = b.errorText(err)
	}
	b.emit(ev)
	return keep
}

// prepare makes a request from the box ready to go upstream: the headers that
// concern only this hop go, the secrets for host:port are substituted, and the
// Host header is set to the destination. It returns the names of the
// substituted secrets. An "Expect: 100-continue" is answered here (the proxy
// reads the whole body anyway), so the client need not wait for upstream.
func (b *Box) prepare(c io.Writer, req *http.Request, host string, port, defPort uint16) (secrets []string) {
	removeHopByHop(req.Header)
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		req.Header.Del("Expect")
		if req.ContentLength != 0 {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		}
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // keep Request.Write from adding Go's
	}
	req.Host = host
	if strings.Contains(host, ":") {
		req.Host = "[" + host + "]"
	}
	if port != defPort {
		req.Host = hostPort(host, port)
	}
	req.RequestURI = ""
	return substitute(req.Header, b.pol.secretsFor(host, port))
}

// upstream is the server side of an exchange: where requests are written and
// responses read, kept across the requests of an intercepted tunnel.
type upstream struct {
	w  io.Writer
	lr *capReader
	br *bufio.Reader
}

// newUpstream wraps rw, the connection to the server (counted, or TLS over a
// counted one).
func newUpstream(rw io.ReadWriter) *upstream {
	lr := &capReader{r: rw, n: -1}
	return &upstream{w: rw, lr: lr, br: bufio.NewReader(lr)}
}

// exchange sends req on up and relays the response to the client c. It returns
// whether the client connection may serve another request: not when
// clientClose is set, when the response had to be delimited by closing, when
// the server closes an upstream connection meant for reuse (reuseUp), or when
// anything failed. A failure before the response began is answered with
// 502.
func (b *Box) exchange(c net.Conn, up *upstream, req *http.Request, host string, port uint16, clientClose, reuseUp bool) (keep bool, err error) {
	subs := b.pol.secretsFor(host, port)
	if err := req.Write(up.w); err != nil {
		writeError(c, http.StatusBadGateway, fmt.Sprintf("moat: egress to %s failed: could not send the request\n", hostPort(host, port)))
		return false, fmt.Errorf("send request: %w", err)
	}
	up.lr.n = maxRespHeaderBytes
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(up.br, req)
		if err != nil {
			writeError(c, http.StatusBadGateway, fmt.Sprintf("moat: egress to %s failed: no valid response from the server\n", hostPort(host, port)))
			return false, fmt.Errorf("read response: %w", err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 1xx (103 Early Hints, say): relay and read on.
		removeHopByHop(resp.Header)
		resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
		if err := resp.Write(c); err != nil {
			return false, err
		}
	}
	up.lr.n = -1
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The Upgrade header was removed, so the server must not switch.
		writeError(c, http.StatusBadGateway, "moat: the server switched protocols, which the proxy does not relay\n")
		return false, errors.New("unexpected 101 Switching Protocols")
	}
	removeHopByHop(resp.Header)
	unsubstitute(resp.Header, subs)
	// The proxy speaks HTTP/1.1 to the box whatever the server spoke, and
	// delimits a body of unknown length by chunking where it can, so the
	// client connection can stay open.
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Close = clientClose || reuseUp && resp.Close
	if resp.ContentLength < 0 && req.Method != http.MethodHead && bodyAllowed(resp.StatusCode) {
		if req.ProtoAtLeast(1, 1) {
			resp.TransferEncoding = []string{"chunked"}
		} else {
			resp.TransferEncoding = nil
			resp.Close = true
		}
	}
	cw := bufio.NewWriter(c)
	// Flush to the box whenever reading the body would wait on the server, so
	// streamed responses (server-sent events) are not held back.
	resp.Body = &flushBeforeBlock{r: resp.Body, avail: up.br.Buffered, w: cw}
	if err := resp.Write(writerOnly{cw}); err != nil {
		return false, fmt.Errorf("relay response: %w", err)
	}
	if err := cw.Flush(); err != nil {
		return false, fmt.Errorf("relay response: %w", err)
	}
	return !resp.Close, nil
}

// hopByHop are the headers that concern one connection only (RFC 9110 section
// 7.6.1), not to be forwarded. Proxy-* headers go too (see removeHopByHop).
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers, those that Connection names,
// and every Proxy-* header (credentials for this proxy are not the server's
// business).
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "Proxy-") {
			delete(h, name)
		}
	}
}

// substitute replaces the placeholders of subs with their values in every
// header value, and inside "Authorization: Basic" credentials (where the
// placeholder is base64-encoded, as git and curl -u send it). It returns the
// Env names of the secrets it substituted.
func substitute(h http.Header, subs []*Secret) (used []string) {
	for _, s := range subs {
		found := false
		for name, vs := range h {
			for i, v := range vs {
				if strings.Contains(v, s.Placeholder) {
					vs[i] = strings.ReplaceAll(v, s.Placeholder, s.Value)
					found = true
				}
				if name == "Authorization" {
					if nv, ok := substituteBasic(vs[i], s); ok {
						vs[i] = nv
						found = true
					}
				}
			}
		}
		if found {
			used = append(used, s.Env)
		}
	}
	return used
}

// substituteBasic substitutes s in Basic credentials, if they hold its
// placeholder.
func substituteBasic(v string, s *Secret) (string, bool) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return "", false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil || !bytes.Contains(dec, []byte(s.Placeholder)) {
		return "", false
	}
	dec = bytes.ReplaceAll(dec, []byte(s.Placeholder), []byte(s.Value))
	return scheme + " " + base64.StdEncoding.EncodeToString(dec), true
}

// unsubstitute replaces the values of subs with their placeholders in response
// headers, so a server that echoes a credential (in a redirect URL, say) does
// not hand it to the box. Response bodies are not rewritten.
func unsubstitute(h http.Header, subs []*Secret) {
	for _, s := range subs {
		for _, vs := range h {
			for i, v := range vs {
				vs[i] = strings.ReplaceAll(v, s.Value, s.Placeholder)
			}
		}
	}
}

// splitHost splits "host[:port]" as found in a URL or a Host header ("[v6]"
// or "[v6]:port" for IPv6), with defPort when there is no port, and returns the
// host in canonical form.
func splitHost(s string, defPort uint16) (host string, port uint16, ok bool) {
	h, p := s, ""
	if rest, isV6 := strings.CutPrefix(s, "["); isV6 {
		var after string
		h, after, ok = strings.Cut(rest, "]")
		if a, err := netip.ParseAddr(h); !ok || err != nil || !a.Is6() {
			return "", 0, false
		}
		if after != "" {
			if p, ok = strings.CutPrefix(after, ":"); !ok {
				return "", 0, false
			}
		}
	} else {
		switch strings.Count(s, ":") {
		case 0:
		case 1:
			h, p, _ = strings.Cut(s, ":")
		default:
			return "", 0, false // IPv6 must be in brackets here
		}
	}
	port = defPort
	if p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return "", 0, false
		}
		port = uint16(n)
	}
	if port == 0 {
		return "", 0, false
	}
	host, ok = canonHost(h)
	return host, port, ok
}

// refuse answers a refused request with 403 and reports it. The connection must
// be closed after.
func (b *Box) refuse(c net.Conn, ev *Event, reason string) {
	ev.Allowed = false
	ev.Reason = reason
	ev.Duration = time.Since(ev.Time)
	b.emit(*ev)
	writeRefusal(c, hostPort(ev.Host, ev.Port), b.scrub(reason))
}

// writeRefusal writes moat's refusal: 403, a one-line text body saying what
// was refused and why, and X-Moat-Egress: refused for programs.
// The status line's reason phrase says it too: many clients (pip, urllib3,
// requests) show that phrase and not the body.
func writeRefusal(w io.Writer, dest, reason string) {
	body := "moat: egress to " + dest + " refused: " + reason + "\n"
	writeResponse(w, http.StatusForbidden, reasonPhrase("Forbidden by moat: egress to "+dest+" refused: "+reason), "refused", body)
}

// reasonPhrase makes s safe for a status line: printable ASCII, at most 200 bytes.
func reasonPhrase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b[:min(len(b), 200)])
}

// fail answers an allowed request that could not be served (the name did not
// resolve, the connection failed) and reports it.
func (b *Box) fail(c net.Conn, ev *Event, status int, err error) {
	ev.Allowed = true
	ev.Error = b.errorText(err)
	ev.Duration = time.Since(ev.Time)
	b.emit(*ev)
	writeError(c, status, "moat: egress to "+hostPort(ev.Host, ev.Port)+" failed: "+ev.Error+"\n")
}

// errorText describes err for an event and the box, secrets scrubbed.
func (b *Box) errorText(err error) string {
	if errors.Is(err, errCut) || b.cutReason() != "" && errors.Is(err, net.ErrClosed) {
		return "cut off: " + b.cutReason()
	}
	if b.ctx.Err() != nil {
		return "closed with the box"
	}
	return b.scrub(err.Error())
}

// writeError writes an error answer of moat itself and asks to close.
func writeError(w io.Writer, status int, body string) {
	writeResponse(w, status, http.StatusText(status), "error", body)
}

// writeResponse writes a complete short response that closes the connection,
// giving up after writeTimeout if the box does not read.
func writeResponse(w io.Writer, status int, phrase, kind, body string) {
	if c, ok := w.(net.Conn); ok {
		c.SetWriteDeadline(time.Now().Add(writeTimeout))
		defer c.SetWriteDeadline(time.Time{})
	}
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"X-Moat-Egress: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, phrase, kind, len(body), body)
}

// maxClip is the most of a string from the box that goes into an Event.
const maxClip = 256

// clip shortens a string from the box (an invalid host, a Host header) for an
// Event, so a box cannot make audit records of 64 KiB.
func clip(s string) string {
	if len(s) <= maxClip {
		return s
	}
	return s[:maxClip] + "..."
}

// bodyAllowed reports whether a response with this status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// capReader reads at most n bytes from r while n >= 0 and then reports EOF;
// n < 0 lifts the cap. It bounds a response header: set n before, -1 after.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n == 0 {
		return 0, errors.New("response header too large")
	}
	if c.n > 0 && int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	if c.n > 0 {
		c.n -= int64(n)
	}
	return n, err
}

// flushBeforeBlock flushes w before each read of r that would have to wait for
// the network (when avail reports nothing buffered).
type flushBeforeBlock struct {
	r     io.ReadCloser
	avail func() int
	w     *bufio.Writer
}

func (f *flushBeforeBlock) Read(p []byte) (int, error) {
	if f.avail() == 0 && f.w.Buffered() > 0 {
		if err := f.w.Flush(); err != nil {
			return 0, err
		}
	}
	return f.r.Read(p)
}

func (f *flushBeforeBlock) Close() error { return f.r.Close() }

// writerOnly hides the ReadFrom of a bufio.Writer, so io.Copy reads the body
// through its own buffer and flushBeforeBlock may flush between reads.
type writerOnly struct{ io.Writer }

// Package egress is moat's egress proxy: the only way out of a box.
//
// A box's network namespace holds nothing but loopback. Inside it, moat's init
// listens on 127.0.0.1:3128 (TCP, the proxy) and 127.0.0.1:53 (UDP, DNS) and
// hands both sockets to the moat server, which serves them with this package:
//
//	box (own netns, lo only)                     moat server (host netns)
//	+--------------------------+   SCM_RIGHTS   +-------------------------------+
//	| code --HTTP_PROXY------> |  127.0.0.1:3128 listener --> Proxy.Attach      |
//	|      --resolv.conf-----> |  127.0.0.1:53  packet conn -->  |  policy,    |
//	|      --connect(1.2.3.4)  |  ENETUNREACH at once            |  resolve,   |
//	+--------------------------+                                 |  dial ----> the world
//	                                                             +---------------
//
// Code that ignores HTTP_PROXY gets no route (the kernel fails its connect at
// once); code that uses it gets moat's decision: a tunnel or a request relayed,
// or a 403 that says what was refused and why. Nothing is silently dropped and
// nothing hangs.
//
//	ca, _ := egress.NewCA()
//	proxy := egress.New(egress.Options{CA: ca, Log: log})
//	rules, err := egress.ParseRules("package_managers,api.example.com:443")
//	pol := &egress.Policy{Mode: egress.ModeAllowlist, Allow: rules}
//	if err := pol.Validate(); err != nil { ... }
//	box := proxy.Attach(pol, listener, dnsConn, func(e egress.Event) { audit(e) })
//	defer box.Close()
//
// # Threat model
//
// Everything that comes from a box is hostile: request lines, headers, CONNECT
// targets, TLS hellos, DNS packets, their sizes and their timing. The proxy
// runs in the moat server, outside every sandbox, so a bug here is a bug in
// the host: inputs are bounded (64 KiB of request header, 32 KiB of TLS hello,
// 1232-byte DNS queries), waits are bounded (30 s for a request header, 10 s
// for a hello once begun and for each TLS handshake), a panic in a handler is
// recovered and ends one connection only, and the parsing is done by the
// standard library (net/http, crypto/tls, x/net/dns/dnsmessage).
//
// What the proxy guarantees:
//
//   - Only allowed destinations are reached. Plain HTTP is judged per request
//     by the URL's host (and the Host header must agree); CONNECT by its target
//     and, when the client speaks TLS, by the SNI of its ClientHello, which must
//     name the same host (or none); DNS answers only allowed names.
//   - The address dialled is the address checked. The proxy resolves the name
//     itself (Policy.Hosts first), drops the addresses in refused ranges
//     (loopback, private, link-local, CGNAT, cloud metadata, ..., and the host's
//     own addresses; see Refused)
//     and dials one of the rest, so a name that resolves to 127.0.0.1 or
//     169.254.169.254 (DNS rebinding, SSRF) reaches nothing. Only an allow rule
//     naming the address with its port, "127.0.0.1:8080", opens such an
//     address, and only on that port.
//   - Secret values never enter the box. The box holds placeholders; the proxy
//     swaps them for the real values in the request headers to the secret's
//     hosts only, over plain HTTP, or over HTTPS when a CA is configured
//     (interception: the box trusts CA.CertPEM, the proxy verifies the real
//     server). Values are scrubbed from error texts, events and logs, and put
//     back to placeholders in response headers. Over plain HTTP the value
//     crosses the network in clear text: give secrets rules with port 443.
//   - Limits hold: connections and bytes per box (Policy.Limits), refused with
//     403 once reached; passing a byte limit closes every connection of the box.
//   - Every decision is an Event: refusals at once, allowed connections and
//     requests when they end, with bytes and duration.
//
// What it does not do: it cannot see inside TLS it does not intercept, so
// domain fronting inside an allowed TLS session (SNI names the allowed host,
// the inner Host header another one on the same CDN) is not detected; the
// large CDNs refuse such requests. Response bodies are relayed as they are, so
// a secret's host that echoes the request (an echo service) shows the box the
// value: give secrets only for hosts that do not. Secrets are substituted in
// headers, not in URLs or bodies. Plain HTTP requests are relayed one per
// upstream connection (no pooling), without protocol upgrades (WebSocket goes
// over CONNECT). DNS is UDP only.
//
// # Plain HTTP
//
// A request in absolute form ("GET http://host:port/path") is checked, its
// hop-by-hop and Proxy-* headers removed, its secrets substituted, and sent
// in origin form over a fresh connection to the checked address; the response
// is streamed back (chunked when its length is unknown, flushed whenever the
// server pauses). The client connection serves further requests, each judged
// on its own. A request in origin form is answered 400: the client took the
// proxy for a web server.
//
// # CONNECT
//
// The target is admitted and dialled before the 200 answer, so a refusal is a
// 403 and a failure a 502, both immediate. The tunnel then relays bytes both
// ways (splice(2) between the two TCP sockets), except that the client's first
// bytes are examined: if they are a TLS ClientHello, crypto/tls parses it and
// its SNI must match the CONNECT host, or the tunnel is closed and the refusal
// reported. For a host that has secrets (and a CA), the tunnel is intercepted:
// TLS is terminated with a leaf certificate for the host, each request is read,
// checked to be for the same host, substituted and forwarded over a verified
// TLS connection to the server.
//
// # DNS
//
// A and AAAA queries for allowed names are answered with the permitted
// addresses (the same lookup and filter as the proxy's); names that are not
// allowed, or resolve only to refused addresses, get NXDOMAIN; other types of
// an allowed name get an empty answer. The answers are for the box's
// bookkeeping: it can connect only through the proxy anyway.
package egress

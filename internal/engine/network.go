package engine

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/egress"
)

// The network of an execution or session. A profile says what its code may reach
// (config network: none, allowlist, open); a request may ask for its own network:
//
//	""              the profile's
//	"none"          no network
//	"allow:H[:P],…" only these destinations (egress.ParseRules)
//	"open"          any public destination (config network.allow_open only)
//
// The operator at the CLI may name any allowlist; API and MCP callers may only
// narrow their profile's: every destination they ask for must be one the profile
// allows already, so a caller cannot give itself more network than its profile.
// A box with a network has moat's egress proxy as its only way out (box.Egress).

// CABundlePath is where a box with a network finds the certificates it trusts: the
// host's roots, network.upstream_ca, and the proxy's own CA (which signs the
// certificates of hosts whose secrets the proxy fills in).
const CABundlePath = "/.moat/ca-certificates.crt"

// hostCABundle is the host's bundle of trusted roots (Debian's path).
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// netPlan is the network of one box: its policy and what the box needs for it.
type netPlan struct {
	pol     *egress.Policy // nil: no network
	env     []string       // proxy variables and secret placeholders
	support []box.SupportFile
	// desc says what the box may reach, for the isolation list.
	desc string
}

// egressProxy is the engine's proxy, made at its first use.
type egressProxy struct {
	once   sync.Once
	proxy  *egress.Proxy
	bundle []byte // CABundlePath's content
	err    error
}

// proxy returns the engine's egress proxy and the boxes' CA bundle.
func (e *Engine) proxy() (*egress.Proxy, []byte, error) {
	p := &e.egress
	p.once.Do(func() {
		ca, err := egress.NewCA()
		if err != nil {
			p.err = fmt.Errorf("egress CA: %w", err)
			return
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		bundle, _ := os.ReadFile(hostCABundle) // a host without it trusts only what follows
		if f := e.cfg.Network.UpstreamCA; f != "" {
			pem, err := os.ReadFile(f)
			if err != nil {
				p.err = fmt.Errorf("network.upstream_ca: %w", err)
				return
			}
			if !roots.AppendCertsFromPEM(pem) {
				p.err = fmt.Errorf("network.upstream_ca: %s holds no PEM certificate", f)
				return
			}
			bundle = append(append(bundle, '\n'), pem...)
		}
		p.bundle = append(append(bundle, '\n'), ca.CertPEM()...)
		p.proxy = egress.New(egress.Options{CA: ca, UpstreamRoots: roots, Log: e.log})
	})
	return p.proxy, p.bundle, p.err
}

// network decides the network of a box for a profile and a request's network field.
func (e *Engine) network(profName string, prof config.Profile, asked string, c Caller) (*netPlan, error) {
	pn, err := e.cfg.ResolveNetwork(prof.Network)
	if err != nil {
		return nil, fmt.Errorf("%w: profile %s: %w", ErrBadRequest, profName, err)
	}
	local := c.FrontEnd == audit.FrontEndCLI
	mode, allow := pn.Mode, pn.Allow
	var rules []egress.Rule
	if asked != "" {
		if rules, err = ParseNetwork(asked); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	switch {
	case asked == "":
	case asked == config.NetworkNone:
		mode, allow = config.NetworkNone, nil
	case asked == config.NetworkOpen:
		if !e.cfg.Network.AllowOpen {
			return nil, fmt.Errorf("%w: network open is not enabled (set network.allow_open: true in the config)", ErrBadRequest)
		}
		if !local && pn.Mode != config.NetworkOpen {
			return nil, fmt.Errorf("%w: network open: profile %s does not allow it", ErrBadRequest, profName)
		}
		mode, allow = config.NetworkOpen, nil
	case strings.HasPrefix(asked, "allow:"):
		if !local {
			for _, r := range rules {
				if !covers(pn, r) {
					return nil, fmt.Errorf("%w: network: profile %s does not allow %s (a request may only narrow its profile's network)", ErrBadRequest, profName, r)
				}
			}
		}
		mode, allow = config.NetworkAllowlist, rules
	}
	if mode == config.NetworkNone {
		return &netPlan{}, nil
	}
	pol := &egress.Policy{Mode: egress.Mode(mode), Allow: allow, Limits: pn.Limits, Hosts: e.cfg.ResolvedHosts()}
	plan := &netPlan{pol: pol}
	for _, s := range pn.Secrets {
		value, ok := e.lookupEnv(s.FromEnv)
		if !ok || value == "" {
			return nil, fmt.Errorf("secret %s: moat's environment has no %s", s.Env, s.FromEnv)
		}
		ph := egress.NewPlaceholder()
		pol.Secrets = append(pol.Secrets, egress.Secret{Env: s.Env, Placeholder: ph, Value: value, Hosts: s.Hosts})
		plan.env = append(plan.env, s.Env+"="+ph)
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("%w: network: %w", ErrBadRequest, err)
	}
	_, bundle, err := e.proxy()
	if err != nil {
		return nil, err
	}
	// No NO_PROXY: the box's own loopback serves nothing but the proxy (Landlock
	// refuses other TCP binds and connects), and a loopback address the allowlist
	// names is the host's, reached through the proxy.
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		plan.env = append(plan.env, k+"="+box.EgressProxyURL)
	}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS"} {
		plan.env = append(plan.env, k+"="+CABundlePath)
	}
	plan.support = []box.SupportFile{{Path: CABundlePath, Data: bundle}}
	plan.desc = "egress_proxy:" + mode
	return plan, nil
}

// ParseNetwork checks the syntax of a request's network: none, open, or
// allow:HOST[:PORT],... (whose rules it returns). Whether the request may have it is
// for the engine to decide.
func ParseNetwork(s string) ([]egress.Rule, error) {
	switch {
	case s == config.NetworkNone, s == config.NetworkOpen:
		return nil, nil
	case strings.HasPrefix(s, "allow:"):
		rules, err := egress.ParseRules(strings.TrimPrefix(s, "allow:"))
		if err != nil {
			return nil, fmt.Errorf("network mode %q: %w", s, err)
		}
		return rules, nil
	}
	return nil, fmt.Errorf("network mode %q is not one of none, allow:HOST[:PORT],... or open", s)
}

// covers says whether the profile's network allows every destination rule r names.
func covers(pn config.ResolvedNetwork, r egress.Rule) bool {
	if pn.Mode == config.NetworkNone {
		return false
	}
	for _, a := range pn.Allow {
		if a.Port != 0 && a.Port != r.Port {
			continue
		}
		if a.Host == r.Host {
			return true
		}
		// *.example.com covers a.example.com and *.a.example.com.
		if suffix, ok := strings.CutPrefix(a.Host, "*"); ok && strings.HasSuffix(strings.TrimPrefix(r.Host, "*"), suffix) && strings.TrimPrefix(r.Host, "*") != suffix {
			return true
		}
	}
	if pn.Mode == config.NetworkOpen {
		// open covers public destinations; a named address in a refused range must
		// be in the profile's own list.
		if ip, err := netip.ParseAddr(r.Host); err == nil {
			_, refused := egress.Refused(ip)
			return !refused
		}
		return true
	}
	return false
}

// lookupEnv reads a variable of moat's own environment, as New was given it.
func (e *Engine) lookupEnv(name string) (string, bool) {
	for _, kv := range slices.Backward(e.environ) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// boxEgress is one box's way out: the engine's proxy serving the box's sockets
// under the box's policy. Its decisions go to the audit trail and the metrics, and
// its totals to the result.
type boxEgress struct {
	e      *Engine
	proxy  *egress.Proxy
	pol    *egress.Policy
	caller Caller
	// session is the session's id, for records of a session's box.
	session string

	mu      sync.Mutex
	served  *egress.Box
	closed  bool
	refused []box.EgressRefusal
}

// newBoxEgress returns the box.Egress of a plan with a network, or nil.
func (e *Engine) newBoxEgress(plan *netPlan, c Caller, session string) (*boxEgress, error) {
	if plan.pol == nil {
		return nil, nil
	}
	p, _, err := e.proxy()
	if err != nil {
		return nil, err
	}
	return &boxEgress{e: e, proxy: p, pol: plan.pol, caller: c, session: session}, nil
}

// setSession names the session the box serves, for the records of its traffic.
func (b *boxEgress) setSession(id string) {
	b.mu.Lock()
	b.session = id
	b.mu.Unlock()
}

// Serve implements box.Egress.
func (b *boxEgress) Serve(l net.Listener, dns net.PacketConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.served != nil {
		l.Close()
		dns.Close()
		return
	}
	b.served = b.proxy.Attach(b.pol, l, dns, b.event)
}

// Close implements box.Egress.
func (b *boxEgress) Close() {
	b.mu.Lock()
	served, first := b.served, !b.closed
	b.closed = true
	b.mu.Unlock()
	if served == nil {
		return
	}
	st := served.Close() // idempotent
	if a := b.e.audit; a != nil && first {
		// The box's totals, once: an intercepted tunnel's requests are events of
		// their own whose bytes the tunnel's event counts too.
		a.m.EgressBytes(st.BytesOut, st.BytesIn)
	}
}

// maxRefusals bounds the refusals a result lists, and keptRefusals those a box
// keeps (a session's calls list theirs from it).
const (
	maxRefusals  = 16
	keptRefusals = 1024
)

// event records one decision of the proxy.
func (b *boxEgress) event(ev egress.Event) {
	dest := ev.Host // a DNS lookup has no port
	if ev.Port != 0 {
		dest = net.JoinHostPort(ev.Host, fmt.Sprint(ev.Port))
	}
	if !ev.Allowed {
		b.mu.Lock()
		if len(b.refused) < keptRefusals {
			b.refused = append(b.refused, box.EgressRefusal{Dest: dest, Via: ev.Kind, Reason: ev.Reason})
		}
		b.mu.Unlock()
	}
	a := b.e.audit
	if a == nil {
		return
	}
	a.m.Egress(ev.Kind, ev.Allowed)
	if a.log == nil {
		return
	}
	b.mu.Lock()
	session := b.session
	b.mu.Unlock()
	rec := &audit.Record{
		Time: ev.Time, Kind: audit.KindEgress, RequestID: b.caller.RequestID, Principal: b.caller.Principal,
		FrontEnd: b.caller.FrontEnd, Remote: b.caller.Remote, Session: session, Backend: a.backend,
		Status: audit.StatusOK, Reason: ev.Reason, DurationMS: ev.Duration.Milliseconds(),
		Dest: dest, Via: ev.Kind, BytesOut: ev.BytesOut, BytesIn: ev.BytesIn,
	}
	if ev.Time.IsZero() {
		rec.Time = time.Now()
	}
	if !ev.Allowed {
		rec.Status = audit.StatusRefused
	}
	a.log.Append(rec)
}

// egressMark is a point in a box's traffic, for the usage of one session call.
type egressMark struct {
	st       egress.Stats
	refusals int
}

// mark returns the box's traffic so far.
func (b *boxEgress) mark() egressMark {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := egressMark{refusals: len(b.refused)}
	if b.served != nil {
		m.st = b.served.Stats() // its counters stay after Close
	}
	return m
}

// usage returns what crossed the proxy since from (the zero mark: since the box
// began), for a result.
func (b *boxEgress) usage(from egressMark) *box.EgressUsage {
	now := b.mark()
	u := &box.EgressUsage{
		Connections: now.st.Conns - from.st.Conns, Refused: now.st.Refused - from.st.Refused,
		BytesOut: now.st.BytesOut - from.st.BytesOut, BytesIn: now.st.BytesIn - from.st.BytesIn,
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if from.refusals < len(b.refused) {
		u.Refusals = slices.Clone(b.refused[from.refusals:min(len(b.refused), from.refusals+maxRefusals)])
	}
	return u
}

// NetworkSummary says in words what code under the profile may reach, for the
// descriptions of tools.
func (e *Engine) NetworkSummary(profile string) string {
	_, prof, err := e.profile(profile)
	if err != nil {
		return "no network"
	}
	pn, err := e.cfg.ResolveNetwork(prof.Network)
	if err != nil {
		return "no network"
	}
	switch pn.Mode {
	case config.NetworkOpen:
		return "network to public hosts only, through moat's egress proxy (HTTP_PROXY)"
	case config.NetworkAllowlist:
		names := make([]string, len(pn.Allow))
		for i, r := range pn.Allow {
			names[i] = r.String()
		}
		return "network only to " + strings.Join(names, ", ") + ", through moat's egress proxy (HTTP_PROXY; other destinations are refused at once)"
	}
	return "no network"
}

package egress

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	// maxDNSPacket bounds a query; longer datagrams are dropped. Real queries
	// are under 300 bytes.
	maxDNSPacket = 1232
	// maxDNSInFlight bounds the queries being answered at once; more are
	// dropped (the client retries).
	maxDNSInFlight = 32
	// maxDNSAnswers bounds the records of an answer, which keeps it under 512
	// bytes: no truncation, no TCP fallback.
	maxDNSAnswers = 16
	// dnsTTL is the TTL of the answers, short so policy changes apply soon.
	dnsTTL = 30
)

// serveDNS answers the box's DNS queries until the socket is closed. Only A
// and AAAA questions for allowed names get addresses, filtered like the
// proxy's (see Box.admit); other names get NXDOMAIN, so a box cannot use
// moat's resolver to reach, or leak data to, a name server it may not talk to.
func (b *Box) serveDNS() {
	defer b.wg.Done()
	buf := make([]byte, maxDNSPacket+1)
	sem := make(chan struct{}, maxDNSInFlight)
	for {
		n, from, err := b.dns.ReadFrom(buf)
		if err != nil {
			if b.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			b.log.Warn("egress: dns read", "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-b.ctx.Done():
				return
			}
			continue
		}
		if n > maxDNSPacket {
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		b.goTracked("dns query", func() {
			defer func() { <-sem }()
			if resp := b.answerDNS(q); resp != nil {
				b.dns.WriteTo(resp, from)
			}
		})
	}
}

// answerDNS returns the answer to the query q, or nil to drop it (malformed,
// not a query, more than one question).
func (b *Box) answerDNS(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	if h.OpCode != 0 || question.Class != dnsmessage.ClassINET {
		return dnsReply(h, question, dnsmessage.RCodeNotImplemented, nil)
	}

	ev := Event{Time: time.Now(), Kind: "dns"}
	name, ok := canonHost(strings.TrimSuffix(question.Name.String(), "."))
	ev.Host = name
	if !ok || isAddr(name) {
		ev.Host = question.Name.String()
		return b.dnsRefuse(&ev, h, question, "not a valid host name")
	}
	if why := b.refuseAll(); why != "" {
		return b.dnsRefuse(&ev, h, question, why)
	}
	if ok, why := b.pol.nameAllowed(name); !ok {
		return b.dnsRefuse(&ev, h, question, why)
	}
	var want func(netip.Addr) bool
	switch question.Type {
	case dnsmessage.TypeA:
		want = netip.Addr.Is4
	case dnsmessage.TypeAAAA:
		want = netip.Addr.Is6
	default:
		// MX, TXT, HTTPS...: the name exists, but moat answers addresses only.
		ev.Allowed = true
		b.emit(ev)
		return dnsReply(h, question, dnsmessage.RCodeSuccess, nil)
	}
	addrs, err := b.lookup(name)
	if err != nil {
		ev.Allowed = true
		ev.Error = "could not resolve: " + err.Error()
		ev.Duration = time.Since(ev.Time)
		b.emit(ev)
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return dnsReply(h, question, dnsmessage.RCodeNameError, nil)
		}
		return dnsReply(h, question, dnsmessage.RCodeServerFailure, nil)
	}
	var answers []netip.Addr
	permitted := 0
	refused := ""
	for _, a := range addrs {
		if ok, why := b.pol.addrAllowed(a, 0); !ok {
			if refused == "" {
				refused = a.String() + " is " + article(why) + " address"
			}
			continue
		}
		permitted++
		if want(a) && len(answers) < maxDNSAnswers {
			answers = append(answers, a)
		}
	}
	if permitted == 0 && refused != "" {
		return b.dnsRefuse(&ev, h, question, name+" resolves only to addresses moat refuses ("+refused+")")
	}
	ev.Allowed = true
	ev.Duration = time.Since(ev.Time)
	b.emit(ev)
	return dnsReply(h, question, dnsmessage.RCodeSuccess, answers)
}

// isAddr reports whether s is an IP literal.
func isAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// dnsRefuse reports a refused query and answers NXDOMAIN.
func (b *Box) dnsRefuse(ev *Event, h dnsmessage.Header, q dnsmessage.Question, reason string) []byte {
	ev.Reason = reason
	ev.Duration = time.Since(ev.Time)
	b.emit(*ev)
	return dnsReply(h, q, dnsmessage.RCodeNameError, nil)
}

// dnsReply builds the answer to the query with header h and question q.
func dnsReply(h dnsmessage.Header, q dnsmessage.Question, rcode dnsmessage.RCode, addrs []netip.Addr) []byte {
	bld := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              rcode,
	})
	bld.EnableCompression()
	// The builder fails only on misuse (sections out of order), which would
	// be a bug here; an unanswered query is then retried by the client.
	if bld.StartQuestions() != nil || bld.Question(q) != nil || bld.StartAnswers() != nil {
		return nil
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
	for _, a := range addrs {
		var err error
		if a.Is4() {
			err = bld.AResource(rh, dnsmessage.AResource{A: a.As4()})
		} else {
			err = bld.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil
		}
	}
	msg, err := bld.Finish()
	if err != nil {
		return nil
	}
	return msg
}

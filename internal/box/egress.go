package box

import (
	"fmt"
	"net"
)

// Network modes (Spec.Network, SessionSpec.Network).
const (
	// NetworkNone: the box has an empty network namespace, loopback only.
	NetworkNone = "none"
	// NetworkEgress: the box's only way out is moat's egress proxy (Spec.Egress),
	// reached on EgressProxyAddr inside the box, with DNS answered on EgressDNSAddr.
	// Every other destination has no route.
	NetworkEgress = "egress"
)

// Inside a box with NetworkEgress, the proxy listens on EgressProxyAddr (TCP) and
// DNS is answered on EgressDNSAddr (UDP). Both sockets are made by the box's init in
// the box's own network namespace and served by the engine (Egress.Serve).
const (
	EgressProxyAddr = "127.0.0.1:3128"
	EgressProxyPort = 3128
	EgressProxyURL  = "http://" + EgressProxyAddr
	EgressDNSAddr   = "127.0.0.1:53"
)

// Egress is a box's way out to the network: the engine's proxy, which decides every
// connection the box asks for. The backend makes the sockets inside the box's network
// namespace, before the code starts, and hands them over once; it calls Close when
// the box is gone.
type Egress interface {
	// Serve takes the box's proxy listener and DNS socket and serves them, without
	// blocking, until Close.
	Serve(proxy net.Listener, dns net.PacketConn)
	// Close stops serving and closes both sockets. It is safe to call more than once,
	// and before Serve.
	Close()
}

// CheckNetwork checks a spec's network mode against its Egress.
func CheckNetwork(mode string, eg Egress) error {
	switch mode {
	case "", NetworkNone:
		if eg != nil {
			return fmt.Errorf("network mode none takes no egress")
		}
		return nil
	case NetworkEgress:
		if eg == nil {
			return fmt.Errorf("network mode egress needs the engine's egress proxy")
		}
		return nil
	}
	return fmt.Errorf("unknown network mode %q", mode)
}

package native

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// echoEgress stands in for the engine's proxy: it answers each proxy connection with
// "proxy saw: " and the line it read, and each DNS datagram with "dns saw: " and it.
type echoEgress struct {
	served chan struct{}
	mu     sync.Mutex
	l      net.Listener
	pc     net.PacketConn
	closed bool
}

func (e *echoEgress) Serve(l net.Listener, pc net.PacketConn) {
	e.mu.Lock()
	e.l, e.pc = l, pc
	e.mu.Unlock()
	close(e.served)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("proxy saw: " + line))
			}()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("dns saw: "), buf[:n]...), from)
		}
	}()
}

func (e *echoEgress) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.l != nil {
		e.l.Close()
		e.pc.Close()
	}
}

// TestEgressSocketsReachTheHost: in a box with egress, the code reaches the proxy and
// DNS sockets that the host serves, and nothing else: a direct connect to any other
// address fails at once, and a listener on the host's loopback hears nothing.
func TestEgressSocketsReachTheHost(t *testing.T) {
	testutil.RequireRoot(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	heard := make(chan struct{}, 1)
	go func() {
		if c, err := host.Accept(); err == nil {
			heard <- struct{}{}
			c.Close()
		}
	}()
	port := host.Addr().(*net.TCPAddr).Port
	code := `
import socket, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"hello\n")
print(s.makefile().readline().strip())
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
d.settimeout(5)
d.sendto(b"query", ("127.0.0.1", 53))
print(d.recvfrom(100)[0].decode())
print(open("/etc/resolv.conf").read().split()[0:2])
import errno
for addr in [("127.0.0.1", PORT), ("10.1.2.3", 3128), ("1.1.1.1", 443)]:
    t = time.monotonic()
    try:
        socket.create_connection(addr, timeout=5)
        print(addr, "connected")
    except OSError as e:
        # Landlock refuses other ports (EACCES); the network namespace has no
        # route to anything but its loopback (ENETUNREACH).
        ok = e.errno in (errno.EACCES, errno.ECONNREFUSED, errno.ENETUNREACH)
        print(addr[0], errno.errorcode.get(e.errno) if addr[1] == 3128 else ok, "fast" if time.monotonic() - t < 0.5 else "slow")
`
	code = strings.Replace(code, "PORT", strconv.Itoa(port), 1)
	eg := &echoEgress{served: make(chan struct{})}
	res, err := (&Backend{}).Run(context.Background(), &box.Spec{
		Language: "python", Code: []byte(code), Network: box.NetworkEgress, Egress: eg,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "proxy saw: hello\ndns saw: query\n['nameserver', '127.0.0.1']\n" +
		"127.0.0.1 True fast\n10.1.2.3 ENETUNREACH fast\n1.1.1.1 True fast\n"
	if res.Status != box.StatusOK || res.Stdout != want {
		t.Fatalf("status %s, stdout:\n%s\nwant:\n%s\nstderr: %s", res.Status, res.Stdout, want, res.Stderr)
	}
	select {
	case <-heard:
		t.Fatal("the host's loopback listener was reached from the box")
	case <-time.After(100 * time.Millisecond):
	}
	eg.mu.Lock()
	closed := eg.closed
	eg.mu.Unlock()
	if !closed {
		t.Fatal("the backend did not close the box's egress")
	}
}

// TestNoEgressWithoutIt: a box without egress has no proxy socket and no resolver.
func TestNoEgressWithoutIt(t *testing.T) {
	testutil.RequireRoot(t)
	code := `
import socket
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=2)
    print("connected")
except OSError as e:
    print(type(e).__name__)
print(repr(open("/etc/resolv.conf").read()))
`
	res, err := (&Backend{}).Run(context.Background(), &box.Spec{Language: "python", Code: []byte(code)})
	if err != nil {
		t.Fatal(err)
	}
	// Landlock (ABI 4+) refuses the connect before the empty loopback can.
	if got := res.Stdout; got != "PermissionError\n''\n" && got != "ConnectionRefusedError\n''\n" {
		t.Fatalf("stdout %q, stderr %s", got, res.Stderr)
	}
	if err := box.CheckNetwork(box.NetworkEgress, nil); err == nil {
		t.Fatal("egress mode without an Egress was accepted")
	}
}

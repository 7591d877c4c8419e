package native

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// A box with egress (box.NetworkEgress) has an empty network namespace like every
// box, but its init makes two sockets in it before the code starts: the proxy's
// listener on box.EgressProxyAddr and the DNS socket on box.EgressDNSAddr. It passes
// both to the parent over a socket pair of their own (SCM_RIGHTS) and closes its
// copies; the parent serves them (box.Egress). A socket works wherever its fd goes,
// so the engine's proxy accepts the box's connections in the host's process while
// the box itself keeps no route to anything but its loopback.

// sendEgressSockets makes the proxy and DNS sockets in the box's network namespace
// and sends them to the parent on fd. Init holds them no longer than that.
func sendEgressSockets(fd int) error {
	defer unix.Close(fd)
	lo := [4]byte{127, 0, 0, 1}
	tcp, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket(tcp)", err)
	}
	defer unix.Close(tcp)
	if err := unix.Bind(tcp, &unix.SockaddrInet4{Addr: lo, Port: box.EgressProxyPort}); err != nil {
		return os.NewSyscallError("bind "+box.EgressProxyAddr, err)
	}
	if err := unix.Listen(tcp, 128); err != nil {
		return os.NewSyscallError("listen", err)
	}
	udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket(udp)", err)
	}
	defer unix.Close(udp)
	if err := unix.Bind(udp, &unix.SockaddrInet4{Addr: lo, Port: 53}); err != nil {
		return os.NewSyscallError("bind "+box.EgressDNSAddr, err)
	}
	if err := unix.Sendmsg(fd, []byte("egress"), unix.UnixRights(tcp, udp), nil, 0); err != nil {
		return os.NewSyscallError("sendmsg", err)
	}
	return nil
}

// receiveEgress waits for the box's egress sockets on sock and hands them to eg. It
// returns when they came, or when init ended without sending them (an error, which
// the box's own failure explains). It closes sock.
func receiveEgress(sock *os.File, eg box.Egress) error {
	defer sock.Close()
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("recvmsg", err)
	}
	fds, err := rightsIn(oob[:oobn])
	if err != nil {
		return err
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "egress")
	}
	defer func() {
		for _, f := range files {
			f.Close() // net.FileListener and FilePacketConn hold their own copies
		}
	}()
	if string(buf[:n]) != "egress" || len(files) != 2 {
		return fmt.Errorf("egress: init sent %q with %d sockets", buf[:n], len(files))
	}
	l, err := net.FileListener(files[0])
	if err != nil {
		return fmt.Errorf("egress: proxy listener: %w", err)
	}
	pc, err := net.FilePacketConn(files[1])
	if err != nil {
		l.Close()
		return fmt.Errorf("egress: DNS socket: %w", err)
	}
	eg.Serve(l, pc)
	return nil
}

// rightsIn returns the fds of an SCM_RIGHTS control message.
func rightsIn(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("egress: control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		r, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("egress: control message: %w", err)
		}
		fds = append(fds, r...)
	}
	return fds, nil
}

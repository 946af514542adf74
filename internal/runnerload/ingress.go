package runnerload

import (
	"net"
	"net/netip"
	"sync"
)

// sharedListener is the one TCP listener behind every sandbox's runner
// ingress: a listener per lease held two descriptors a session in this
// process (the listener and the connection), and 10,000 sessions would
// pass the 20,000 a process may open here. Each ingress has an address of
// its own on loopback (127.0.0.0/8 is all loopback on Linux) and the
// listener's port; the listener, on every address, hands a connection to
// the ingress its destination address names, so that an ingress's
// connections are still its own (the storm drops them, a lease's end
// closes them). A connection from anywhere but loopback is closed at
// once: the harness's traffic stays on loopback.
type sharedListener struct {
	l    net.Listener
	port uint16

	mu     sync.Mutex
	next   uint32
	byAddr map[netip.Addr]*ingressListener
}

func newSharedListener() (*sharedListener, error) {
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return nil, err
	}
	s := &sharedListener{l: l, port: uint16(l.Addr().(*net.TCPAddr).Port), byAddr: map[netip.Addr]*ingressListener{}}
	go s.serve()
	return s, nil
}

func (s *sharedListener) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		local, _ := netip.ParseAddrPort(c.LocalAddr().String())
		remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		s.mu.Lock()
		in := s.byAddr[local.Addr()]
		s.mu.Unlock()
		if !remote.Addr().IsLoopback() || in == nil {
			c.Close()
			continue
		}
		// Handed over apart, so that an ingress slow to accept holds up
		// no other's connections.
		go func() {
			select {
			case in.conns <- c:
			case <-in.done:
				c.Close()
			}
		}()
	}
}

// listener returns a new ingress listener on an address of its own.
func (s *sharedListener) listener() *ingressListener {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a netip.Addr
	for {
		s.next++
		n := s.next
		if b := byte(n); b == 0 || b == 255 {
			continue
		}
		a = netip.AddrFrom4([4]byte{127, byte(1 + n>>16), byte(n >> 8), byte(n)})
		break
	}
	in := &ingressListener{s: s, addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, s.port)), conns: make(chan net.Conn), done: make(chan struct{})}
	s.byAddr[a] = in
	return in
}

func (s *sharedListener) Close() error { return s.l.Close() }

// ingressListener is one sandbox's share of the sharedListener.
type ingressListener struct {
	s     *sharedListener
	addr  *net.TCPAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *ingressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *ingressListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.s.mu.Lock()
		delete(l.s.byAddr, l.addr.AddrPort().Addr())
		l.s.mu.Unlock()
	})
	return nil
}

func (l *ingressListener) Addr() net.Addr { return l.addr }

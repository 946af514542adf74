package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
	"github.com/berthdev/berth/errcode"
)

// The runner's architecture and its ingress, on both sides.
//
// A runner ingress through a plugin is the wrapped driver's ingress in
// the plugin's process (a unix socket bind-mounted into a container, an
// SSH forward): the plugin accepts each connection a runner makes to it
// and carries its bytes over one stream of the service RunnerBridge,
// which the host serves on go-plugin's broker for that ingress. On the
// host each stream is a net.Conn that the ingress's Accept returns, so
// the host serves its controller on it as on a compiled driver's ingress;
// the plugin knows nothing of the controller's protocol.

// dispensed is the client of one plugin process: the protocol's and the
// process's broker.
type dispensed struct {
	pluginpb.DriverClient
	broker *goplugin.GRPCBroker
	gp     *goplugin.Client // the process, set by start before the client is used
	out    *outSocket       // its output socket, set with gp; nil when the host could not make one
}

// exitPoll is how often an open runner ingress checks that its plugin
// process is alive: it is opened again through the next one once it is
// not.
const exitPoll = 200 * time.Millisecond

// runnerSpecToWire and runnerSpecFromWire carry a drivers.RunnerSpec.
func runnerSpecToWire(s *drivers.RunnerSpec) *pluginpb.RunnerSpec {
	if s == nil {
		return nil
	}
	return &pluginpb.RunnerSpec{Binary: s.Binary, Sha256: s.SHA256, Arch: s.Arch}
}

func runnerSpecFromWire(w *pluginpb.RunnerSpec) *drivers.RunnerSpec {
	if w == nil {
		return nil
	}
	return &drivers.RunnerSpec{Binary: w.GetBinary(), SHA256: w.GetSha256(), Arch: w.GetArch()}
}

// bridgeChunk bounds one Chunk of a bridged connection: 32 KiB less
// poolFit.
const bridgeChunk = 32<<10 - poolFit

// --- The plugin's side.

// srvIngress is an ingress the plugin opened for the host: the wrapped
// driver's, the broker connection its connections are bridged over, and
// the sandbox handle it belongs to (its release ends it).
type srvIngress struct {
	in     drivers.RunnerIngress
	handle uint64
	conn   *grpc.ClientConn
	ctx    context.Context // the bridged connections' life: until the sandbox's release
	cancel context.CancelFunc
	closed sync.Once
	wg     sync.WaitGroup // the accept loop and the bridged connections
}

// close closes the wrapped ingress (not its runner); the broker
// connection is closed once its bridged connections ended.
func (x *srvIngress) close() error {
	var err error
	x.closed.Do(func() {
		err = x.in.Close()
		go func() {
			x.wg.Wait()
			_ = x.conn.Close()
		}()
	})
	return err
}

// serve accepts the runners' connections until the ingress is closed and
// bridges each over a Connect stream of the host's RunnerBridge.
func (x *srvIngress) serve() {
	defer x.wg.Done()
	bridge := pluginpb.NewRunnerBridgeClient(x.conn)
	for {
		c, err := x.in.Accept()
		if err != nil {
			return
		}
		x.wg.Add(1)
		go func() {
			defer x.wg.Done()
			bridgeToHost(x.ctx, bridge, c)
		}()
	}
}

// bridgeToHost carries the connection c over one Connect stream until
// either side ends it.
func bridgeToHost(ctx context.Context, bridge pluginpb.RunnerBridgeClient, c net.Conn) {
	defer c.Close()
	st, err := bridge.Connect(ctx)
	if err != nil {
		return
	}
	go func() {
		buf := make([]byte, bridgeChunk)
		for {
			n, err := c.Read(buf)
			if n > 0 && st.Send(&pluginpb.Chunk{Data: append([]byte(nil), buf[:n]...)}) != nil {
				return
			}
			if err != nil {
				_ = st.CloseSend()
				return
			}
		}
	}()
	for {
		m, err := st.Recv()
		if err != nil {
			return
		}
		if _, err := c.Write(m.GetData()); err != nil {
			return
		}
	}
}

func (s *server) RunnerArch(ctx context.Context, r *pluginpb.ConfigRequest) (*pluginpb.TextReply, error) {
	ar, ok := s.d.(drivers.ArchReporter)
	if !ok {
		return &pluginpb.TextReply{Error: errorToWire(fmt.Errorf("runner architecture: %w", drivers.ErrUnsupported))}, nil
	}
	a, err := ar.RunnerArch(ctx, configFromWire(r.GetConfig()))
	return &pluginpb.TextReply{Text: a, Error: errorToWire(err)}, nil
}

func (s *server) HostRunner(ctx context.Context, r *pluginpb.HostRunnerRequest) (*pluginpb.HostRunnerReply, error) {
	fail := func(err error) (*pluginpb.HostRunnerReply, error) {
		return &pluginpb.HostRunnerReply{Error: errorToWire(err)}, nil
	}
	sb, err := s.sandbox(r.GetHandle())
	if err != nil {
		return fail(err)
	}
	rh, ok := sb.(drivers.RunnerHost)
	if !ok {
		return fail(fmt.Errorf("sandbox %q: capability %s: %w", sb.ID(), drivers.CapRunnerIngress, drivers.ErrUnsupported))
	}
	spec := runnerSpecFromWire(r.GetSpec())
	if spec == nil || s.broker == nil {
		return fail(fmt.Errorf("sandbox %q: host runner: protocol: no runner spec or no broker: %w", sb.ID(), drivers.ErrUnsupported))
	}
	conn, err := s.broker.DialWithOptions(r.GetBrokerId(), codecDialOptions()...)
	if err != nil {
		return fail(fmt.Errorf("sandbox %q: host runner: dial the host's bridge: %v: %w", sb.ID(), err, drivers.ErrUnavailable))
	}
	in, err := rh.HostRunner(ctx, *spec)
	if err != nil {
		_ = conn.Close()
		return fail(err)
	}
	bctx, cancel := context.WithCancel(context.Background())
	x := &srvIngress{in: in, handle: r.GetHandle(), conn: conn, ctx: bctx, cancel: cancel}
	s.mu.Lock()
	s.next++
	id := s.next
	if s.ingresses == nil {
		s.ingresses = map[uint64]*srvIngress{}
	}
	s.ingresses[id] = x
	s.mu.Unlock()
	x.wg.Add(1)
	go x.serve()
	return &pluginpb.HostRunnerReply{Ingress: id, Endpoint: in.Endpoint()}, nil
}

// ingress returns the ingress of id.
func (s *server) ingress(id uint64) (*srvIngress, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.ingresses[id]; ok {
		return x, nil
	}
	return nil, fmt.Errorf("runner ingress %d: no such ingress in this plugin process (its sandbox was released, or the plugin restarted): %w", id, drivers.ErrReleased)
}

// dropIngresses ends the ingresses of the sandbox handle h (released).
func (s *server) dropIngresses(h uint64) {
	s.mu.Lock()
	var drop []*srvIngress
	for id, x := range s.ingresses {
		if x.handle == h {
			drop = append(drop, x)
			delete(s.ingresses, id)
		}
	}
	s.mu.Unlock()
	for _, x := range drop {
		_ = x.close()
		x.cancel()
	}
}

func (s *server) RunnerLaunch(ctx context.Context, r *pluginpb.RunnerLaunchRequest) (*pluginpb.ErrorReply, error) {
	x, err := s.ingress(r.GetIngress())
	if err != nil {
		return &pluginpb.ErrorReply{Error: errorToWire(err)}, nil
	}
	err = x.in.Launch(ctx, drivers.RunnerLaunch{Lease: r.GetLease(), Ticket: r.GetTicket(), Env: r.GetEnv()})
	return &pluginpb.ErrorReply{Error: errorToWire(err)}, nil
}

func (s *server) RunnerLogTail(ctx context.Context, r *pluginpb.RunnerLogTailRequest) (*pluginpb.RunnerLogTailReply, error) {
	x, err := s.ingress(r.GetIngress())
	if err != nil {
		return &pluginpb.RunnerLogTailReply{Error: errorToWire(err)}, nil
	}
	b, err := x.in.LogTail(ctx, int(r.GetLimit()))
	return &pluginpb.RunnerLogTailReply{Data: b, Error: errorToWire(err)}, nil
}

func (s *server) RunnerClose(_ context.Context, r *pluginpb.RunnerIngressRequest) (*pluginpb.ErrorReply, error) {
	x, err := s.ingress(r.GetIngress())
	if err != nil {
		return &pluginpb.ErrorReply{Error: errorToWire(err)}, nil
	}
	if err := x.close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return &pluginpb.ErrorReply{Error: errorToWire(err)}, nil
	}
	return &pluginpb.ErrorReply{}, nil
}

// --- The host's side.

// archReporter gives the driver of a plugin whose driver reports its
// runners' architecture its drivers.ArchReporter.
type archReporter struct{ c *client }

// RunnerArch asks the plugin.
func (a archReporter) RunnerArch(ctx context.Context, cfg config.Config) (string, error) {
	rpc, err := a.c.conn(ctx)
	if err != nil {
		return "", err
	}
	r, err := rpc.RunnerArch(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	if err != nil {
		return "", a.c.callErr(ctx, "runner architecture", err)
	}
	return r.GetText(), errorFromWire(a.c.name(), r.GetError())
}

// runnerHost gives the sandbox of a plugin that declares runner_ingress
// its drivers.RunnerHost.
type runnerHost struct{ s *sandbox }

// HostRunner opens the ingress in the plugin, its connections bridged to
// the host over a RunnerBridge served on go-plugin's broker. When the
// plugin's process exits while the ingress is open, the ingress is opened
// again through the new process (see hostIngress.watch).
func (x runnerHost) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	s := x.s
	if s.released.Load() {
		return nil, fmt.Errorf("sandbox %q: host runner: %w", s.id, drivers.ErrReleased)
	}
	in := &hostIngress{s: s, spec: spec, conns: make(chan net.Conn), closed: make(chan struct{}), dead: make(chan struct{})}
	b, gp, err := in.open(ctx)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.b = b
	in.mu.Unlock()
	go in.watch(gp)
	s.inMu.Lock()
	s.ingresses = append(s.ingresses, in)
	s.inMu.Unlock()
	return in, nil
}

// open opens the ingress in the running plugin process (resuming the
// sandbox through it, when it is a new one) with a RunnerBridge served
// on its broker, and returns the bridge and the process.
func (in *hostIngress) open(ctx context.Context) (bridge, *goplugin.Client, error) {
	s := in.s
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return bridge{}, nil, err
	}
	d, ok := rpc.(*dispensed)
	if !ok || d.broker == nil {
		return bridge{}, nil, fmt.Errorf("sandbox %q: host runner: the plugin's connection has no broker: %w", s.id, drivers.ErrUnsupported)
	}
	id := d.broker.NextId()
	ln, err := d.broker.Accept(id)
	if err != nil {
		return bridge{}, nil, s.c.callErr(ctx, "host runner: broker", err)
	}
	srv := grpc.NewServer(append(codecServerOptions(), grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage))...)
	pluginpb.RegisterRunnerBridgeServer(srv, bridgeServer{in: in})
	go func() { _ = srv.Serve(ln) }()
	r, err := rpc.HostRunner(ctx, &pluginpb.HostRunnerRequest{Handle: handle, Spec: runnerSpecToWire(&in.spec), BrokerId: id})
	if err != nil {
		srv.Stop()
		return bridge{}, nil, s.c.callErr(ctx, "host runner", err)
	}
	if err := errorFromWire(s.c.name(), r.GetError()); err != nil {
		srv.Stop()
		return bridge{}, nil, err
	}
	return bridge{rpc: rpc, id: r.GetIngress(), endpoint: r.GetEndpoint(), srv: srv}, d.gp, nil
}

// endIngresses ends the sandbox's ingresses on the host once it is
// released (the plugin ended its side): their Accept fails as closed.
func (s *sandbox) endIngresses() {
	s.inMu.Lock()
	ins := s.ingresses
	s.ingresses = nil
	s.inMu.Unlock()
	for _, in := range ins {
		in.once.Do(func() {
			close(in.closed)
			in.current().srv.Stop()
		})
	}
}

// Reopening a runner ingress after its plugin exited waits reopenBackoff
// between attempts, doubled after each, at most maxReopenBackoff; an
// attempt has reopenTimeout.
const (
	reopenBackoff    = 100 * time.Millisecond
	maxReopenBackoff = 5 * time.Second
	reopenTimeout    = time.Minute
)

// watch follows the plugin process gp of the open ingress. When gp exits
// before the ingress is closed, it stops the bridge's server and opens
// the ingress again through the next process (the client starts it, after
// its crash backoff): the sandbox is resumed through it and its driver
// opens the ingress where it was, so a runner in the sandbox reconnects
// and Accept goes on returning its connections. When the ingress cannot
// be opened again (the driver does not resume, the sandbox is gone, the
// new process's handshake was refused, the host closed the plugin, or
// the endpoint moved, so the runner would not find it), Accept fails
// with code unavailable and the reason.
func (in *hostIngress) watch(gp *goplugin.Client) {
	if gp == nil {
		return
	}
	closes := in.s.c.closes.Load()
	t := time.NewTicker(exitPoll)
	defer t.Stop()
	for {
		select {
		case <-in.closed:
			return
		case <-t.C:
		}
		if !gp.Exited() {
			continue
		}
		in.current().srv.Stop()
		var err error
		if gp, err = in.reopen(closes); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			in.deadErr = err
			close(in.dead)
			return
		}
	}
}

// reopen opens the ingress through the plugin's next process, retrying
// while the plugin is in its restart backoff or fails in transport, and
// returns the new process; net.ErrClosed when the ingress was closed
// meanwhile. closes is the client's count of Close calls when the
// ingress was opened.
func (in *hostIngress) reopen(closes int64) (*goplugin.Client, error) {
	c := in.s.c
	if !c.caps.Declared.Has(drivers.CapReattach) {
		return nil, fmt.Errorf("the driver %q does not resume sandboxes (capability %s)", c.name(), drivers.CapReattach)
	}
	wait := reopenBackoff
	for {
		select {
		case <-in.closed:
			return nil, net.ErrClosed
		default:
		}
		if c.closes.Load() != closes {
			return nil, errors.New("the host closed the plugin")
		}
		if in.s.released.Load() {
			return nil, net.ErrClosed
		}
		ctx, cancel := context.WithTimeout(context.Background(), reopenTimeout)
		b, gp, err := in.open(ctx)
		cancel()
		if err == nil {
			if ep := in.Endpoint(); b.endpoint != ep {
				in.closeBridge(b)
				return nil, fmt.Errorf("the new process opened it at %q, not at %q, where the runner looks", b.endpoint, ep)
			}
			in.mu.Lock()
			select {
			case <-in.closed: // Close or a release came meanwhile: it closed the old bridge only
				in.mu.Unlock()
				in.closeBridge(b)
				return nil, net.ErrClosed
			default:
			}
			in.b = b
			in.mu.Unlock()
			return gp, nil
		}
		if errcode.Code(err) != errcode.Unavailable || c.Availability() != nil || errors.Is(err, drivers.ErrReleased) {
			return nil, err
		}
		select { // in the restart backoff, or the new process died too
		case <-in.closed:
			return nil, net.ErrClosed
		case <-time.After(wait):
		}
		wait = min(2*wait, maxReopenBackoff)
	}
}

// closeBridge closes the ingress of b in the plugin and stops b's server.
func (in *hostIngress) closeBridge(b bridge) {
	b.srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = b.rpc.RunnerClose(ctx, &pluginpb.RunnerIngressRequest{Ingress: b.id})
}

// hostIngress is the host's drivers.RunnerIngress of an ingress in the
// plugin: Accept returns each bridged connection, through whichever
// process of the plugin serves it now.
type hostIngress struct {
	s       *sandbox
	spec    drivers.RunnerSpec
	conns   chan net.Conn
	closed  chan struct{}
	dead    chan struct{} // closed when the ingress is lost: its plugin exited and it could not be opened again
	deadErr error         // why, set before dead is closed
	once    sync.Once

	mu sync.Mutex
	b  bridge // the ingress in the current process; its endpoint is the same through every process (reopen)
}

// bridge is an ingress opened in one process of the plugin: its id there
// and the RunnerBridge server the host serves for it on the broker.
type bridge struct {
	rpc      pluginpb.DriverClient
	id       uint64
	endpoint string
	srv      *grpc.Server
}

// current returns the bridge of the ingress in the current process.
func (in *hostIngress) current() bridge {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.b
}

// Accept returns the next connection a runner made to the ingress. When
// the plugin's process exits, Accept waits while the ingress is opened
// again through the new one; when that cannot be done it fails with code
// unavailable, saying why.
func (in *hostIngress) Accept() (net.Conn, error) {
	select {
	case c := <-in.conns:
		return c, nil
	case <-in.closed:
		return nil, fmt.Errorf("runner ingress of sandbox %q: %w", in.s.id, net.ErrClosed)
	case <-in.dead:
		return nil, &errcode.Error{Code: errcode.Unavailable, Target: "plugin " + in.s.c.p.Binary,
			Message: fmt.Sprintf("The plugin %s exited and the runner ingress of sandbox %s could not be opened again: release the lease, or attach to it again.", in.s.c.p.Binary, in.s.id),
			Err:     fmt.Errorf("runner ingress of sandbox %q: the plugin exited: %w; opening it again: %w", in.s.id, drivers.ErrUnavailable, in.deadErr)}
	}
}

// Close closes the ingress in the plugin (no new connection is bridged;
// those open go on until their ends) and stops no runner.
func (in *hostIngress) Close() error {
	var err error
	in.once.Do(func() {
		in.mu.Lock()
		close(in.closed)
		b := in.b
		in.mu.Unlock()
		go b.srv.GracefulStop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, cerr := b.rpc.RunnerClose(ctx, &pluginpb.RunnerIngressRequest{Ingress: b.id})
		if cerr != nil {
			err = in.s.c.callErr(ctx, "close the runner ingress", cerr)
			return
		}
		err = errorFromWire(in.s.c.name(), r.GetError())
	})
	return err
}

// Addr names the ingress by its endpoint in the sandbox.
func (in *hostIngress) Addr() net.Addr { return bridgeAddr(in.Endpoint()) }

// Endpoint returns the endpoint in the sandbox the plugin's driver gave.
func (in *hostIngress) Endpoint() string { return in.current().endpoint }

// Launch starts the runner through the plugin. The ticket crosses the
// boundary in the call only: neither side logs it.
func (in *hostIngress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	b := in.current()
	r, err := b.rpc.RunnerLaunch(ctx, &pluginpb.RunnerLaunchRequest{Ingress: b.id, Lease: req.Lease, Ticket: req.Ticket, Env: req.Env})
	if err != nil {
		return in.s.c.callErr(ctx, "launch the runner", err)
	}
	return errorFromWire(in.s.c.name(), r.GetError())
}

// LogTail returns the runner's log tail, read by the plugin.
func (in *hostIngress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	b := in.current()
	r, err := b.rpc.RunnerLogTail(ctx, &pluginpb.RunnerLogTailRequest{Ingress: b.id, Limit: int64(limit)})
	if err != nil {
		return nil, in.s.c.callErr(ctx, "runner log", err)
	}
	if err := errorFromWire(in.s.c.name(), r.GetError()); err != nil {
		return nil, err
	}
	return r.GetData(), nil
}

// bridgeAddr is the address of a bridged ingress and its connections.
type bridgeAddr string

func (a bridgeAddr) Network() string { return "berth-plugin" }
func (a bridgeAddr) String() string  { return string(a) }

// bridgeServer serves RunnerBridge for one ingress: each Connect stream
// is a connection Accept returns.
type bridgeServer struct {
	pluginpb.UnimplementedRunnerBridgeServer
	in *hostIngress
}

func (b bridgeServer) Connect(st pluginpb.RunnerBridge_ConnectServer) error {
	host, plug := net.Pipe()
	select {
	case b.in.conns <- &bridgedConn{Conn: host, addr: b.in.Addr()}:
	case <-b.in.closed:
		return errors.New("the runner ingress is closed")
	case <-st.Context().Done():
		return st.Context().Err()
	}
	defer plug.Close()
	go func() {
		defer plug.Close()
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			if _, err := plug.Write(m.GetData()); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, bridgeChunk)
	for {
		n, err := plug.Read(buf)
		if n > 0 {
			if serr := st.Send(&pluginpb.Chunk{Data: append([]byte(nil), buf[:n]...)}); serr != nil {
				return nil
			}
		}
		if err != nil { // the host closed the connection, or the plugin's side ended
			return nil
		}
	}
}

// bridgedConn is a bridged connection as the host sees it: its addresses
// name the ingress.
type bridgedConn struct {
	net.Conn
	addr net.Addr
}

func (c *bridgedConn) LocalAddr() net.Addr  { return c.addr }
func (c *bridgedConn) RemoteAddr() net.Addr { return c.addr }

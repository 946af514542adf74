package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
)

// protocolVersion is the version of the plugin protocol this package
// speaks (driver.proto), 1; a plugin and a host of different versions
// refuse each other, naming both.
const protocolVersion = 1

// handshake is go-plugin's handshake: the magic cookie keeps a plugin
// binary from serving when it is run by hand.
var handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  protocolVersion,
	MagicCookieKey:   "BERTH_PLUGIN",
	MagicCookieValue: "berth-driver-plugin",
}

// pluginName is the one plugin a berth plugin binary serves.
const pluginName = "driver"

// maxMessage bounds one message of the protocol either way (a bounded
// exec's stdin, its output): 256 MiB.
const maxMessage = 256 << 20

// window is gRPC's flow-control window of a stream and of the
// connection, both ways: 4 MiB, so that a stream's output on the local
// connection is not held up by its acknowledgements.
const window = 4 << 20

// ioBuffer is the size of gRPC's read and write buffers of the
// connection, both ways: 256 KiB (gRPC's default is 32 KiB), so that a
// stream's output crosses in a few large writes and reads instead of one
// per 32 KiB.
const ioBuffer = 256 << 10

// grpcPlugin is go-plugin's view of the driver plugin: the server side
// registers srv, the client side returns the protocol's client.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	srv *server
}

func (p *grpcPlugin) GRPCServer(b *goplugin.GRPCBroker, s *grpc.Server) error {
	p.srv.broker = b
	pluginpb.RegisterDriverServer(s, p.srv)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, b *goplugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &dispensed{DriverClient: pluginpb.NewDriverClient(cc), broker: b}, nil
}

// Serve serves d as a berth driver plugin of version version (the
// plugin's own version, as its manifest records it) and returns when the
// host ends the plugin. A plugin's main calls it and nothing else:
//
//	func main() { plugin.Serve(mydriver.New(), "1.0.0") }
//
// Run by hand rather than by a host, the binary says so and exits with
// status 1. The host sees of d's capabilities those that d declares,
// implements and the protocol carries (protocol version 1: exec,
// stream_exec, reuse, list, destroy_by_id, image_identity,
// template_capture, template_delete, terminal, files and runner_ingress),
// and d's drivers.ArchReporter and drivers.ImageLister when d implements
// them, so the conformance suite holds through the plugin.
func Serve(d drivers.Driver, version string) {
	srv := newServer(d, version)
	srv.out = outSenderFromEnv()
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins:         goplugin.PluginSet{pluginName: &grpcPlugin{srv: srv}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, codecServerOptions()...)
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
				grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
				grpc.WriteBufferSize(ioBuffer), grpc.ReadBufferSize(ioBuffer))...)
		},
	})
}

// server serves a driver over the protocol. Its sandboxes are kept by
// handle until their release succeeds.
type server struct {
	pluginpb.UnimplementedDriverServer
	d       drivers.Driver
	version string
	broker  *goplugin.GRPCBroker // the runner ingresses' connections go through it
	out     *outSender           // the output socket the host gave, or nil

	mu        sync.Mutex
	next      uint64 // of handles and ingresses
	handles   map[uint64]drivers.Sandbox
	ingresses map[uint64]*srvIngress
}

func newServer(d drivers.Driver, version string) *server {
	return &server{d: d, version: version, handles: map[uint64]drivers.Sandbox{}}
}

func (s *server) Describe(context.Context, *pluginpb.DescribeRequest) (*pluginpb.Description, error) {
	return describe(s.d, s.version), nil
}

func (s *server) Validate(_ context.Context, r *pluginpb.ConfigRequest) (*pluginpb.ErrorReply, error) {
	_, err := s.d.Schema().Normalize(configFromWire(r.GetConfig()))
	return &pluginpb.ErrorReply{Error: errorToWire(err)}, nil
}

func (s *server) ImageReference(_ context.Context, r *pluginpb.ConfigRequest) (*pluginpb.TextReply, error) {
	ref, err := s.d.Schema().Image(configFromWire(r.GetConfig()))
	return &pluginpb.TextReply{Text: ref.String(), Error: errorToWire(err)}, nil
}

func (s *server) NarrowedBy(_ context.Context, r *pluginpb.ConfigRequest) (*pluginpb.NarrowReply, error) {
	return &pluginpb.NarrowReply{Capabilities: setToWire(drivers.ConfigNarrowing(s.d, configFromWire(r.GetConfig())))}, nil
}

func (s *server) Isolation(_ context.Context, r *pluginpb.ConfigRequest) (*pluginpb.IsolationReply, error) {
	return &pluginpb.IsolationReply{Isolation: drivers.IsolationOf(s.d, configFromWire(r.GetConfig())).String()}, nil
}

func (s *server) Endpoint(_ context.Context, r *pluginpb.ConfigRequest) (*pluginpb.TextReply, error) {
	if hc, ok := s.d.(drivers.HealthChecker); ok {
		return &pluginpb.TextReply{Text: hc.Endpoint(configFromWire(r.GetConfig()))}, nil
	}
	return &pluginpb.TextReply{}, nil
}

func (s *server) Health(ctx context.Context, r *pluginpb.ConfigRequest) (*pluginpb.ErrorReply, error) {
	if hc, ok := s.d.(drivers.HealthChecker); ok {
		return &pluginpb.ErrorReply{Error: errorToWire(hc.CheckHealth(ctx, configFromWire(r.GetConfig())))}, nil
	}
	return &pluginpb.ErrorReply{}, nil
}

// keep records sb under a new handle.
func (s *server) keep(sb drivers.Sandbox) *pluginpb.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.handles[s.next] = sb
	return &pluginpb.Sandbox{Handle: s.next, Id: sb.ID()}
}

// sandbox returns the sandbox of handle h.
func (s *server) sandbox(h uint64) (drivers.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.handles[h]; ok {
		return sb, nil
	}
	return nil, fmt.Errorf("sandbox handle %d: no such handle in this plugin process (released, or the plugin restarted): %w", h, drivers.ErrReleased)
}

// errAllocatedRefused is the plugin's stand-in for the error of the host's
// Allocated callback; the host returns its own error.
var errAllocatedRefused = errors.New("the host's allocated callback failed")

func (s *server) Acquire(stream pluginpb.Driver_AcquireServer) error {
	in, err := stream.Recv()
	if err != nil {
		return err
	}
	start := in.GetStart()
	if start == nil {
		return errors.New("acquire: the first message is not start")
	}
	ctx := stream.Context()
	req := drivers.AcquireRequest{LeaseID: start.GetLeaseId(), Labels: start.GetLabels(), Workspace: start.GetWorkspace(),
		Runner: runnerSpecFromWire(start.GetRunner())}
	if start.GetAllocatedCallback() {
		req.Allocated = func(ctx context.Context, id string) error {
			if err := stream.Send(&pluginpb.AcquireOut{Msg: &pluginpb.AcquireOut_Allocated{Allocated: &pluginpb.Allocated{ProviderLeaseId: id}}}); err != nil {
				return err
			}
			ack, err := stream.Recv()
			if err != nil {
				return err
			}
			if w := ack.GetAllocatedAck().GetError(); w != nil {
				return fmt.Errorf("%w: %s", errAllocatedRefused, w.GetDetail())
			}
			return nil
		}
	}
	sb, err := s.d.Acquire(ctx, configFromWire(start.GetConfig()), req)
	if err != nil {
		return stream.Send(&pluginpb.AcquireOut{Msg: &pluginpb.AcquireOut_Error{Error: errorToWire(err)}})
	}
	return stream.Send(&pluginpb.AcquireOut{Msg: &pluginpb.AcquireOut_Acquired{Acquired: s.keep(sb)}})
}

func (s *server) Resume(ctx context.Context, r *pluginpb.ResumeRequest) (*pluginpb.SandboxReply, error) {
	rs, ok := s.d.(drivers.Resumer)
	if !ok {
		return &pluginpb.SandboxReply{Error: errorToWire(fmt.Errorf("resume: %w", drivers.ErrUnsupported))}, nil
	}
	sb, err := rs.Resume(ctx, configFromWire(r.GetConfig()), r.GetProviderLeaseId())
	if err != nil {
		return &pluginpb.SandboxReply{Error: errorToWire(err)}, nil
	}
	return &pluginpb.SandboxReply{Sandbox: s.keep(sb)}, nil
}

func (s *server) Exec(ctx context.Context, r *pluginpb.ExecRequest) (*pluginpb.ExecReply, error) {
	sb, err := s.sandbox(r.GetHandle())
	if err != nil {
		return &pluginpb.ExecReply{Error: errorToWire(err)}, nil
	}
	cmd := drivers.Command{Argv: r.GetArgv(), Env: r.GetEnv(), Dir: r.GetDir(), OutputLimit: int(r.GetOutputLimit())}
	if r.GetHasStdin() {
		cmd.Stdin = strings.NewReader(string(r.GetStdin()))
	}
	res, err := sb.Exec(ctx, cmd)
	if err != nil {
		return &pluginpb.ExecReply{Error: errorToWire(err)}, nil
	}
	return &pluginpb.ExecReply{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: int64(res.ExitCode), Signal: res.Signal,
		Truncated: res.Truncated, DurationNs: int64(res.Duration)}, nil
}

func (s *server) Release(ctx context.Context, r *pluginpb.ReleaseRequest) (*pluginpb.ReceiptReply, error) {
	sb, err := s.sandbox(r.GetHandle())
	if err != nil {
		return &pluginpb.ReceiptReply{Error: errorToWire(err)}, nil
	}
	var disp drivers.Disposition
	if err := disp.UnmarshalText([]byte(r.GetDisposition())); err != nil {
		return &pluginpb.ReceiptReply{Error: errorToWire(fmt.Errorf("release: %w: %w", err, drivers.ErrUnsupported))}, nil
	}
	rc, err := sb.Release(ctx, disp)
	if err != nil {
		return &pluginpb.ReceiptReply{Receipt: receiptToWire(rc), Error: errorToWire(err)}, nil
	}
	s.mu.Lock()
	delete(s.handles, r.GetHandle())
	s.mu.Unlock()
	s.dropIngresses(r.GetHandle())
	return &pluginpb.ReceiptReply{Receipt: receiptToWire(rc)}, nil
}

func (s *server) List(ctx context.Context, r *pluginpb.ListRequest) (*pluginpb.ListReply, error) {
	l, ok := s.d.(drivers.Lister)
	if !ok {
		return &pluginpb.ListReply{Error: errorToWire(fmt.Errorf("list: %w", drivers.ErrUnsupported))}, nil
	}
	infos, err := l.List(ctx, configFromWire(r.GetConfig()), r.GetLabels())
	if err != nil {
		return &pluginpb.ListReply{Error: errorToWire(err)}, nil
	}
	out := &pluginpb.ListReply{}
	for _, in := range infos {
		out.Sandboxes = append(out.Sandboxes, &pluginpb.SandboxInfo{ProviderLeaseId: in.ProviderLeaseID, Labels: in.Labels, State: string(in.State)})
	}
	return out, nil
}

func (s *server) Destroy(ctx context.Context, r *pluginpb.DestroyRequest) (*pluginpb.ReceiptReply, error) {
	d, ok := s.d.(drivers.Destroyer)
	if !ok {
		return &pluginpb.ReceiptReply{Error: errorToWire(fmt.Errorf("destroy: %w", drivers.ErrUnsupported))}, nil
	}
	rc, err := d.Destroy(ctx, configFromWire(r.GetConfig()), r.GetProviderLeaseId())
	return &pluginpb.ReceiptReply{Receipt: receiptToWire(rc), Error: errorToWire(err)}, nil
}

package plugin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
)

// Plugin names a plugin binary and the operator's pin of it. The zero
// Plugin names none: Load refuses it.
type Plugin struct {
	// Binary is the path of the plugin binary. Its manifest is the file
	// Binary + ".manifest.json" beside it (WriteManifest writes it).
	Binary string
	// SHA256 is the operator's pin: the lowercase hex SHA-256 of the
	// binary. A binary whose contents do not match it is never started,
	// and a manifest that records another sum is refused.
	SHA256 string
}

// manifestSuffix ends the name of a plugin's manifest: the manifest of the
// binary /opt/berth/plugins/acme is /opt/berth/plugins/acme.manifest.json.
const manifestSuffix = ".manifest.json"

// manifest is the file beside a plugin binary that says, without starting
// it, what it serves: its description and the SHA-256 of the binary it was
// written for.
type manifest struct {
	description
	SHA256 string `json:"sha256"`
}

// callTimeout bounds a call that has no context of its caller (a schema's
// check, a narrowing, an isolation level): 1 minute, which covers a
// plugin's start.
const callTimeout = time.Minute

// check reports whether p names a binary path and a well-formed pin.
func (p Plugin) check() error {
	if p.Binary == "" {
		return errors.New("plugin: no binary named")
	}
	if len(p.SHA256) != 64 || strings.Trim(p.SHA256, "0123456789abcdef") != "" {
		return fmt.Errorf("plugin %s: pin %q: want the binary's SHA-256 as 64 lowercase hex digits", p.Binary, p.SHA256)
	}
	return nil
}

// refused returns the error of a plugin that is refused: code
// unavailable, the sentence for a person, the detail wrapping
// drivers.ErrUnavailable.
func refused(binary, why string) error {
	return &errcode.Error{Target: "plugin " + binary, Message: fmt.Sprintf("The plugin %s was refused: %s.", binary, why),
		Err: fmt.Errorf("refused: %s: %w", why, drivers.ErrUnavailable)}
}

// Load returns the driver that the plugin p serves, from its manifest
// alone: listing it (name, capabilities, schema, startup budget, isolation
// of its defaults) starts nothing. The binary is started at the first call
// that needs the driver's code (a config's validation when the schema
// checks in code, Acquire, List, ...), only if its contents match the pin,
// and its handshake must agree with the manifest field by field, else every
// call fails naming the difference. Close ends the process. A manifest
// that records another SHA-256 than the pin, or another protocol version
// than this package's (1), is refused here, naming both.
//
// opts, if not nil, says where the plugin's stderr goes.
func Load(p Plugin, opts *Options) (drivers.Driver, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p.Binary + manifestSuffix)
	if err != nil {
		return nil, refused(p.Binary, fmt.Sprintf("its manifest cannot be read (%v): write it with WriteManifest", err))
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, refused(p.Binary, fmt.Sprintf("its manifest is not valid JSON (%v)", err))
	}
	if m.SHA256 != p.SHA256 {
		return nil, refused(p.Binary, fmt.Sprintf("its manifest is for the binary of SHA-256 %s, the pin is %s", m.SHA256, p.SHA256))
	}
	if m.ProtocolVersion != protocolVersion {
		return nil, refused(p.Binary, fmt.Sprintf("its manifest says protocol version %d, this host speaks version %d", m.ProtocolVersion, protocolVersion))
	}
	c := &client{p: p, desc: m.description, opts: cmp.Or(opts, &Options{})}
	if err := c.init(); err != nil {
		return nil, refused(p.Binary, "its manifest: "+err.Error())
	}
	return c.driver(), nil
}

// WriteManifest starts the plugin p (only if its binary matches the pin),
// asks it what it serves, ends it and writes its manifest beside the
// binary (Binary + ".manifest.json"), recording the pin. An operator runs it
// once per pinned binary; Load reads the manifest after.
func WriteManifest(ctx context.Context, p Plugin) error {
	if err := p.check(); err != nil {
		return err
	}
	c := &client{p: p, opts: &Options{}}
	defer c.Close()
	rpc, err := c.start()
	if err != nil {
		return err
	}
	w, err := rpc.Describe(ctx, &pluginpb.DescribeRequest{})
	if err != nil {
		return c.callErr(ctx, "describe", err)
	}
	d, err := descriptionFromWire(w)
	if err != nil {
		return refused(p.Binary, "its description: "+err.Error())
	}
	b, err := json.MarshalIndent(manifest{description: d, SHA256: p.SHA256}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p.Binary+manifestSuffix, append(b, '\n'), 0o644)
}

// client is the host's side of one plugin: the driver berth sees.
type client struct {
	p        Plugin
	opts     *Options
	desc     description
	caps     drivers.Capabilities
	schema   *config.Schema
	isoDflt  drivers.Isolation
	narrowed drivers.Set // what a failed narrowing call takes away: all but exec

	mu        sync.Mutex
	gp        *goplugin.Client
	rpc       pluginpb.DriverClient
	gen       uint64    // counts the processes started; a sandbox handle is one process's
	startedAt time.Time // of the running process
	crashes   int       // the processes that exited in a row, each within a minute of its start
	nextStart time.Time // no start before it (backoff after a crash)
	failed    error     // a refused handshake: every later call fails with it

	closes atomic.Int64 // the calls of Close: an ingress opened before one is not opened again
}

// Restarts after a crash wait restartBackoff, doubled for each crash in a
// row, at most maxRestartBackoff.
const (
	restartBackoff    = 100 * time.Millisecond
	maxRestartBackoff = 30 * time.Second
)

// init builds the static declaration and the schema from the manifest.
func (c *client) init() error {
	caps, err := c.desc.capabilities()
	if err != nil {
		return err
	}
	c.caps = caps
	if err := c.isoDflt.UnmarshalText([]byte(c.desc.Isolation)); err != nil {
		return err
	}
	s, err := c.desc.schema()
	if err != nil {
		return err
	}
	if s.Driver != c.desc.Name {
		return fmt.Errorf("schema of driver %q, the driver is %q", s.Driver, c.desc.Name)
	}
	checks := c.desc.Schema.HasCheck
	for _, f := range c.desc.Schema.Fields {
		checks = checks || f.HasCheck
	}
	if checks {
		s.Check = c.validate
	}
	if c.desc.Schema.HasImageReference {
		s.ImageReference = c.imageReference
	}
	c.schema = s
	c.narrowed = caps.Declared &^ drivers.NewSet(drivers.CapExec)
	return nil
}

// driver returns c as a value that implements exactly the driver-level
// optional interfaces of the capabilities the plugin declares.
func (c *client) driver() drivers.Driver { return driverOf(c, c.caps.Declared) }

//go:generate go run ./internal/combogen

// start starts the plugin process, pinned, and returns its client.
func (c *client) start() (pluginpb.DriverClient, error) {
	cfg := &goplugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          goplugin.PluginSet{pluginName: &grpcPlugin{}},
		Cmd:              exec.Command(c.p.Binary),
		SecureConfig:     &goplugin.SecureConfig{Checksum: mustHex(c.p.SHA256), Hash: sha256.New()},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           hclog.New(&hclog.LoggerOptions{Name: "plugin", Output: io.Discard, Level: hclog.Off}),
		GRPCDialOptions: append(codecDialOptions(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage),
			grpc.MaxCallSendMsgSize(maxMessage)), grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
			grpc.WithWriteBufferSize(ioBuffer), grpc.WithReadBufferSize(ioBuffer)),
	}
	if c.opts.Logger != nil {
		cfg.Stderr = newStderrLog(c.opts.Logger, c.p.Binary)
	}
	// The output socket (outsock.go): the process's descriptor 3. A host
	// that cannot make one starts the plugin without it; its streams'
	// output then comes in messages.
	out, child, err := newOutSocket()
	if err == nil {
		cfg.Cmd.ExtraFiles = []*os.File{child}
		cfg.Cmd.Env = []string{outFDEnv + "=3"} // go-plugin appends the host's environment
	}
	gp := goplugin.NewClient(cfg)
	cp, err := gp.Client()
	if child != nil {
		_ = child.Close() // the process has it, or failed to start: its end closes with the process
	}
	if err != nil {
		gp.Kill()
		switch {
		case errors.Is(err, goplugin.ErrChecksumsDoNotMatch):
			return nil, refused(c.p.Binary, "its contents do not match the pin "+c.p.SHA256+" (it was not started): install the pinned binary or pin this one")
		case strings.Contains(strings.ToLower(err.Error()), "incompatible api version"):
			return nil, refused(c.p.Binary, fmt.Sprintf("it speaks another protocol version than this host's %d (%v)", protocolVersion, err))
		}
		return nil, &errcode.Error{Target: "plugin " + c.p.Binary, Message: fmt.Sprintf("The plugin %s could not be started: check that it is a berth plugin built for this machine.", c.p.Binary),
			Err: fmt.Errorf("start: %v: %w", err, drivers.ErrUnavailable)}
	}
	raw, err := cp.Dispense(pluginName)
	if err != nil {
		gp.Kill()
		return nil, refused(c.p.Binary, fmt.Sprintf("it serves no berth driver (%v)", err))
	}
	c.gp = gp
	if d, ok := raw.(*dispensed); ok {
		d.gp, d.out = gp, out
	}
	return raw.(pluginpb.DriverClient), nil
}

func mustHex(s string) []byte {
	b, _ := hex.DecodeString(s)
	return b
}

// conn returns the client of the running plugin, starting it (again, if
// it exited) and checking its handshake against the manifest.
func (c *client) conn(ctx context.Context) (pluginpb.DriverClient, error) {
	rpc, _, err := c.connGen(ctx)
	return rpc, err
}

// connGen is conn, with the generation of the process (a sandbox handle
// is valid in the process that made it only). A process that exited (a
// crash, a kill) is started again at the next call, after a backoff that
// doubles for each crash in a row (100 ms to 30 s); a call in the backoff
// fails as unavailable, naming the plugin and when it is restarted.
func (c *client) connGen(ctx context.Context) (pluginpb.DriverClient, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return nil, 0, c.failed
	}
	if c.rpc != nil && !c.gp.Exited() {
		return c.rpc, c.gen, nil
	}
	if c.gp != nil { // it exited
		c.gp.Kill()
		c.gp, c.rpc = nil, nil
		if time.Since(c.startedAt) > time.Minute {
			c.crashes = 0
		}
		c.crashes++
		c.nextStart = time.Now().Add(min(restartBackoff<<(c.crashes-1), maxRestartBackoff))
	}
	if wait := time.Until(c.nextStart); wait > 0 {
		return nil, 0, &errcode.Error{Target: "plugin " + c.p.Binary,
			Message: fmt.Sprintf("The plugin %s exited and is started again in %s: try again then.", c.p.Binary, wait.Round(time.Millisecond)),
			Err:     fmt.Errorf("exited (%d in a row); restarted in %s: %w", c.crashes, wait.Round(time.Millisecond), drivers.ErrUnavailable)}
	}
	rpc, err := c.start()
	if err != nil {
		return nil, 0, err
	}
	w, err := rpc.Describe(ctx, &pluginpb.DescribeRequest{})
	if err != nil {
		c.gp.Kill()
		c.gp = nil
		return nil, 0, c.callErr(ctx, "describe", err)
	}
	got, err := descriptionFromWire(w)
	diff := ""
	if err != nil {
		diff = "its description: " + err.Error()
	} else {
		diff = difference(got, c.desc)
	}
	if diff != "" {
		c.gp.Kill()
		c.gp = nil
		c.failed = refused(c.p.Binary, "its handshake disagrees with its manifest: "+diff)
		return nil, 0, c.failed
	}
	c.rpc, c.gen, c.startedAt = rpc, c.gen+1, time.Now()
	return rpc, c.gen, nil
}

// callErr returns the error of a call op that failed in transport: the
// caller's context's error when it ended (or gRPC says its deadline
// passed), else the plugin is unavailable (it crashed or hung up, or its
// connection was closed: gRPC's code canceled while the caller's context
// is live), naming it.
func (c *client) callErr(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		cerr = cmp.Or(cerr, context.DeadlineExceeded)
	}
	if cerr != nil {
		return fmt.Errorf("plugin %s: %s: %w", c.p.Binary, op, cerr)
	}
	return &errcode.Error{Target: "plugin " + c.p.Binary,
		Message: fmt.Sprintf("The plugin %s did not answer (it may have crashed): try again.", c.p.Binary),
		Err:     fmt.Errorf("%s: %v: %w", op, err, drivers.ErrUnavailable)}
}

// name is the name errors rebuilt from the plugin carry: the driver's.
func (c *client) name() string { return c.desc.Name }

// Name returns the driver's name, from the manifest.
func (c *client) Name() string { return c.desc.Name }

// Capabilities returns the declaration of the manifest. No I/O.
func (c *client) Capabilities() drivers.Capabilities { return c.caps }

// Schema returns the schema of the manifest; its checks, when the
// driver's schema has any, run in the plugin.
func (c *client) Schema() *config.Schema { return c.schema }

// PluginInfo implements drivers.PluginReporter: the binary, the
// manifest's version and the pin. No I/O.
func (c *client) PluginInfo() drivers.PluginInfo {
	return drivers.PluginInfo{Binary: c.p.Binary, Version: c.desc.Version, SHA256: c.p.SHA256}
}

// Availability reports a plugin refused at its handshake. No I/O.
func (c *client) Availability() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// Close ends the plugin process.
func (c *client) Close() error {
	c.closes.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gp != nil {
		c.gp.Kill()
		c.gp, c.rpc = nil, nil
	}
	return nil
}

func (c *client) validate(cfg config.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, err := c.conn(ctx)
	if err != nil {
		return err
	}
	r, err := rpc.Validate(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	if err != nil {
		return c.callErr(ctx, "validate", err)
	}
	return errorFromWire(c.name(), r.GetError())
}

func (c *client) imageReference(cfg config.Config) (images.Reference, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, err := c.conn(ctx)
	if err != nil {
		return images.Reference{}, err
	}
	r, err := rpc.ImageReference(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	if err != nil {
		return images.Reference{}, c.callErr(ctx, "image reference", err)
	}
	if err := errorFromWire(c.name(), r.GetError()); err != nil {
		return images.Reference{}, err
	}
	if r.GetText() == "" {
		return images.Reference{}, nil
	}
	return images.ParseReference(r.GetText())
}

// NarrowedBy asks the plugin what cfg narrows away when its driver
// narrows by config; a plugin that cannot be asked narrows away all but
// exec.
func (c *client) NarrowedBy(cfg config.Config) drivers.Set {
	if !c.desc.Narrows {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, err := c.conn(ctx)
	if err != nil {
		return c.narrowed
	}
	r, err := rpc.NarrowedBy(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	if err != nil {
		return c.narrowed
	}
	s, err := setFromWire(r.GetCapabilities())
	if err != nil {
		return c.narrowed
	}
	return s
}

// Isolation returns the manifest's level for a nil config or a driver
// whose level does not depend on its config, else asks the plugin; a
// plugin that cannot be asked declares none.
func (c *client) Isolation(cfg config.Config) drivers.Isolation {
	if cfg == nil || !c.desc.Isolates {
		return c.isoDflt
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, err := c.conn(ctx)
	if err != nil {
		return drivers.IsolationNone
	}
	r, err := rpc.Isolation(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	var l drivers.Isolation
	if err != nil || l.UnmarshalText([]byte(r.GetIsolation())) != nil {
		return drivers.IsolationNone
	}
	return l
}

// Endpoint returns the driver's endpoint for cfg, asked of the plugin,
// or "plugin BINARY" for a driver without provider health of its own
// (the plugin process is then the endpoint) or a plugin that cannot be
// asked.
func (c *client) Endpoint(cfg config.Config) string {
	self := "plugin " + c.p.Binary
	if !c.desc.Health {
		return self
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	rpc, err := c.conn(ctx)
	if err != nil {
		return self
	}
	r, err := rpc.Endpoint(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	if err != nil || r.GetText() == "" {
		return self
	}
	return r.GetText()
}

// CheckHealth checks that the plugin answers and, when its driver has
// provider health of its own, the provider's.
func (c *client) CheckHealth(ctx context.Context, cfg config.Config) error {
	rpc, err := c.conn(ctx)
	if err != nil {
		return err
	}
	r, err := rpc.Health(ctx, &pluginpb.ConfigRequest{Config: configToWire(cfg)})
	if err != nil {
		return c.callErr(ctx, "health", err)
	}
	return errorFromWire(c.name(), r.GetError())
}

// Acquire acquires a sandbox through the plugin. A request with a Runner
// is refused before anything is allocated when the plugin does not
// declare runner_ingress.
func (c *client) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if req.Runner != nil && !c.caps.Declared.Has(drivers.CapRunnerIngress) {
		return nil, fmt.Errorf("driver %q (plugin %s): capability runner_ingress: %w", c.Name(), c.p.Binary, drivers.ErrUnsupported)
	}
	rpc, gen, err := c.connGen(ctx)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := rpc.Acquire(sctx)
	if err != nil {
		return nil, c.callErr(ctx, "acquire", err)
	}
	start := &pluginpb.AcquireStart{Config: configToWire(cfg), LeaseId: req.LeaseID, Labels: req.Labels, Workspace: req.Workspace,
		AllocatedCallback: req.Allocated != nil, Runner: runnerSpecToWire(req.Runner)}
	if err := st.Send(&pluginpb.AcquireIn{Msg: &pluginpb.AcquireIn_Start{Start: start}}); err != nil {
		return nil, c.callErr(ctx, "acquire", err)
	}
	var cbErr error
	for {
		out, err := st.Recv()
		if err != nil {
			return nil, c.callErr(ctx, "acquire", err)
		}
		switch m := out.GetMsg().(type) {
		case *pluginpb.AcquireOut_Allocated:
			if req.Allocated == nil || cbErr != nil {
				return nil, c.callErr(ctx, "acquire", errors.New("protocol: an allocated message that was not asked for"))
			}
			cbErr = req.Allocated(ctx, m.Allocated.GetProviderLeaseId())
			ack := &pluginpb.AllocatedAck{Error: errorToWire(cbErr)}
			if err := st.Send(&pluginpb.AcquireIn{Msg: &pluginpb.AcquireIn_AllocatedAck{AllocatedAck: ack}}); err != nil {
				return nil, c.callErr(ctx, "acquire", err)
			}
		case *pluginpb.AcquireOut_Acquired:
			return c.sandbox(rpc, gen, cfg, m.Acquired), nil
		case *pluginpb.AcquireOut_Error:
			err := errorFromWire(c.name(), m.Error)
			if cbErr != nil {
				return nil, fmt.Errorf("%w (%v)", cbErr, err)
			}
			return nil, err
		default:
			return nil, c.callErr(ctx, "acquire", errors.New("protocol: an empty message"))
		}
	}
}

// lister, destroyer and resumer give the driver the optional interface
// of a capability the plugin declares.
type (
	lister    struct{ c *client }
	destroyer struct{ c *client }
	resumer   struct{ c *client }
)

// List implements drivers.Lister through the plugin.
func (l lister) List(ctx context.Context, cfg config.Config, labels map[string]string) ([]drivers.SandboxInfo, error) {
	rpc, err := l.c.conn(ctx)
	if err != nil {
		return nil, err
	}
	r, err := rpc.List(ctx, &pluginpb.ListRequest{Config: configToWire(cfg), Labels: labels})
	if err != nil {
		return nil, l.c.callErr(ctx, "list", err)
	}
	if err := errorFromWire(l.c.name(), r.GetError()); err != nil {
		return nil, err
	}
	out := make([]drivers.SandboxInfo, 0, len(r.GetSandboxes()))
	for _, s := range r.GetSandboxes() {
		out = append(out, drivers.SandboxInfo{ProviderLeaseID: s.GetProviderLeaseId(), Labels: s.GetLabels(), State: drivers.State(s.GetState())})
	}
	return out, nil
}

// Destroy implements drivers.Destroyer through the plugin.
func (d destroyer) Destroy(ctx context.Context, cfg config.Config, id string) (drivers.Receipt, error) {
	rpc, err := d.c.conn(ctx)
	if err != nil {
		return drivers.Receipt{}, err
	}
	r, err := rpc.Destroy(ctx, &pluginpb.DestroyRequest{Config: configToWire(cfg), ProviderLeaseId: id})
	if err != nil {
		return drivers.Receipt{}, d.c.callErr(ctx, "destroy", err)
	}
	return receiptFromWire(r.GetReceipt()), errorFromWire(d.c.name(), r.GetError())
}

// Resume implements drivers.Resumer through the plugin.
func (r resumer) Resume(ctx context.Context, cfg config.Config, id string) (drivers.Sandbox, error) {
	rpc, gen, err := r.c.connGen(ctx)
	if err != nil {
		return nil, err
	}
	rep, err := rpc.Resume(ctx, &pluginpb.ResumeRequest{Config: configToWire(cfg), ProviderLeaseId: id})
	if err != nil {
		return nil, r.c.callErr(ctx, "resume", err)
	}
	if err := errorFromWire(r.c.name(), rep.GetError()); err != nil {
		return nil, err
	}
	return r.c.sandbox(rpc, gen, cfg, rep.GetSandbox()), nil
}

// sandbox returns the live sandbox w, implementing exactly the
// sandbox-level optional interfaces of the capabilities the plugin
// declares.
func (c *client) sandbox(rpc pluginpb.DriverClient, gen uint64, cfg config.Config, w *pluginpb.Sandbox) drivers.Sandbox {
	sb := &sandbox{c: c, cfg: cfg.Clone(), rpc: rpc, gen: gen, handle: w.GetHandle(), id: w.GetId()}
	return sandboxOf(sb, c.caps.Declared)
}

// sandbox is a live sandbox of the plugin, by its handle in the process
// of generation gen.
type sandbox struct {
	c        *client
	cfg      config.Config // Acquire's or Resume's, to resume the sandbox in a new process
	id       string
	released atomic.Bool

	mu     sync.Mutex
	rpc    pluginpb.DriverClient
	gen    uint64
	handle uint64

	inMu      sync.Mutex
	ingresses []*hostIngress // the runner ingresses opened on it, ended at its release
}

// live returns the client and the handle of the sandbox in the running
// process. When the plugin was started again since the handle was made
// (it crashed), the sandbox is resumed through the new process (a driver
// that declares reuse); else its handle is lost: an error of code
// unavailable says so.
func (s *sandbox) live(ctx context.Context) (pluginpb.DriverClient, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rpc, gen, err := s.c.connGen(ctx)
	if err != nil {
		return nil, 0, err
	}
	if gen == s.gen {
		return s.rpc, s.handle, nil
	}
	if !s.c.caps.Declared.Has(drivers.CapReattach) {
		return nil, 0, &errcode.Error{Target: "plugin " + s.c.p.Binary,
			Message: fmt.Sprintf("The plugin %s was restarted and cannot resume the sandbox %s: release it by id.", s.c.p.Binary, s.id),
			Err:     fmt.Errorf("sandbox %q: the plugin restarted and its driver does not resume: %w", s.id, drivers.ErrUnavailable)}
	}
	rep, err := rpc.Resume(ctx, &pluginpb.ResumeRequest{Config: configToWire(s.cfg), ProviderLeaseId: s.id})
	if err != nil {
		return nil, 0, s.c.callErr(ctx, "resume after a restart", err)
	}
	if err := errorFromWire(s.c.name(), rep.GetError()); err != nil {
		return nil, 0, fmt.Errorf("sandbox %q: resume after the plugin restarted: %w", s.id, err)
	}
	s.rpc, s.gen, s.handle = rpc, gen, rep.GetSandbox().GetHandle()
	return rpc, s.handle, nil
}

// ID returns the provider lease id.
func (s *sandbox) ID() string { return s.id }

// Exec runs cmd through the plugin. cmd.Stdin is read whole first, at
// most 255 MiB.
func (s *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	if s.released.Load() {
		return nil, fmt.Errorf("sandbox %q: exec: %w", s.id, drivers.ErrReleased)
	}
	rpc, handle, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	req := &pluginpb.ExecRequest{Handle: handle, Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, OutputLimit: int64(cmd.OutputLimit)}
	if cmd.Stdin != nil {
		const most = maxMessage - 1<<20
		b, err := io.ReadAll(io.LimitReader(cmd.Stdin, most+1))
		if err != nil {
			return nil, fmt.Errorf("sandbox %q: exec: read stdin: %w", s.id, err)
		}
		if len(b) > most {
			return nil, fmt.Errorf("sandbox %q: exec: stdin of more than %d bytes through a plugin (streaming exec is not carried yet): %w", s.id, most, drivers.ErrUnsupported)
		}
		req.Stdin, req.HasStdin = b, true
	}
	r, err := rpc.Exec(ctx, req)
	if err != nil {
		return nil, s.c.callErr(ctx, "exec", err)
	}
	if err := errorFromWire(s.c.name(), r.GetError()); err != nil {
		return nil, err
	}
	return &drivers.Result{Stdout: r.GetStdout(), Stderr: r.GetStderr(), ExitCode: int(r.GetExitCode()), Signal: r.GetSignal(),
		Truncated: r.GetTruncated(), Duration: time.Duration(r.GetDurationNs())}, nil
}

// Release releases the sandbox through the plugin. After a restart of
// the plugin, a sandbox its driver cannot resume is destroyed by id (a
// driver that declares destroy_by_id) when d is Destroy.
func (s *sandbox) Release(ctx context.Context, d drivers.Disposition) (drivers.Receipt, error) {
	if s.released.Load() {
		return drivers.Receipt{}, fmt.Errorf("sandbox %q: release: %w", s.id, drivers.ErrReleased)
	}
	rpc, handle, err := s.live(ctx)
	if err != nil {
		if d != drivers.Destroy || !s.c.caps.Declared.Has(drivers.CapDestroyByID) {
			return drivers.Receipt{}, err
		}
		r, derr := destroyer{s.c}.Destroy(ctx, s.cfg, s.id)
		if derr != nil {
			return r, fmt.Errorf("%w (destroy by id: %w)", err, derr)
		}
		s.released.Store(true)
		s.endIngresses()
		return r, nil
	}
	r, err := rpc.Release(ctx, &pluginpb.ReleaseRequest{Handle: handle, Disposition: d.String()})
	if err != nil {
		return drivers.Receipt{}, s.c.callErr(ctx, "release", err)
	}
	if err := errorFromWire(s.c.name(), r.GetError()); err != nil {
		return receiptFromWire(r.GetReceipt()), err
	}
	s.released.Store(true)
	s.endIngresses()
	return receiptFromWire(r.GetReceipt()), nil
}

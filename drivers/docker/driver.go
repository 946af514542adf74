package docker

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// Name is the driver's name.
const driverName = "docker"

// Labels that the driver puts on every container it creates, on top of the
// AcquireRequest's labels and the config's extra labels.
const (
	// labelManaged marks containers made by berth ("true"). List, Resume
	// and Destroy only ever touch containers that carry it.
	labelManaged = "berth.managed"
	// labelLease holds the berth lease id of AcquireRequest.LeaseID.
	labelLease = "berth.lease"
	// labelTemplate marks images captured by Capture; its value is the
	// template name.
	labelTemplate = "berth.template"
)

// Options configures the driver. Nil means defaults.
type Options struct {
	// Host is the default of the host field; default: DOCKER_HOST of this
	// process, else the platform's default socket (as the Docker CLI does).
	Host string
	// Logger receives debug logs; nil discards them. Secrets are never logged.
	Logger *slog.Logger
	// RunnerDir holds, for each container acquired with
	// AcquireRequest.Runner, a 0700 directory whose "run" subdirectory is
	// bind-mounted at runnerSocketDir; default: berth-docker-runner-UID in
	// the temporary directory. It must be owned by this process's user
	// and writable by nobody else; unix socket paths are short (108
	// bytes), so keep it short.
	RunnerDir string
}

// driver runs sandboxes as hardened containers on a Docker engine. It is
// safe for concurrent use. Create it with New; Close releases its engine
// connections.
type driver struct {
	schema    *config.Schema
	log       *slog.Logger
	runnerDir string

	mu      sync.Mutex
	clients map[string]*client.Client
	images  map[imageKey]string // pinned reference on an engine -> image ID (cachedImage)
}

var (
	_ drivers.Driver          = (*driver)(nil)
	_ drivers.Resumer         = (*driver)(nil)
	_ drivers.Lister          = (*driver)(nil)
	_ drivers.Destroyer       = (*driver)(nil)
	_ drivers.TemplateDeleter = (*driver)(nil)
	_ io.Closer               = (*driver)(nil)
	_ drivers.ConfigNarrower  = (*driver)(nil)
)

// Driver is the Docker driver that New returns: a drivers.Driver that
// runs sandboxes as hardened containers on a Docker engine and keeps a
// client per engine. It also implements drivers.Resumer, drivers.Lister,
// drivers.Destroyer, drivers.TemplateDeleter, drivers.HealthChecker,
// drivers.ArchReporter and drivers.ConfigNarrower (reach them with
// drivers.DriverAs); its sandboxes implement drivers.ImageReporter,
// drivers.StreamExecer, drivers.Terminal, drivers.Capturer and
// drivers.RunnerHost. It is safe for concurrent use.
type Driver interface {
	drivers.Driver
	// Close closes the driver's engine clients (a drivers.Registry's Close
	// calls it). Sandboxes obtained before must not be used afterwards.
	Close() error
}

// New returns a Docker driver. It does no I/O: engines are contacted on
// first use.
func New(opts *Options) Driver { return newDriver(opts) }

func newDriver(opts *Options) *driver {
	if opts == nil {
		opts = &Options{}
	}
	host := opts.Host
	if host == "" {
		host = defaultHost()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir := opts.RunnerDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "berth-docker-runner-"+strconv.Itoa(os.Geteuid()))
	}
	return &driver{schema: withRuntime(newSchema(host)), log: log, runnerDir: filepath.Clean(dir), clients: map[string]*client.Client{},
		images: map[imageKey]string{}}
}

// Name returns "docker".
func (d *driver) Name() string { return driverName }

// Capabilities declares every capability; runner ingress only for an
// engine that shares this host's filesystem (see NarrowedBy). No I/O.
func (d *driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Kind: drivers.KindSandbox,
		Declared: drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList,
			drivers.CapDestroyByID, drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapTemplateCapture,
			drivers.CapTemplateDelete, drivers.CapRunnerIngress, drivers.CapFiles),
		StartupBudget: defaultStartupTimeout,
	}
}

// Schema returns the config schema (the same pointer on every call).
func (d *driver) Schema() *config.Schema { return d.schema }

// Close closes the driver's engine clients. Sandboxes obtained before must
// not be used afterwards.
func (d *driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for h, c := range d.clients {
		errs = append(errs, c.Close())
		delete(d.clients, h)
	}
	return errors.Join(errs...)
}

// client returns the (cached) engine client for host. TLS and the API
// version come from the environment (DOCKER_CERT_PATH, DOCKER_TLS_VERIFY,
// DOCKER_API_VERSION); the API version is negotiated otherwise.
func (d *driver) client(host string) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.clients[host]; ok {
		return c, nil
	}
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker %s: %v: %w", host, err, config.ErrInvalid)
	}
	d.clients[host] = c
	return c, nil
}

// engineDown gives err, an engine that cannot be reached, a sentence for
// a person naming the engine and the fix.
func engineDown(host string, err error) error {
	return &errcode.Error{Target: "the Docker engine at " + host,
		Message: fmt.Sprintf("The Docker engine at %s is not reachable: start it or fix the docker host setting.", host),
		Err:     err}
}

// engineErr classifies an engine error by the PRB-5 table: a certificate
// that failed verification is drivers.ErrTLSUnverified, an engine that
// cannot be reached is drivers.ErrUnavailable (the engine is the provider's
// control plane), then not found, cancellation, or as is. what names the
// operation and object.
func engineErr(host, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("docker %s: %s: %w", host, what, err)
	case isTLSErr(err):
		return &errcode.Error{Message: fmt.Sprintf("The certificate of the Docker engine at %s failed verification: check the docker host setting and its TLS certificates.", host),
			Err: fmt.Errorf("docker %s: %s: %v: %w", host, what, err, drivers.ErrTLSUnverified)}
	case client.IsErrConnectionFailed(err), isNetErr(err):
		return engineDown(host, fmt.Errorf("docker %s: %s: %v: %w", host, what, err, drivers.ErrUnavailable))
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("docker %s: %s: %v: %w", host, what, err, errcode.ErrNotFound)
	case cerrdefs.IsUnavailable(err):
		return fmt.Errorf("docker %s: %s: %v: %w", host, what, err, drivers.ErrTransient)
	}
	return fmt.Errorf("docker %s: %s: %w", host, what, err)
}

// isTLSErr reports whether err is a failed certificate verification. The
// engine client flattens some errors to text, so the x509 prefix of the
// standard library's messages is checked too.
func isTLSErr(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
	)
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return true
	}
	return strings.Contains(err.Error(), "x509: ") || strings.Contains(err.Error(), "tls: failed to verify certificate")
}

func isNetErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Acquire makes the configured image present (pulling a pinned digest only
// when the engine lacks it), creates a hardened container labelled with
// req.Labels, labelManaged and labelLease, calls req.Allocated with the
// container id, starts it and waits until it runs. The provider lease id is
// the container id. A missing image is an error wrapping
// drivers.ErrImageNotFound that names the reference. The startup_timeout
// and ctx's deadline both bound it. On a failure before req.Allocated the
// container is removed; after it, a failed start removes it too, while a
// cancelled start leaves it to the lease layer (which knows its id).
//
// With req.Runner, Acquire first checks that the engine shares this
// host's filesystem (a unix:// host; otherwise an error wrapping
// drivers.ErrUnsupported naming runner_ingress) and that the binary has
// the spec's sum, then mounts it and the container's ingress directory
// (see "Runner ingress" in the package documentation); nothing is created
// when a check fails.
func (d *driver) Acquire(ctx context.Context, raw config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return nil, err
	}
	cli, err := d.client(cfg.host)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("docker %s: acquire: %w", cfg.host, err)
	}
	if req.Runner != nil {
		if err := checkRunner(cfg, req.Runner); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.startup)
	defer cancel()
	imageID, cached := d.cachedImage(cfg)
	if !cached {
		if imageID, err = d.ensureImage(ctx, cli, cfg); err != nil {
			return nil, err
		}
	}
	cc, hc, err := containerSpec(cfg, imageID, req)
	if err != nil {
		return nil, err
	}
	name := "berth-" + randomHex(6)
	var rm *runnerMounts
	if req.Runner != nil {
		if rm, err = d.makeRunnerDir(req.Runner, name); err != nil {
			return nil, err
		}
		addRunner(cfg, rm, cc, hc)
	}
	created, err := cli.ContainerCreate(ctx, cc, hc, nil, nil, name)
	if err != nil && cached && isNoSuchImage(err) {
		// The cached image was removed since: resolve the reference again.
		d.forgetImage(cfg, imageID)
		if imageID, err = d.ensureImage(ctx, cli, cfg); err != nil {
			d.removeRunnerDir(rm)
			return nil, err
		}
		cc.Image = imageID
		created, err = cli.ContainerCreate(ctx, cc, hc, nil, nil, name)
	}
	if rerr := unknownRuntime(cfg, err); rerr != nil {
		d.removeRunnerDir(rm)
		return nil, rerr
	}
	if err != nil {
		unanswered := createMayHaveRun(err)
		err = engineErr(cfg.host, "create container from "+cfg.image, err)
		if unanswered {
			// The request was sent and no answer came back (the context
			// ended, the connection broke): the engine may have made the
			// container all the same, unseen by the record. Its name is
			// this attempt's own: remove it by name.
			if rerr := d.removeNamed(cli, name, cc, hc); rerr != nil {
				return nil, fmt.Errorf("%w; container %s may exist, and removing it failed: %w", err, name, rerr)
			}
		}
		d.removeRunnerDir(rm)
		return nil, err
	}
	id := created.ID
	sb := &sandbox{d: d, cli: cli, cfg: cfg, id: id, runner: rm, kills: make(chan struct{}, 1)}
	if req.Allocated != nil {
		if err := req.Allocated(ctx, id); err != nil {
			d.removeQuietly(cli, id, rm)
			return nil, err
		}
	}
	if err := cli.ContainerStart(ctx, id, startOptions()); err != nil {
		if ctx.Err() == nil {
			d.removeQuietly(cli, id, rm)
		}
		return nil, engineErr(cfg.host, "start container "+id, err)
	}
	ins, err := sb.waitRunning(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.removeQuietly(cli, id, rm)
		}
		return nil, err
	}
	if err := checkContainerRuntime(cfg, ins); err != nil {
		d.removeQuietly(cli, id, rm)
		return nil, fmt.Errorf("%w; removed", err)
	}
	if ins.Image != imageID {
		// The engine runs another image than the one the reference was
		// resolved to (the cache's or the inspect's): refuse it.
		d.forgetImage(cfg, imageID)
		d.removeQuietly(cli, id, rm)
		return nil, fmt.Errorf("docker %s: container %s runs image %s, not %s that %q resolved to; removed", cfg.host, id, ins.Image, imageID, cfg.image)
	}
	sb.pinned = provenIdentity(cfg, ins.Image)
	if req.Warm && strings.HasPrefix(cfg.host, "unix://") {
		// Best effort: without it the first command takes the ordinary
		// path. Only on a local socket: a primed exec's connection idles
		// until the first command, and a tcp:// connection that a
		// network drops silently would take the command's line with it.
		if err := sb.prime(ctx); err != nil {
			d.log.Debug("docker: priming the first exec", "container", id, "err", err)
		}
	}
	d.log.Debug("docker: acquired", "host", cfg.host, "container", id, "image", cfg.image)
	return sb, nil
}

// Resume returns a handle to the berth container providerLeaseID, starting
// it if it is stopped, and waits until it runs. A container that does not
// exist, or was not made by berth, is an error wrapping errcode.ErrNotFound.
// A container made with AcquireRequest.Runner keeps its mounts: its handle
// hosts the runner it was created with (HostRunner refuses another sum).
func (d *driver) Resume(ctx context.Context, raw config.Config, providerLeaseID string) (drivers.Sandbox, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return nil, err
	}
	cli, err := d.client(cfg.host)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.startup)
	defer cancel()
	ins, err := inspectManaged(ctx, cli, cfg.host, providerLeaseID)
	if err != nil {
		return nil, err
	}
	if err := checkContainerRuntime(cfg, ins); err != nil {
		return nil, err
	}
	sb := &sandbox{d: d, cli: cli, cfg: cfg, id: ins.ID, runner: d.runnerOf(ins), kills: make(chan struct{}, 1)}
	if ins.State == nil || !ins.State.Running {
		if err := cli.ContainerStart(ctx, ins.ID, startOptions()); err != nil {
			return nil, engineErr(cfg.host, "start container "+ins.ID, err)
		}
	}
	if _, err := sb.waitRunning(ctx); err != nil {
		return nil, err
	}
	return sb, nil
}

// removeQuietly force-removes a container that Acquire gave up on, and
// its runner directory once the container is gone.
func (d *driver) removeQuietly(cli *client.Client, id string, rm *runnerMounts) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := removeContainer(ctx, cli, id); err != nil {
		d.log.Warn("docker: removing abandoned container", "container", id, "err", err)
		return
	}
	d.removeRunnerDir(rm)
}

// createMayHaveRun reports whether a failed ContainerCreate may still
// have made its container: the request was sent (no dial failure) and no
// answer of the engine came back (the context ended first, or the
// connection broke).
func createMayHaveRun(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		var op *net.OpError
		return !(errors.As(err, &op) && op.Op == "dial")
	}
	return outcomeUnknown(context.Background(), err)
}

// removeNamed removes the container called name, if a create that got
// no answer made it, on a context of its own (the acquisition's may have
// ended). The engine may still be making it, and until it has, a removal
// finds nothing: so it creates a container of that name itself (cc, hc).
// A conflict means the name is taken: the first create made it or is
// making it, and the removal is tried until it removes it. A success means
// the first create made nothing: the one just made is removed.
func (d *driver) removeNamed(cli *client.Client, name string, cc *container.Config, hc *container.HostConfig) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		created, err := cli.ContainerCreate(ctx, cc, hc, nil, nil, name)
		if err == nil {
			_, err = removeContainer(ctx, cli, created.ID)
			return err
		}
		if !cerrdefs.IsConflict(err) {
			return err
		}
		ev, err := removeContainer(ctx, cli, name)
		if err != nil {
			return err
		}
		if ev != evidenceRemoveNotFound {
			d.log.Info("docker: removed the container of a create that got no answer", "container", name, "evidence", ev)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

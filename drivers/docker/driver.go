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
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/berthdev/berth/drivers"
)

// Name is the driver's name.
const Name = "docker"

// Labels that the driver puts on every container it creates, on top of the
// AcquireRequest's labels and the config's extra labels.
const (
	// LabelManaged marks containers made by berth ("true"). List, Resume
	// and Destroy only ever touch containers that carry it.
	LabelManaged = "berth.managed"
	// LabelLease holds the berth lease id of AcquireRequest.LeaseID.
	LabelLease = "berth.lease"
	// LabelTemplate marks images captured by Capture; its value is the
	// template name.
	LabelTemplate = "berth.template"
)

// Options configures the driver. Nil means defaults.
type Options struct {
	// Host is the default of the host field; default: DOCKER_HOST of this
	// process, else the platform's default socket (as the Docker CLI does).
	Host string
	// Logger receives debug logs; nil discards them. Secrets are never logged.
	Logger *slog.Logger
}

// Driver runs sandboxes as hardened containers on a Docker engine. It is
// safe for concurrent use. Create it with New; Close releases its engine
// connections.
type Driver struct {
	schema *drivers.ConfigSchema
	log    *slog.Logger

	mu      sync.Mutex
	clients map[string]*client.Client
}

var (
	_ drivers.Driver          = (*Driver)(nil)
	_ drivers.Resumer         = (*Driver)(nil)
	_ drivers.Lister          = (*Driver)(nil)
	_ drivers.Destroyer       = (*Driver)(nil)
	_ drivers.TemplateDeleter = (*Driver)(nil)
	_ drivers.Closer          = (*Driver)(nil)
)

// New returns a Docker driver. It does no I/O: engines are contacted on
// first use.
func New(opts *Options) *Driver {
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
	return &Driver{schema: newSchema(host), log: log, clients: map[string]*client.Client{}}
}

// Name returns "docker".
func (d *Driver) Name() string { return Name }

// Capabilities declares everything but runner ingress; no I/O.
func (d *Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Kind: drivers.KindSandbox,
		Declared: drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReuse, drivers.CapList,
			drivers.CapDestroyByID, drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapTemplateCapture,
			drivers.CapTemplateDelete),
		StartupBudget: DefaultStartupTimeout,
	}
}

// Schema returns the config schema (the same pointer on every call).
func (d *Driver) Schema() *drivers.ConfigSchema { return d.schema }

// Close closes the driver's engine clients. Sandboxes obtained before must
// not be used afterwards.
func (d *Driver) Close() error {
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
func (d *Driver) client(host string) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.clients[host]; ok {
		return c, nil
	}
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker %s: %v: %w", host, err, drivers.ErrInvalidConfig)
	}
	d.clients[host] = c
	return c, nil
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
		return fmt.Errorf("docker %s: %s: %v: %w", host, what, err, drivers.ErrTLSUnverified)
	case client.IsErrConnectionFailed(err), isNetErr(err):
		return fmt.Errorf("docker %s: %s: %v: %w", host, what, err, drivers.ErrUnavailable)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("docker %s: %s: %v: %w", host, what, err, drivers.ErrNotFound)
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
// req.Labels, LabelManaged and LabelLease, calls req.Allocated with the
// container id, starts it and waits until it runs. The provider lease id is
// the container id. A missing image is an error wrapping
// drivers.ErrImageNotFound that names the reference. The startup_timeout
// and ctx's deadline both bound it. On a failure before req.Allocated the
// container is removed; after it, a failed start removes it too, while a
// cancelled start leaves it to the lease layer (which knows its id).
func (d *Driver) Acquire(ctx context.Context, raw drivers.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
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
	ctx, cancel := context.WithTimeout(ctx, cfg.startup)
	defer cancel()
	imageID, err := d.ensureImage(ctx, cli, cfg)
	if err != nil {
		return nil, err
	}
	cc, hc, err := containerSpec(cfg, imageID, req)
	if err != nil {
		return nil, err
	}
	created, err := cli.ContainerCreate(ctx, cc, hc, nil, nil, "berth-"+randomHex(6))
	if err != nil {
		return nil, engineErr(cfg.host, "create container from "+cfg.image, err)
	}
	id := created.ID
	sb := &sandbox{d: d, cli: cli, cfg: cfg, id: id}
	if req.Allocated != nil {
		if err := req.Allocated(ctx, id); err != nil {
			d.removeQuietly(cli, id)
			return nil, err
		}
	}
	if err := cli.ContainerStart(ctx, id, startOptions()); err != nil {
		if ctx.Err() == nil {
			d.removeQuietly(cli, id)
		}
		return nil, engineErr(cfg.host, "start container "+id, err)
	}
	if err := sb.waitRunning(ctx); err != nil {
		if ctx.Err() == nil {
			d.removeQuietly(cli, id)
		}
		return nil, err
	}
	d.log.Debug("docker: acquired", "host", cfg.host, "container", id, "image", cfg.image)
	return sb, nil
}

// Resume returns a handle to the berth container providerLeaseID, starting
// it if it is stopped, and waits until it runs. A container that does not
// exist, or was not made by berth, is an error wrapping drivers.ErrNotFound.
func (d *Driver) Resume(ctx context.Context, raw drivers.Config, providerLeaseID string) (drivers.Sandbox, error) {
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
	sb := &sandbox{d: d, cli: cli, cfg: cfg, id: ins.ID}
	if ins.State == nil || !ins.State.Running {
		if err := cli.ContainerStart(ctx, ins.ID, startOptions()); err != nil {
			return nil, engineErr(cfg.host, "start container "+ins.ID, err)
		}
	}
	if err := sb.waitRunning(ctx); err != nil {
		return nil, err
	}
	return sb, nil
}

// removeQuietly force-removes a container that Acquire gave up on.
func (d *Driver) removeQuietly(cli *client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := removeContainer(ctx, cli, id); err != nil {
		d.log.Warn("docker: removing abandoned container", "container", id, "err", err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

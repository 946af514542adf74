package lease

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
)

// templateID is the id of the template the acquisition starts from, or "".
func (a *acq) templateID() string {
	if a.template == nil {
		return ""
	}
	return a.template.ID
}

// startFromTemplate makes a start from the environment's active template
// while it applies to the config (drift relinked, IMG-6, IMG-8): the
// snapshot's image field becomes the template's identity, in the form the
// driver's schema reads back as that identity (Docker: the digest-pinned
// reference; Daytona: the snapshot id; the fake: either). The reuse
// fingerprint then covers it, and the record is labelled labelTemplate. A
// detached or absent template leaves the configured image.
func startFromTemplate(a *acq, schema *config.Schema) error {
	t, _ := envhook.AppliedTemplate(a.env, a.drv).(*environment.ActiveTemplate)
	if t == nil {
		return nil
	}
	id, err := images.ParseIdentity(t.Identity)
	if err != nil || id.IsZero() {
		return fmt.Errorf("active template %s has no usable identity %q: %v: %w", t.ID, t.Identity, err, errcode.ErrInvalid)
	}
	if schema.ImageField == "" {
		return fmt.Errorf("driver %q has no image field to start from template %s: %w", a.drv.Name(), t.ID, drivers.ErrUnsupported)
	}
	candidates := []string{id.String()}
	if id.SnapshotID() != "" {
		candidates = append(candidates, id.SnapshotID())
	}
	for _, c := range candidates {
		cfg := a.snapshot.Clone()
		cfg[schema.ImageField] = c
		ref, err := schema.Image(cfg)
		if err != nil {
			continue
		}
		if got, ok := ref.Identity(); ok && got == id {
			a.snapshot = cfg
			a.template = t
			return nil
		}
	}
	return fmt.Errorf("driver %q cannot start a sandbox from template %s (identity %s): its image field reads no such identity: %w",
		a.drv.Name(), t.ID, id, drivers.ErrUnsupported)
}

// acquireVerified is acquire, then, for a lease started from a template,
// the live identity check (IMG-3): the sandbox must report the template's
// identity, else it is destroyed and the error wraps errImageMismatch
// (reason "image_mismatch").
func (m *Manager) acquireVerified(ctx context.Context, a *acq) (*Handle, error) {
	h, err := m.acquire(ctx, a)
	if err != nil {
		return h, quotaNamed(a, err)
	}
	if a.template == nil {
		return h, err
	}
	ir, cerr := capability(h, drivers.SandboxAs[drivers.ImageReporter])
	if cerr != nil {
		return h, nil // the driver reports no live identity: its schema read it back
	}
	live, err := ir.ImageIdentity(ctx)
	if err == nil && live.String() == a.template.Identity {
		return h, nil
	}
	why := fmt.Sprintf("reports %s", live)
	if err != nil {
		why = fmt.Sprintf("could not report its image: %v", err)
	}
	if _, rerr := m.release(context.WithoutCancel(ctx), h.lease.ID, ReleaseOptions{Disposition: Destroy}); rerr != nil {
		why += fmt.Sprintf("; its destroy is pending: %v", rerr)
	}
	return nil, fmt.Errorf("lease %s: environment %s: the sandbox started from template %s (%s) %s: %w",
		h.lease.ID, a.env.ID, a.template.ID, a.template.Identity, why, errImageMismatch)
}

// Open returns a handle of the live sandbox lease id for p, who must be
// allowed authz.ActionLease on it (as for Release; a lease p may not read
// is not found). A lease this manager holds gets its live handle; one
// another process acquired is resumed by its provider lease id
// (drivers.Resumer) with its recorded config. A host lease (ssh) whose
// session another process holds is taken over once that holder is gone:
// Open waits, within ctx, until the holder's claim expired (a holder
// killed with -9 stops renewing it; it lasts three heartbeats, 30
// seconds), writes this manager as the holder and opens a fresh session
// for the lease, whose runner directory is the first one's; while the
// holder lives it keeps renewing, and Open ends with ctx (an error wrapping
// errcode.ErrConflict naming the holder). Local leases are refused with an
// error wrapping drivers.ErrUnsupported: their runner's directory and
// ingress belong to the process that acquired them. A lease that is not
// active or retained is an error wrapping errcode.ErrConflict. The handle
// acts for the lease as Acquire's does; releasing it releases the lease.
func (m *Manager) Open(ctx context.Context, p authz.Principal, id string) (*Handle, error) {
	l, err := m.load(ctx, p, authz.ActionLease, id)
	if err != nil {
		return nil, err
	}
	if l.Status != StatusActive && l.Status != StatusRetained {
		return nil, fmt.Errorf("lease %s is %s, not a live lease: %w", id, l.Status, errcode.ErrConflict)
	}
	drv, err := m.reg.Lookup(l.Provider)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", id, err)
	}
	if h := m.liveHandle(id); h != nil {
		return m.forCaller(ctx, p, h), nil
	}
	if drv.Capabilities().Kind == drivers.KindHost {
		return m.openHost(ctx, p, drv, l)
	}
	sb, err := m.resumeSandbox(ctx, drv, l)
	if err != nil {
		return nil, err
	}
	h := &Handle{m: m, lease: l, driver: drv, sandbox: sb, resumed: true}
	return m.forCaller(ctx, p, h), nil
}

func init() { leasehook.Fingerprint = environmentFingerprint }

// environmentFingerprint returns the reuse fingerprint that a lease of env
// acquired now records (Lease.Fingerprint, LEASE-4): a SHA-256 over the
// driver name, the identity fields of env's config and its secret
// references with their versions, with the active template's identity as
// the image while the template applies (IMG-8). Knobs, metadata and
// SecretMap fields are left out, so that tuning a timeout or rotating an
// env token keeps a sandbox reusable while changing the image, target or
// account does not. Those who bind a record to the config a lease runs
// (handover's project auth checks, through leasehook.Fingerprint) use it,
// so that a template change is a config change for them too. It does no I/O; an identity value without a
// JSON encoding is an error wrapping errcode.ErrInvalid.
func environmentFingerprint(d drivers.Driver, env *environment.Environment) (string, error) {
	a := &acq{env: env, drv: d, snapshot: env.Config.Clone()}
	if err := startFromTemplate(a, d.Schema()); err != nil {
		return "", fmt.Errorf("lease: environment %s: %w", env.ID, err)
	}
	return reuseFingerprint(d, a.snapshot)
}

// resumeSandbox resumes the provider sandbox of the sandbox driver's lease
// l (drivers.Resumer) for a process that holds no live handle of it.
func (m *Manager) resumeSandbox(ctx context.Context, drv drivers.Driver, l *Lease) (drivers.Sandbox, error) {
	resumer, err := drivers.DriverAs[drivers.Resumer](drv)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", l.ID, err)
	}
	if l.ProviderLeaseID == "" {
		return nil, fmt.Errorf("lease %s has no provider sandbox yet: %w", l.ID, errcode.ErrConflict)
	}
	cfg, err := m.resolveConfig(ctx, drv, l.Config)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", l.ID, err)
	}
	sb, err := resumer.Resume(ctx, cfg, l.ProviderLeaseID)
	if err != nil {
		return nil, fmt.Errorf("lease %s: resuming sandbox %s: %w", l.ID, l.ProviderLeaseID, err)
	}
	return sb, nil
}

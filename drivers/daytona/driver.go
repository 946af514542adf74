package daytona

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
)

// Name is the name of the daytona driver.
const driverName = "daytona"

// startupBudget is the startup budget the driver declares: the default
// create timeout of Daytona's SDKs (60 seconds).
const startupBudget = 60 * time.Second

// Options configure a driver. nil means defaults.
type Options struct {
	// HTTPClient makes the requests; default a client with no overall
	// timeout (every call is bounded by its context). The driver uses a
	// copy whose redirect policy refuses any redirect that changes scheme,
	// host or port (the copy's CheckRedirect replaces this one's).
	HTTPClient *http.Client
	// Logger receives one debug line per request (method, path, status,
	// duration; never a header or a body); default discard.
	Logger *slog.Logger
	// PollInterval is the first delay between reads of a sandbox's state
	// while waiting for a transition; it doubles up to PollMax. Default
	// 500ms.
	PollInterval time.Duration
	// PollMax caps the delay between state reads; default 5s.
	PollMax time.Duration
	// RetryBase is the first delay before retrying a transient failure
	// (409 state change in progress, 429, 5xx); it doubles, jittered, up to
	// RetryMax. Default 250ms.
	RetryBase time.Duration
	// RetryMax caps one retry delay (a provider's Retry-After may exceed
	// it); default 10s.
	RetryMax time.Duration
	// CleanupTimeout bounds the best-effort cleanups the driver makes after
	// the caller's context ended (killing a cancelled command, deleting a
	// sandbox nobody recorded); default 30s.
	CleanupTimeout time.Duration
}

// driver drives Daytona sandboxes through the REST API. It is safe for
// concurrent use; it holds no per-config state.
type driver struct {
	opts       Options
	schema     *config.Schema
	httpClient *http.Client // opts.HTTPClient with the redirect policy
}

var (
	_ drivers.Driver          = (*driver)(nil)
	_ drivers.Resumer         = (*driver)(nil)
	_ drivers.Lister          = (*driver)(nil)
	_ drivers.Destroyer       = (*driver)(nil)
	_ drivers.TemplateDeleter = (*driver)(nil)
)

// New returns the daytona driver; nil opts means defaults. The driver also
// implements drivers.Resumer, drivers.Lister, drivers.Destroyer,
// drivers.TemplateDeleter and drivers.HealthChecker (reach them with
// drivers.DriverAs); its sandboxes implement drivers.ImageReporter,
// drivers.Terminal and drivers.Capturer. It is safe for concurrent use.
func New(opts *Options) drivers.Driver { return newDriver(opts) }

func newDriver(opts *Options) *driver {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 500 * time.Millisecond
	}
	if o.PollMax <= 0 {
		o.PollMax = 5 * time.Second
	}
	o.PollMax = max(o.PollMax, o.PollInterval)
	if o.RetryBase <= 0 {
		o.RetryBase = 250 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 10 * time.Second
	}
	o.RetryMax = max(o.RetryMax, o.RetryBase)
	if o.CleanupTimeout <= 0 {
		o.CleanupTimeout = 30 * time.Second
	}
	return &driver{opts: o, schema: newSchema(), httpClient: withRedirectPolicy(o.HTTPClient)}
}

// Name returns "daytona".
func (d *driver) Name() string { return driverName }

// Capabilities declares exec, reuse, list, destroy by id, image identity,
// terminal, template capture, template delete and files, and a startup
// budget of 60s. No I/O.
func (d *driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Kind: drivers.KindSandbox,
		Declared: drivers.NewSet(drivers.CapExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList, drivers.CapDestroyByID,
			drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapTemplateCapture, drivers.CapTemplateDelete, drivers.CapFiles),
		StartupBudget: startupBudget,
	}
}

// Schema returns the config schema; the same pointer on every call.
func (d *driver) Schema() *config.Schema { return d.schema }

// settings is a config read for use.
type settings struct {
	c            *client
	snapshotID   string
	target       string
	env          map[string]string // secret values: sent with each command, never at create
	labels       map[string]string
	autoStop     *int64
	autoArch     *int64
	autoDel      *int64
	execLimit    time.Duration
	reactivateOK bool
}

// open reads cfg (normalized, secrets resolved) into settings. A missing
// key wraps config.ErrCredentialsMissing; a key still held as a secret
// reference is refused without naming it.
func (d *driver) open(cfg config.Config) (*settings, error) {
	key, ok := cfg[fieldAPIKey].(string)
	if !ok || key == "" {
		if _, isRef := cfg.SecretRef(fieldAPIKey); isRef {
			return nil, &config.Error{Driver: driverName, Field: fieldAPIKey, Reason: "secret reference not resolved"}
		}
		return nil, fmt.Errorf("daytona config: field %q: %w", fieldAPIKey, config.ErrCredentialsMissing)
	}
	if refs := cfg.SecretMapRefs(fieldEnv); len(refs) > 0 {
		return nil, &config.Error{Driver: driverName, Field: fieldEnv,
			Reason: fmt.Sprintf("key %q: secret reference not resolved", fieldKey(slices.Sorted(maps.Keys(refs))[0]))}
	}
	raw := cfg.String(fieldAPIURL)
	if err := checkAPIURL(raw); err != nil {
		return nil, &config.Error{Driver: driverName, Field: fieldAPIURL, Reason: err.Error()}
	}
	api, _ := url.Parse(raw)
	s := &settings{
		c: &client{
			http: d.httpClient, api: api, key: key, org: cfg.String(fieldOrganizationID),
			retry: newBackoff(d.opts.RetryBase, d.opts.RetryMax, clock.Real{}), log: d.opts.Logger,
		},
		snapshotID:   cfg.String(fieldSnapshotID),
		target:       cfg.String(fieldTarget),
		env:          cfg.StringMap(fieldEnv),
		labels:       cfg.StringMap(fieldLabels),
		execLimit:    cfg.Duration(fieldExecTimeout),
		reactivateOK: cfg.Bool(fieldReactivateSnapshot),
	}
	intp := func(name string) *int64 {
		if _, ok := cfg[name]; !ok {
			return nil
		}
		n := cfg.Int(name)
		return &n
	}
	s.autoStop, s.autoArch, s.autoDel = intp(fieldAutoStopInterval), intp(fieldAutoArchiveInterval), intp(fieldAutoDeleteInterval)
	return s, nil
}

// verifiedSnapshot reads the configured snapshot by its id and checks that
// the API answered with that very snapshot, active (QUAL-6). GET
// /snapshots/{id} also matches names, so an answer with another id means
// the id itself is gone: drivers.ErrImageNotFound. The snapshot is never
// looked up by name to find a replacement.
func (s *settings) verifiedSnapshot(ctx context.Context) (*apiSnapshot, error) {
	snap, err := s.c.getSnapshot(ctx, s.snapshotID)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, &errcode.Error{Target: "snapshot " + s.snapshotID,
			Message: fmt.Sprintf("The snapshot %s no longer exists at Daytona (%s): choose or capture another snapshot for this environment.", s.snapshotID, s.c.api.Host),
			Err: fmt.Errorf("daytona: snapshot id %s at %s: %w (snapshots are never resolved by name): %w",
				s.snapshotID, s.c.api.Host, drivers.ErrImageNotFound, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("daytona: snapshot id %s: %w", s.snapshotID, err)
	}
	if snap.ID != s.snapshotID {
		return nil, &errcode.Error{Target: "snapshot " + s.snapshotID,
			Message: fmt.Sprintf("The snapshot %s no longer exists at Daytona (%s): choose or capture another snapshot for this environment.", s.snapshotID, s.c.api.Host),
			Err: fmt.Errorf("daytona: snapshot id %s at %s: the API answered with snapshot %s: %w",
				s.snapshotID, s.c.api.Host, snap.ID, drivers.ErrImageNotFound)}
	}
	switch snap.State {
	case snapshotActive:
		return snap, nil
	case snapshotBuilding, snapshotPending, snapshotPulling:
		return nil, fmt.Errorf("daytona: snapshot %s (%s) at %s is %s, not yet active: %w",
			snap.ID, snap.Name, s.c.api.Host, snap.State, drivers.ErrTransient)
	case snapshotInactive:
		return nil, s.reactivate(ctx, snap)
	default:
		reason := ""
		if snap.ErrorReason != nil && *snap.ErrorReason != "" {
			reason = ": " + *snap.ErrorReason
		}
		return nil, fmt.Errorf("daytona: snapshot %s (%s) at %s is %s%s: %w",
			snap.ID, snap.Name, s.c.api.Host, snap.State, reason, drivers.ErrImageNotFound)
	}
}

// reactivate handles the configured snapshot found inactive (Daytona's
// cron marks snapshots that are not general inactive after 14 idle days,
// v0.190.0 apps/api/src/sandbox/managers/snapshot.manager.ts). When the
// config allows it, it asks POST /snapshots/{id}/activate with the id that
// was just read back as itself (never a name, QUAL-6) and returns a
// transient error, so that the caller's retry reads the snapshot again
// until it is active (pending in between). Otherwise, or when the API
// refuses the activation, the error wraps drivers.ErrImageInactive.
func (s *settings) reactivate(ctx context.Context, snap *apiSnapshot) error {
	host := s.c.api.Host
	if !s.reactivateOK {
		return fmt.Errorf("daytona: snapshot %s (%s) at %s is inactive (unused for 14 days) and %s is false: %w",
			snap.ID, snap.Name, host, fieldReactivateSnapshot, drivers.ErrImageInactive)
	}
	err := s.c.send(ctx, s.c.api, http.MethodPost, seg("snapshots", snap.ID, "activate"), nil, nil, nil)
	switch {
	case err == nil:
		s.c.log.InfoContext(ctx, "daytona: reactivated an inactive snapshot", "snapshot", snap.ID, "host", host)
	case statusOf(err) == http.StatusBadRequest && strings.Contains(messageOf(err), "already active"):
	case errors.Is(err, drivers.ErrTransient):
		return err
	default:
		return fmt.Errorf("daytona: snapshot %s (%s) at %s is inactive and could not be reactivated: %w: %w",
			snap.ID, snap.Name, host, drivers.ErrImageInactive, err)
	}
	return fmt.Errorf("daytona: snapshot %s (%s) at %s is being reactivated: %w", snap.ID, snap.Name, host, drivers.ErrTransient)
}

func newName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "berth-" + hex.EncodeToString(b[:])
}

// labelLeaseID is the label that carries the berth lease id of a sandbox.
const labelLeaseID = "berth.lease-id"

// Acquire creates a sandbox from the configured snapshot id and waits,
// within ctx's deadline, until it is started.
//
// It first reads the snapshot by id (a deleted id is
// drivers.ErrImageNotFound and nothing is created), then creates the sandbox
// by that id with a unique name, the config's and req's labels and
// intervals (the config's env is not sent: it goes with each command). As soon as the API answers it calls req.Allocated with the
// sandbox id, then checks that the sandbox reports the snapshot read by id
// (the API reports the snapshot's name, unique per organization), then
// polls its state with backoff. A sandbox in state error or build_failed
// ends the wait with the provider's errorReason. If ctx ends first, the
// error wraps ctx.Err() and the sandbox is left to finish starting: it is
// resumable by id (LEASE-4). When req.Allocated is nil nobody records the
// sandbox, so any failure after the create deletes it (best effort; after a
// cancellation the delete runs on in the background, bounded by
// Options.CleanupTimeout, so that Acquire returns promptly).
//
// A request with req.Runner set is refused before any API call, with an
// error wrapping drivers.ErrUnsupported that names runner_ingress: the
// driver has no way to carry a runner's connections back to the host.
func (d *driver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if req.Runner != nil {
		return nil, fmt.Errorf("daytona: acquire for lease %q: capability %s: the driver has no runner ingress: %w",
			req.LeaseID, drivers.CapRunnerIngress, drivers.ErrUnsupported)
	}
	s, err := d.open(cfg)
	if err != nil {
		return nil, err
	}
	var snap *apiSnapshot
	err = s.c.retry.do(ctx, func(ctx context.Context) error {
		var err error
		snap, err = s.verifiedSnapshot(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	labels := maps.Clone(s.labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, req.Labels)
	if req.LeaseID != "" {
		labels[labelLeaseID] = req.LeaseID
	}
	create := apiCreateSandbox{
		Name: newName(), Snapshot: snap.ID, Labels: labels, Target: s.target, // no Env: see fieldEnv
		AutoStopInterval: s.autoStop, AutoArchiveInterval: s.autoArch, AutoDeleteInterval: s.autoDel,
	}
	sb, err := s.c.createSandbox(ctx, create)
	if err != nil {
		return nil, d.createFailed(ctx, s, create.Name, snap, req, err)
	}
	if req.Allocated != nil {
		if aerr := req.Allocated(ctx, sb.ID); aerr != nil {
			d.cleanup(s, sb.ID)
			return nil, fmt.Errorf("daytona: sandbox %s: recording the allocation: %w", sb.ID, aerr)
		}
	}
	if s.c.org != "" && sb.OrganizationID != "" && sb.OrganizationID != s.c.org {
		d.opts.Logger.WarnContext(ctx, "daytona: organization_id does not scope API-key requests; the sandbox belongs to the key's organization",
			"sandbox", sb.ID, "configured", s.c.org, "actual", sb.OrganizationID, "host", s.c.api.Host)
	}
	fail := func(err error) (drivers.Sandbox, error) {
		switch {
		case req.Allocated != nil:
		case ctx.Err() != nil:
			// Return promptly on cancellation; the delete goes on alone.
			go d.cleanup(s, sb.ID)
		default:
			d.cleanup(s, sb.ID)
		}
		return nil, err
	}
	if sb.Snapshot != snap.Name {
		return fail(fmt.Errorf("daytona: sandbox %s at %s reports snapshot %q, not %q (id %s): %w",
			sb.ID, s.c.api.Host, sb.Snapshot, snap.Name, snap.ID, drivers.ErrImageNotFound))
	}
	started, err := d.waitStarted(ctx, s, sb)
	if err != nil {
		return fail(err)
	}
	return d.newSandbox(s, started), nil
}

// createFailed explains a failed create. The API refuses a deleted snapshot
// with 400 "Snapshot ... not found" (drivers.ErrImageNotFound), and answers
// 400 "Sandbox failed to start: ..." when the sandbox it made errored within
// its own wait: that sandbox exists, so it is found by its unique name,
// reported to req.Allocated (or deleted when nobody records it), and the
// provider's reason is returned.
func (d *driver) createFailed(ctx context.Context, s *settings, name string, snap *apiSnapshot, req drivers.AcquireRequest, err error) error {
	msg := messageOf(err)
	switch {
	case statusOf(err) == http.StatusBadRequest && strings.Contains(msg, "not found") && strings.Contains(msg, snap.ID):
		return fmt.Errorf("daytona: creating a sandbox from snapshot id %s at %s: %w: %w", snap.ID, s.c.api.Host, drivers.ErrImageNotFound, err)
	case statusOf(err) == http.StatusBadRequest && strings.HasSuffix(msg, " is "+snapshotInactive) && strings.Contains(msg, snap.ID):
		// Deactivated between the read and the create (sandbox.service.ts:
		// "Snapshot <id> is inactive").
		return fmt.Errorf("daytona: creating a sandbox from snapshot id %s at %s: %w: %w", snap.ID, s.c.api.Host, drivers.ErrImageInactive, err)
	case statusOf(err) == http.StatusBadRequest && strings.Contains(msg, "failed to start"):
		if sb, gerr := s.c.getSandbox(ctx, name); gerr == nil {
			if req.Allocated != nil {
				if aerr := req.Allocated(ctx, sb.ID); aerr != nil {
					d.cleanup(s, sb.ID)
				}
			} else {
				d.cleanup(s, sb.ID)
			}
			return fmt.Errorf("daytona: sandbox %s (snapshot %s) at %s: %s: %w", sb.ID, snap.ID, s.c.api.Host, msg, err)
		}
	}
	return fmt.Errorf("daytona: creating a sandbox from snapshot %s: %w", snap.ID, err)
}

// cleanup deletes sandbox id in the background of a failure, bounded by
// CleanupTimeout and detached from the caller's (possibly ended) context.
func (d *driver) cleanup(s *settings, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.CleanupTimeout)
	defer cancel()
	if _, err := d.destroy(ctx, s, id); err != nil {
		d.opts.Logger.Warn("daytona: best-effort delete failed", "sandbox", id, "host", s.c.api.Host, "err", err)
	}
}

// Resume returns a handle to sandbox providerLeaseID, starting it when it is
// stopped or archived, and waits within ctx's deadline until it is started.
// A sandbox still starting (also one whose earlier acquire ran out of
// budget) is waited for. A sandbox the API does not know, or one being
// deleted, is errcode.ErrNotFound; one in state error the provider's reason.
func (d *driver) Resume(ctx context.Context, cfg config.Config, providerLeaseID string) (drivers.Sandbox, error) {
	s, err := d.open(cfg)
	if err != nil {
		return nil, err
	}
	sb, err := s.c.getSandbox(ctx, providerLeaseID)
	if err != nil {
		return nil, fmt.Errorf("daytona: resuming sandbox %s: %w", providerLeaseID, err)
	}
	if sb.ID != providerLeaseID {
		// The API also matches names; a name is not the recorded sandbox.
		return nil, fmt.Errorf("daytona: resuming sandbox %s at %s: %w", providerLeaseID, s.c.api.Host, errcode.ErrNotFound)
	}
	sb, err = d.waitStarted(ctx, s, sb)
	if err != nil {
		return nil, fmt.Errorf("daytona: resuming: %w", err)
	}
	return d.newSandbox(s, sb), nil
}

// List returns the sandboxes carrying all labels, walking every cursor page
// of GET /sandbox. Sandboxes being deleted are left out.
func (d *driver) List(ctx context.Context, cfg config.Config, labels map[string]string) ([]drivers.SandboxInfo, error) {
	s, err := d.open(cfg)
	if err != nil {
		return nil, err
	}
	items, err := s.c.listSandboxes(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("daytona: listing sandboxes: %w", err)
	}
	out := make([]drivers.SandboxInfo, 0, len(items))
	for _, it := range items {
		if it.DesiredState == desiredDestroyed || it.State == stateDestroyed {
			continue
		}
		if !hasLabels(it.Labels, labels) {
			continue
		}
		out = append(out, drivers.SandboxInfo{ProviderLeaseID: it.ID, Labels: it.Labels, State: publicState(&it)})
	}
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// publicState maps the API's state to the drivers states.
func publicState(sb *apiSandbox) drivers.State {
	if sb.DesiredState == desiredDestroyed {
		return drivers.StateDestroyed
	}
	switch sb.State {
	case stateStarted:
		return drivers.StateRunning
	case stateStopped, stateArchived, stateArchiving:
		return drivers.StateStopped
	case stateDestroyed:
		return drivers.StateDestroyed
	case stateError, stateBuildFailed:
		return drivers.StateError
	case stateStopping, statePausing:
		return drivers.StateRunning
	case statePaused:
		return drivers.StateStopped
	}
	return drivers.StateStarting
}

// Destroy deletes sandbox providerLeaseID and confirms it by reading it back
// until the API answers 404 (soft delete then gone). A sandbox already gone
// gives a confirmed StateDestroyed receipt.
func (d *driver) Destroy(ctx context.Context, cfg config.Config, providerLeaseID string) (drivers.Receipt, error) {
	s, err := d.open(cfg)
	if err != nil {
		return drivers.Receipt{}, err
	}
	return d.destroy(ctx, s, providerLeaseID)
}

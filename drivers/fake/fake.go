package fake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/berthdev/berth/clock"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
)

// Name is the default driver name (Options.Name) and the provider of
// snapshot identities when Options.Name is not a valid provider name.
const Name = "fake"

// Options configure a fake Driver. The zero value (or nil) gives defaults.
type Options struct {
	// Name is the driver name; default Name ("fake"). It is also the
	// provider of snapshot identities when it is a valid provider name.
	Name string
	// Undeclared lists capabilities the fake does not declare, although it
	// still implements them all: such a fake fails the conformance suite,
	// and serves to test that an undeclared capability is never effective.
	Undeclared drivers.Set
	// Clock runs slow starts and sleep; default the wall clock.
	Clock clock.Clock
	// StartupBudget is the provider-declared startup budget; default none.
	StartupBudget time.Duration
	// StartDelay is how long sandboxes stay starting on Clock; default 0.
	StartDelay time.Duration
	// Platform is the profile sandboxes report; default PlatformDebian12().
	Platform *Platform
	// Handlers run Go code for commands. The key is argv[0] or its base
	// name ("make"), or, for "sh -c SCRIPT ...", the whole SCRIPT (for
	// example qualification.DetectScript, or a script of several commands
	// that a test sends). A handler takes precedence over the built-in
	// commands. Default none.
	Handlers map[string]HandlerFunc
	// Faults are injected from the start; see Driver.Inject.
	Faults []Fault
	// APIKey, if not "", makes the config field api_key required, and
	// Acquire, Resume, List and Destroy fail with drivers.ErrAuth unless the
	// config holds this value.
	APIKey string
	// Unavailable, if not nil, is what Availability reports: the driver is
	// listed as unavailable and has no effective capabilities (CAP-3).
	Unavailable error
}

// Driver is the fake provider and its driver. Provider state (sandboxes,
// images, snapshots, call counts, faults) lives in the Driver and is shared
// by all its sandboxes. It is safe for concurrent use.
type Driver struct {
	name, provider, apiKey string
	declared               drivers.Set
	clk                    clock.Clock
	budget                 time.Duration
	platform               Platform
	handlers               map[string]HandlerFunc
	unavail                error
	schema                 *config.Schema
	defaultImg             images.Identity

	mu         sync.Mutex
	startDelay time.Duration
	seq        int
	boxes      map[string]*box
	images     *imageTable
	calls      [numOps]int
	faults     []Fault
	lies       map[string]Lie
	wrongImage map[string]bool
}

// box is one sandbox at the fake provider. Guarded by Driver.mu.
type box struct {
	id, leaseID, hostname string
	state                 drivers.State // StateStarting resolves to running at readyAt
	readyAt, created      time.Time
	labels                map[string]string
	image                 images.Identity
	alive                 context.Context // cancelled when the sandbox stops or vanishes
	cancel                context.CancelFunc
}

func (b *box) boot(now time.Time, delay time.Duration) {
	b.alive, b.cancel = context.WithCancel(context.Background())
	b.state, b.readyAt = drivers.StateStarting, now.Add(delay)
}

// stateAt resolves a finished start.
func (b *box) stateAt(now time.Time) drivers.State {
	if b.state == drivers.StateStarting && !now.Before(b.readyAt) {
		b.state = drivers.StateRunning
	}
	return b.state
}

var (
	_ drivers.Resumer              = (*Driver)(nil)
	_ drivers.Lister               = (*Driver)(nil)
	_ drivers.Destroyer            = (*Driver)(nil)
	_ drivers.TemplateDeleter      = (*Driver)(nil)
	_ drivers.AvailabilityReporter = (*Driver)(nil)
)

// New returns a fake driver; nil opts means defaults. Its image table holds
// DefaultImage.
func New(opts *Options) *Driver {
	var o Options
	if opts != nil {
		o = *opts
	}
	d := &Driver{
		name: cmp.Or(o.Name, Name), clk: o.Clock, budget: o.StartupBudget, platform: PlatformDebian12(),
		handlers: maps.Clone(o.Handlers), apiKey: o.APIKey, unavail: o.Unavailable,
		startDelay: o.StartDelay, boxes: map[string]*box{}, images: newImageTable(),
		faults: slices.Clone(o.Faults), lies: map[string]Lie{}, wrongImage: map[string]bool{},
	}
	d.provider = d.name
	if _, err := images.SnapshotIdentity(d.provider, "x"); err != nil {
		d.provider = Name
	}
	if d.clk == nil {
		d.clk = clock.Real{}
	}
	if o.Platform != nil {
		d.platform = *o.Platform
	}
	d.declared = drivers.AllCapabilities.Without(o.Undeclared)
	d.schema = newSchema(d.name, d.apiKey != "")
	d.defaultImg = d.AddImage(DefaultImage)
	return d
}

// Name returns the driver name (Options.Name, default "fake").
func (d *Driver) Name() string { return d.name }

// Capabilities returns the static declaration: Kind sandbox, every
// capability except Options.Undeclared, Options.StartupBudget. No I/O.
func (d *Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindSandbox, Declared: d.declared, StartupBudget: d.budget}
}

// Schema returns the config schema (see the package documentation); the
// same pointer on every call.
func (d *Driver) Schema() *config.Schema { return d.schema }

// Availability returns Options.Unavailable.
func (d *Driver) Availability() error { return d.unavail }

func (d *Driver) checkKey(cfg config.Config) error {
	if d.apiKey == "" {
		return nil
	}
	switch v := cfg["api_key"].(type) {
	case nil:
		return fmt.Errorf("fake %s: field %q: %w", d.name, "api_key", config.ErrCredentialsMissing)
	case string:
		if v == d.apiKey {
			return nil
		}
	}
	return fmt.Errorf("fake %s: api key rejected: %w", d.name, drivers.ErrAuth)
}

// Acquire creates a sandbox: it counts an OpCreate call (which may fail by
// an injected fault before anything exists), resolves the config's image
// (drivers.ErrImageNotFound naming the reference), records the sandbox as
// starting with req.Labels, calls req.Allocated with its id, counts an
// OpStart (a fault leaves the sandbox in StateError and is returned), and
// waits on the driver's clock until the start delay has passed. On
// cancellation it returns an error wrapping ctx.Err(); the sandbox then still
// becomes running when the clock passes its ready time (LEASE-4).
func (d *Driver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: acquire: %w", err)
	}
	if err := d.checkKey(cfg); err != nil {
		return nil, err
	}
	d.mu.Lock()
	img, err := d.resolveImageLocked(cfg.String("image"))
	if cerr := d.callLocked(OpCreate, ""); cerr != nil || err != nil {
		d.mu.Unlock()
		return nil, cmp.Or(cerr, err)
	}
	d.seq++
	now := d.clk.Now()
	b := &box{id: fmt.Sprintf("%s-%d", d.name, d.seq), labels: maps.Clone(req.Labels), image: img, created: now, leaseID: req.LeaseID}
	b.hostname = cmp.Or(d.platform.Hostname, b.id)
	b.boot(now, d.startDelay)
	d.boxes[b.id] = b
	d.mu.Unlock()

	fail := func(st drivers.State, err error) (drivers.Sandbox, error) {
		d.mu.Lock()
		b.cancel()
		b.state = st
		d.mu.Unlock()
		return nil, err
	}
	if req.Allocated != nil {
		if err := req.Allocated(ctx, b.id); err != nil {
			return fail(drivers.StateDestroyed, err)
		}
	}
	d.mu.Lock()
	err = d.callLocked(OpStart, b.id)
	d.mu.Unlock()
	if err != nil {
		return fail(drivers.StateError, err)
	}
	return d.waitRunning(ctx, b.id)
}

// waitRunning waits on the clock until the sandbox id runs.
func (d *Driver) waitRunning(ctx context.Context, id string) (drivers.Sandbox, error) {
	for {
		d.mu.Lock()
		b, ok := d.boxes[id]
		if !ok {
			d.mu.Unlock()
			return nil, fmt.Errorf("fake: sandbox %s vanished while starting: %w", id, drivers.ErrNotFound)
		}
		now := d.clk.Now()
		st, wait := b.stateAt(now), b.readyAt.Sub(now)
		d.mu.Unlock()
		switch st {
		case drivers.StateRunning:
			return &sandbox{d: d, id: id}, nil
		case drivers.StateStarting:
		default:
			return nil, fmt.Errorf("fake: sandbox %s is %s, not starting", id, st)
		}
		select {
		case <-d.clk.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("fake: sandbox %s still starting: %w", id, ctx.Err())
		}
	}
}

// Resume returns a handle to the sandbox providerLeaseID: a running one at
// once, a starting one once it runs, a stopped one after starting it again
// (an OpStart call, with the current start delay). It fails with an error
// wrapping drivers.ErrNotFound when the sandbox is unknown, lost or
// destroyed, and with ctx.Err() wrapped when the context ends first. The
// config is not consulted beyond its api_key.
func (d *Driver) Resume(ctx context.Context, cfg config.Config, providerLeaseID string) (drivers.Sandbox, error) {
	if err := d.checkKey(cfg); err != nil {
		return nil, err
	}
	if err := d.resume(providerLeaseID); err != nil {
		return nil, err
	}
	return d.waitRunning(ctx, providerLeaseID)
}

// resume counts the resume and starts a stopped sandbox again.
func (d *Driver) resume(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.callLocked(OpResume, id); err != nil {
		return err
	}
	b, ok := d.boxes[id]
	if !ok || b.state == drivers.StateDestroyed {
		return fmt.Errorf("fake: resume %s: %w", id, drivers.ErrNotFound)
	}
	now := d.clk.Now()
	switch b.stateAt(now) {
	case drivers.StateStopped:
		if err := d.callLocked(OpStart, b.id); err != nil {
			return err
		}
		b.boot(now, d.startDelay)
	case drivers.StateError:
		return fmt.Errorf("fake: resume %s: sandbox failed to start", id)
	}
	return nil
}

// List returns the sandboxes that carry every label of labels (all of them
// for no labels), destroyed ones excluded, sorted by id.
func (d *Driver) List(ctx context.Context, cfg config.Config, labels map[string]string) ([]drivers.SandboxInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: list: %w", err)
	}
	if err := d.checkKey(cfg); err != nil {
		return nil, err
	}
	d.mu.Lock()
	err := d.callLocked(OpList, "")
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var out []drivers.SandboxInfo
	for _, b := range d.Sandboxes() {
		if b.State != drivers.StateDestroyed && hasLabels(b.Labels, labels) {
			out = append(out, drivers.SandboxInfo{ProviderLeaseID: b.ID, Labels: b.Labels, State: b.State, CreatedAt: b.Created})
		}
	}
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// Destroy destroys the sandbox providerLeaseID without a handle. An unknown,
// lost or already destroyed sandbox gives a confirmed StateDestroyed
// receipt. Injected faults for OpDestroy and stop lies (FakeStop) apply.
func (d *Driver) Destroy(ctx context.Context, cfg config.Config, providerLeaseID string) (drivers.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return drivers.Receipt{}, fmt.Errorf("fake: destroy %s: %w", providerLeaseID, err)
	}
	if err := d.checkKey(cfg); err != nil {
		return drivers.Receipt{}, err
	}
	return d.terminate(providerLeaseID, drivers.Destroy)
}

// terminate stops or destroys the sandbox id and reads its state back.
func (d *Driver) terminate(id string, disp drivers.Disposition) (drivers.Receipt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	op, want := OpDestroy, drivers.StateDestroyed
	if disp == drivers.Stop {
		op, want = OpStop, drivers.StateStopped
	}
	if err := d.callLocked(op, id); err != nil {
		return drivers.Receipt{}, err
	}
	now := d.clk.Now()
	proof := func(pid string, st drivers.State, kind drivers.EvidenceKind, ev string) drivers.Receipt {
		return drivers.Receipt{ProviderLeaseID: pid, State: st, Confirmed: true, EvidenceKind: kind, ConfirmedAt: now, Evidence: ev}
	}
	b, ok := d.boxes[id]
	if lie, lying := d.lies[id]; lying && ok {
		switch lie {
		case LieForeignID:
			return proof(id+"-other", want, drivers.EvidenceProvider, "read back "+id+"-other"), nil
		case LieRunnerAttested:
			return proof(id, want, drivers.EvidenceRunnerAttested, "the runner says its tasks ended"), nil
		}
		return drivers.Receipt{ProviderLeaseID: id, State: want, Evidence: op.String() + " accepted"}, nil
	}
	if !ok {
		return proof(id, drivers.StateDestroyed, drivers.EvidenceProvider, "sandbox not found at provider"), nil
	}
	b.cancel()
	if b.state != drivers.StateDestroyed {
		b.state = want
	}
	return proof(id, b.state, drivers.EvidenceProvider, "state read back: "+string(b.state)), nil
}

// DeleteTemplate deletes a captured snapshot (or an image) of this provider;
// deleting one that is gone is a confirmed receipt. A snapshot identity of
// another provider is an error wrapping drivers.ErrNotFound.
func (d *Driver) DeleteTemplate(ctx context.Context, cfg config.Config, id images.Identity) (drivers.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return drivers.Receipt{}, fmt.Errorf("fake: delete template %s: %w", id, err)
	}
	if err := d.checkKey(cfg); err != nil {
		return drivers.Receipt{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.callLocked(OpDeleteTemplate, ""); err != nil {
		return drivers.Receipt{}, err
	}
	if id.Kind() == images.KindSnapshot && id.Provider() != d.provider {
		return drivers.Receipt{}, fmt.Errorf("fake: delete template %s: not a snapshot of provider %q: %w", id, d.provider, drivers.ErrNotFound)
	}
	d.removeImageLocked(id)
	return drivers.Receipt{
		State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: d.clk.Now().UTC(),
		Evidence: "template removed: " + id.String(), EvidenceKind: drivers.EvidenceProvider,
	}, nil
}

// SandboxRecord is one sandbox as Driver.Sandboxes reports it.
type SandboxRecord struct {
	ID      string
	State   drivers.State
	Labels  map[string]string
	Image   images.Identity
	LeaseID string // AcquireRequest.LeaseID
	Created time.Time
}

// Sandboxes returns every sandbox the provider knows, destroyed ones
// included and lost ones excluded, sorted by id ("name-N" by N), for leak
// checks. It is not an operation of the provider and is not counted.
func (d *Driver) Sandboxes() []SandboxRecord {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clk.Now()
	out := make([]SandboxRecord, 0, len(d.boxes))
	for _, b := range d.boxes {
		out = append(out, SandboxRecord{ID: b.id, State: b.stateAt(now), Labels: maps.Clone(b.labels), Image: b.image, LeaseID: b.leaseID, Created: b.created})
	}
	slices.SortFunc(out, func(a, b SandboxRecord) int { return cmp.Or(len(a.ID)-len(b.ID), cmp.Compare(a.ID, b.ID)) })
	return out
}

// State returns the provider state of the sandbox id, and false when the
// provider has no such sandbox (never created, or lost). Not counted.
func (d *Driver) State(id string) (drivers.State, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.boxes[id]; ok {
		return b.stateAt(d.clk.Now()), true
	}
	return drivers.StateUnknown, false
}

// DefaultImageIdentity returns the identity DefaultImage had when the driver
// was created.
func (d *Driver) DefaultImageIdentity() images.Identity { return d.defaultImg }

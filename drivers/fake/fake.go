package fake

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/fakectl"
)

// Name is the default driver name (Options.Name) and the provider of
// snapshot identities when Options.Name is not a valid provider name.
const Name = "fake"

// Config field names of the fake driver that tests set. Its schema also
// has the knob startup_timeout and the metadata notes; region defaults to
// "local-1".
const (
	fieldImage  = "image"
	fieldRegion = "region"
	fieldCPUs   = "cpus"
	fieldAPIKey = "api_key"
)

const (
	fieldStartupTimeout = "startup_timeout"
	fieldNotes          = "notes"
	defaultRegion       = "local-1"
)

// Options configure a fake Driver. The zero value (or nil) gives defaults.
type Options struct {
	Name string // default Name; also the snapshots' provider if a valid provider name
	// Undeclared lists capabilities the fake does not declare, though it
	// implements them all: to test that such a capability is never used.
	// Default none: the fake declares every capability.
	Undeclared drivers.Set
	// Platform names the operating system sandboxes report through the
	// built-in commands and the detection script: "debian-12" (Debian 12
	// on x86_64, glibc 2.36; the default, also for ""), "alpine" (Alpine
	// 3.19 on x86_64, musl 1.2.4) or "busybox" (a static busybox on x86_64:
	// no C library, no /etc/os-release). New panics on another name.
	Platform string
	// Handlers run Go code for commands, before the built-ins. The key is
	// argv[0] or its base name ("make"), or, for "sh -c SCRIPT ...", the
	// whole SCRIPT (a test's script, or one berth sends, to answer it
	// otherwise). Default none: the built-ins only.
	Handlers map[string]HandlerFunc
	APIKey   string // if not "", the api_key every operation needs (else drivers.ErrAuth)
	// Unavailable, if not nil, is what Availability reports: the driver is
	// listed as unavailable and has no effective capabilities (CAP-3).
	Unavailable error
	// Isolation is the level the fake declares for every config
	// (drivers.IsolationDeclarer). Default IsolationNone. Its sandboxes run
	// in this process, so only a harness that answers the suite's
	// measurement (HostKernel, handlers) proves more.
	Isolation drivers.Isolation
}

// Driver is the fake provider and its driver; its state is shared by all
// its sandboxes. It is safe for concurrent use.
type Driver struct {
	o              Options
	clock          clock.Clock   // runs slow starts and sleep; default the wall clock
	startupBudget  time.Duration // the provider-declared startup budget; default none
	startDelay     time.Duration // how long sandboxes stay starting on clock; guarded by mu
	deleteInUse    bool          // DeleteTemplate deletes what sandboxes use (as Daytona); guarded by mu
	name, provider string
	declared       drivers.Set
	platform       platform
	schema         *config.Schema
	defaultImg     images.Identity
	mu             sync.Mutex
	seq            int
	boxes          map[string]*box
	images         imageTable
	calls          [numOps]int
	faults         []fault // injected by Inject, FailNth and RefuseStop
	lies           map[string]string
	wrongImage     map[string]bool
}

// box is one sandbox at the fake provider. Guarded by Driver.mu.
type box struct {
	fakectl.Sandbox          // State StateStarting resolves to running at readyAt; Labels unset (labels)
	leaseID         string   // AcquireRequest.LeaseID
	labels          []string // the labels as key, value pairs: a third of a small map's size, for a table that keeps every sandbox
	readyAt         time.Time
	alive           context.Context // cancelled and dropped (end) when the sandbox stops or vanishes
	cancel          context.CancelFunc
	files           map[string]*node // drivers.Files' tree under the working directory, by cleaned relative path; guarded by Driver.mu
}

func (b *box) boot(now time.Time, delay time.Duration) {
	b.alive, b.cancel = context.WithCancel(context.Background())
	b.State, b.readyAt = drivers.StateStarting, now.Add(delay)
}

// labelPairs returns m as key, value pairs (nil for nil).
func labelPairs(m map[string]string) []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}

// labelMap returns the sandbox's labels as a map of the caller's (nil when
// it was acquired with nil labels).
func (b *box) labelMap() map[string]string {
	if b.labels == nil {
		return nil
	}
	m := make(map[string]string, len(b.labels)/2)
	for i := 0; i < len(b.labels); i += 2 {
		m[b.labels[i]] = b.labels[i+1]
	}
	return m
}

// carries reports whether the sandbox carries every label of want.
func (b *box) carries(want map[string]string) bool {
	for k, v := range want {
		found := false
		for i := 0; i < len(b.labels); i += 2 {
			if b.labels[i] == k {
				found = b.labels[i+1] == v
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// end cancels the context of the sandbox's processes and drops it: a
// sandbox that stopped, failed or was destroyed hands it out no more (a
// resume boots a new one), and a destroyed one stays in the table for
// Sandboxes for as long as the driver lives.
func (b *box) end() {
	if b.cancel != nil {
		b.cancel()
		b.alive, b.cancel = nil, nil
	}
}

// stateAt resolves a finished start.
func (b *box) stateAt(now time.Time) drivers.State {
	if b.State == drivers.StateStarting && !now.Before(b.readyAt) {
		b.State = drivers.StateRunning
	}
	return b.State
}

// New returns a fake driver; nil opts means defaults. Its image table holds
// DefaultImage.
func New(opts *Options) *Driver {
	d := &Driver{o: *cmp.Or(opts, &Options{}), boxes: map[string]*box{}, lies: map[string]string{}, wrongImage: map[string]bool{},
		images: imageTable{ids: map[images.Identity]bool{}, names: map[string]images.Identity{}, pushes: map[string]int{}}}
	d.o.Handlers, d.name, d.provider = maps.Clone(d.o.Handlers), cmp.Or(d.o.Name, Name), Name
	if _, err := images.SnapshotIdentity(d.name, "x"); err == nil {
		d.provider = d.name
	}
	d.clock = clock.Real{}
	plat, ok := platforms[cmp.Or(d.o.Platform, platformDebian12)]
	if !ok {
		panic("fake: unknown Options.Platform " + strconv.Quote(d.o.Platform))
	}
	d.platform = plat
	d.declared = allCapabilities &^ d.o.Undeclared
	d.schema, d.defaultImg = d.newSchema(), d.AddImage(DefaultImage)
	return d
}

// allCapabilities is every capability: the fake implements them all.
var allCapabilities = drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList,
	drivers.CapDestroyByID, drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapTemplateCapture,
	drivers.CapTemplateDelete, drivers.CapRunnerIngress, drivers.CapFiles)

// controls are the test controls of a Driver (internal/fakectl).
type controls Driver

func init() {
	fakectl.Of = func(d any) fakectl.Controls { return (*controls)(d.(*Driver)) }
}

func (d *Driver) newSchema() *config.Schema {
	image := func(v any) error {
		s, _ := v.(string)
		_, err := d.parseImage(s)
		return err
	}
	cpus := func(v any) error {
		if n, _ := v.(int64); n < 1 || n > 64 {
			return errors.New("must be between 1 and 64")
		}
		return nil
	}
	return &config.Schema{Driver: d.name, ImageField: fieldImage, Fields: []config.Field{
		{Name: fieldImage, Kind: config.KindIdentity, Type: config.TypeString, Check: image, Doc: "OCI reference " +
			"(repo:tag or repo@sha256:...), snapshot:<id> or snapshot-name:<name>; absent: the provider default image"},
		{Name: fieldRegion, Advanced: true, Kind: config.KindIdentity, Type: config.TypeString, Default: defaultRegion, Doc: "provider region; part of the target's identity"},
		{Name: fieldCPUs, Kind: config.KindKnob, Type: config.TypeInt, Default: int64(1), Check: cpus, Doc: "CPUs per sandbox (1-64)"},
		{Name: fieldStartupTimeout, Advanced: true, Kind: config.KindKnob, Type: config.TypeDuration, Doc: "startup budget of a lease; absent: the provider-declared one"},
		{Name: fieldAPIKey, Kind: config.KindSecret, Type: config.TypeString, Required: d.o.APIKey != "",
			Doc: "provider API key (required when the fake driver was started with one)"},
		{Name: fieldNotes, Advanced: true, Kind: config.KindMetadata, Type: config.TypeString, Doc: "free text for operators"},
	}, ImageReference: func(cfg config.Config) (images.Reference, error) { return d.parseImage(cfg.String(fieldImage)) }}
}

// Name returns the driver name (Options.Name, default Name).
func (d *Driver) Name() string { return d.name }

// Capabilities declares every capability but Options.Undeclared. No I/O.
func (d *Driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindSandbox, Declared: d.declared, StartupBudget: d.startupBudget}
}

// Schema returns the config schema, the same pointer on every call.
func (d *Driver) Schema() *config.Schema { return d.schema }

// Availability returns Options.Unavailable.
func (d *Driver) Availability() error { return d.o.Unavailable }

// Endpoint implements drivers.HealthChecker: "NAME region R". No I/O.
func (d *Driver) Endpoint(cfg config.Config) string {
	return d.name + " region " + cmp.Or(cfg.String(fieldRegion), defaultRegion)
}

// CheckHealth implements drivers.HealthChecker. It counts an opHealth, so a
// fault injected for it makes the provider unhealthy (an error wrapping
// drivers.ErrUnavailable and the fault's error).
func (d *Driver) CheckHealth(ctx context.Context, cfg config.Config) error {
	if err := d.enter(ctx, cfg, "health"); err != nil {
		return err
	}
	if err := d.call(opHealth, ""); err != nil {
		return fmt.Errorf("fake %s: %w: %w", d.Endpoint(cfg), drivers.ErrUnavailable, err)
	}
	return nil
}

// enter checks ctx and the config's api key before the operation what.
func (d *Driver) enter(ctx context.Context, cfg config.Config, what string) error {
	switch v := cfg[fieldAPIKey]; {
	case ctx.Err() != nil:
		return fmt.Errorf("fake: %s: %w", what, ctx.Err())
	case d.o.APIKey == "" || v == any(d.o.APIKey):
		return nil
	case v == nil:
		return fmt.Errorf("fake %s: field %q: %w", d.name, fieldAPIKey, config.ErrCredentialsMissing)
	}
	return fmt.Errorf("fake %s: api key rejected: %w", d.name, drivers.ErrAuth)
}

// Acquire counts an opCreate (a fault fails it before anything exists),
// resolves the image (drivers.ErrImageNotFound), records the sandbox,
// calls req.Allocated, counts an opStart (a fault leaves it in StateError)
// and waits on the clock for the start delay; cancelled, the sandbox still
// starts (LEASE-4).
func (d *Driver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if err := d.enter(ctx, cfg, "acquire"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	img, err := d.resolveImageLocked(cfg.String(fieldImage))
	if cerr := d.callLocked(opCreate, ""); cerr != nil || err != nil {
		d.mu.Unlock()
		return nil, cmp.Or(cerr, err)
	}
	d.seq++
	now := d.clock.Now()
	b := &box{Sandbox: fakectl.Sandbox{ID: d.name + "-" + strconv.Itoa(d.seq), Image: img}, leaseID: req.LeaseID, labels: labelPairs(req.Labels)}
	b.boot(now, d.startDelay)
	d.boxes[b.ID] = b
	d.mu.Unlock()
	st := drivers.StateDestroyed
	if req.Allocated != nil {
		err = req.Allocated(ctx, b.ID)
	}
	if err == nil {
		if st, err = drivers.StateError, d.call(opStart, b.ID); err == nil {
			return d.waitRunning(ctx, b.ID)
		}
	}
	d.locked(func() { b.end(); b.State = st })
	return nil, err
}

// waitRunning waits on the clock until the sandbox id runs.
func (d *Driver) waitRunning(ctx context.Context, id string) (drivers.Sandbox, error) {
	for {
		d.mu.Lock()
		b, now := d.boxes[id], d.clock.Now()
		st, wait := drivers.State(""), time.Duration(0)
		if b != nil {
			st, wait = b.stateAt(now), b.readyAt.Sub(now)
		}
		d.mu.Unlock()
		switch {
		case b == nil:
			return nil, fmt.Errorf("fake: sandbox %s vanished while starting: %w", id, errcode.ErrNotFound)
		case st == drivers.StateRunning:
			return &sandbox{d: d, id: id}, nil
		case st != drivers.StateStarting:
			return nil, fmt.Errorf("fake: sandbox %s is %s, not starting", id, st)
		}
		select {
		case <-d.clock.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("fake: sandbox %s still starting: %w", id, ctx.Err())
		}
	}
}

// Resume returns a handle to the sandbox id once it runs, starting a stopped
// one again (an opStart, with the current start delay). An unknown, lost or
// destroyed sandbox is an error wrapping errcode.ErrNotFound.
func (d *Driver) Resume(ctx context.Context, cfg config.Config, id string) (drivers.Sandbox, error) {
	if err := d.enter(ctx, cfg, "resume "+id); err != nil {
		return nil, err
	}
	d.mu.Lock()
	err := d.callLocked(opResume, id)
	b, ok := d.boxes[id]
	switch now := d.clock.Now(); {
	case err != nil:
	case !ok || b.State == drivers.StateDestroyed:
		err = fmt.Errorf("fake: resume %s: %w", id, errcode.ErrNotFound)
	case b.stateAt(now) == drivers.StateError:
		err = fmt.Errorf("fake: resume %s: sandbox failed to start", id)
	case b.State == drivers.StateStopped:
		if err = d.callLocked(opStart, id); err == nil {
			b.boot(now, d.startDelay)
		}
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return d.waitRunning(ctx, id)
}

// List returns the sandboxes not destroyed that carry every label of
// labels, sorted by id.
func (d *Driver) List(ctx context.Context, cfg config.Config, labels map[string]string) ([]drivers.SandboxInfo, error) {
	if err := d.enter(ctx, cfg, "list"); err != nil {
		return nil, err
	}
	if err := d.call(opList, ""); err != nil {
		return nil, err
	}
	d.mu.Lock() // a filter under the lock: destroyed sandboxes cost no copy
	defer d.mu.Unlock()
	var out []drivers.SandboxInfo
	for _, b := range d.boxes {
		if b.stateAt(d.clock.Now()) == drivers.StateDestroyed {
			continue
		}
		if b.carries(labels) {
			out = append(out, drivers.SandboxInfo{ProviderLeaseID: b.ID, Labels: b.labelMap(), State: b.State})
		}
	}
	slices.SortFunc(out, func(a, b drivers.SandboxInfo) int { return byID(a.ProviderLeaseID, b.ProviderLeaseID) })
	return out, nil
}

// Destroy destroys the sandbox providerLeaseID without a handle, as
// Release(Destroy) does.
func (d *Driver) Destroy(ctx context.Context, cfg config.Config, providerLeaseID string) (drivers.Receipt, error) {
	if err := d.enter(ctx, cfg, "destroy "+providerLeaseID); err != nil {
		return drivers.Receipt{}, err
	}
	return d.terminate(providerLeaseID, drivers.Destroy)
}

// proof is a confirmed receipt on ev, of kind (default EvidenceProvider).
func (d *Driver) proof(id string, st drivers.State, kind drivers.EvidenceKind, ev string) drivers.Receipt {
	return drivers.Receipt{ProviderLeaseID: id, State: st, Confirmed: true, EvidenceKind: cmp.Or(kind, drivers.EvidenceProvider), ConfirmedAt: d.clock.Now(), Evidence: ev}
}

// terminate stops or destroys the sandbox id and reads its state back.
func (d *Driver) terminate(id string, disp drivers.Disposition) (drivers.Receipt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	op, want := opDestroy, drivers.StateDestroyed
	if disp == drivers.Stop {
		op, want = opStop, drivers.StateStopped
	}
	if err := d.callLocked(op, id); err != nil {
		return drivers.Receipt{}, err
	}
	b, ok := d.boxes[id]
	switch lie, lying := d.lies[id]; {
	case lying && ok && lie == lieForeignID:
		return d.proof(id+"-other", want, "", "read back "+id+"-other"), nil
	case lying && ok && lie == lieRunnerAttested:
		return d.proof(id, want, drivers.EvidenceRunnerAttested, "the runner says its tasks ended"), nil
	case lying && ok:
		return drivers.Receipt{ProviderLeaseID: id, State: want, Evidence: op.String() + " accepted"}, nil
	case !ok:
		return d.proof(id, drivers.StateDestroyed, "", "sandbox not found at provider"), nil
	}
	b.end()
	if b.State != drivers.StateDestroyed {
		b.State = want
	}
	return d.proof(id, b.State, "", "state read back: "+string(b.State)), nil
}

// DeleteTemplate deletes an image or snapshot of this provider, with a
// confirmed receipt, also when it is gone. Another provider's snapshot is an
// error wrapping errcode.ErrNotFound; a template that sandboxes not yet
// destroyed were created from, one wrapping drivers.ErrInUse naming them.
func (d *Driver) DeleteTemplate(ctx context.Context, cfg config.Config, id images.Identity) (drivers.Receipt, error) {
	if err := d.enter(ctx, cfg, "delete template "+id.String()); err != nil {
		return drivers.Receipt{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.callLocked(opDeleteTemplate, ""); err != nil {
		return drivers.Receipt{}, err
	}
	if id.SnapshotID() != "" && id.Provider() != d.provider {
		return drivers.Receipt{}, fmt.Errorf("fake: delete template %s: not a snapshot of provider %q: %w", id, d.provider, errcode.ErrNotFound)
	}
	var users []string
	for _, b := range d.boxes {
		if b.Image == id && b.State != drivers.StateDestroyed {
			users = append(users, b.ID)
		}
	}
	if slices.SortFunc(users, byID); len(users) > 0 && !d.deleteInUse {
		return drivers.Receipt{}, fmt.Errorf("fake: delete template %s: in use by sandbox %s: %w", id, strings.Join(users, ", "), drivers.ErrInUse)
	}
	d.images.remove(id)
	r := d.proof("", drivers.StateDestroyed, "", "template removed: "+id.String())
	r.ConfirmedAt = r.ConfirmedAt.UTC()
	return r, nil
}

// byID orders provider ids "name-N" by N.
func byID(a, b string) int { return cmp.Or(len(a)-len(b), cmp.Compare(a, b)) }

// Sandboxes implements fakectl.Controls.
func (c *controls) Sandboxes() []fakectl.Sandbox {
	d := (*Driver)(c)
	d.mu.Lock()
	defer d.mu.Unlock()
	out, now := make([]fakectl.Sandbox, 0, len(d.boxes)), d.clock.Now()
	for _, b := range d.boxes {
		out = append(out, fakectl.Sandbox{ID: b.ID, State: b.stateAt(now), Labels: b.labelMap(), Image: b.Image})
	}
	slices.SortFunc(out, func(a, b fakectl.Sandbox) int { return byID(a.ID, b.ID) })
	return out
}

// State implements fakectl.Controls.
func (c *controls) State(id string) (drivers.State, bool) {
	d := (*Driver)(c)
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.boxes[id]; ok {
		return b.stateAt(d.clock.Now()), true
	}
	return "", false
}

// DefaultImageIdentity returns what DefaultImage named at New.
func (d *Driver) DefaultImageIdentity() images.Identity { return d.defaultImg }

// opKind is one provider operation of the fake, for counters and fault
// injection (fakectl.Controls), which name it by its String. Every call is
// counted, failed ones included.
type opKind int

// The operations.
const (
	opCreate         opKind = iota // the create call of Acquire, before a sandbox exists
	opStart                        // starts a created sandbox (Acquire, after Allocated) or a stopped one (Resume)
	opExec                         // Sandbox.Exec
	opStream                       // StreamExecer.Start
	opTerminal                     // Terminal.OpenTerminal
	opStop                         // Release(Stop)
	opDestroy                      // Release(Destroy) and Destroyer.Destroy
	opResume                       // Resumer.Resume
	opList                         // Lister.List
	opImageIdentity                // ImageReporter.ImageIdentity
	opCapture                      // Capturer.Capture
	opDeleteTemplate               // TemplateDeleter.DeleteTemplate
	opHealth                       // drivers.HealthChecker.CheckHealth
	opRunner                       // drivers.RunnerHost.HostRunner and RunnerIngress.Launch
	opFiles                        // drivers.Files: PutArchive, GetArchive, ReadDir
	numOps
)

var opNames = strings.Fields("create start exec stream terminal stop destroy resume list image_identity capture delete_template health runner files")

// String returns the operation's name ("create", "exec", ...).
func (o opKind) String() string {
	if o >= 0 && o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// parseOp returns the operation op names; it panics on another name.
func parseOp(op string) opKind {
	if i := slices.Index(opNames, op); i >= 0 {
		return opKind(i)
	}
	panic(fmt.Sprintf("fake: unknown operation %q (want one of %s)", op, strings.Join(opNames, ", ")))
}

// fault is an injected fakectl.Fault.
type fault struct {
	op  opKind
	err error
	// nth, if > 0, fails only the nth call of op (1-based, as Calls
	// counts): FailNth sets it.
	nth int
	// sandbox, if not "", fails only calls about that provider lease id:
	// RefuseStop sets it.
	sandbox string
}

// The lies of FakeStop: false stop confirmations the fake can give.
const (
	lieUnconfirmed    = "unconfirmed"     // an unconfirmed receipt ("stop accepted")
	lieForeignID      = "foreign_id"      // a confirmed receipt for another provider lease id
	lieRunnerAttested = "runner_attested" // a confirmed receipt on the runner's word only (drivers.EvidenceRunnerAttested)
)

// Inject implements fakectl.Controls.
func (c *controls) Inject(f fakectl.Fault) { (*Driver)(c).inject(fault{op: parseOp(f.Op), err: f.Err}) }

func (d *Driver) inject(f fault) { d.locked(func() { d.faults = append(d.faults, f) }) }

// FailNth implements fakectl.Controls.
func (c *controls) FailNth(op string, n int, err error) {
	if n <= 0 {
		panic("fake: FailNth needs n >= 1")
	}
	(*Driver)(c).inject(fault{op: parseOp(op), nth: n, err: err})
}

// RefuseStop implements fakectl.Controls.
func (c *controls) RefuseStop(id string, err error) {
	d := (*Driver)(c)
	d.inject(fault{op: opStop, sandbox: id, err: err})
	d.inject(fault{op: opDestroy, sandbox: id, err: err})
}

// FakeStop implements fakectl.Controls.
func (c *controls) FakeStop(id, lie string) {
	if lie != lieUnconfirmed && lie != lieForeignID && lie != lieRunnerAttested {
		panic(fmt.Sprintf("fake: unknown lie %q", lie))
	}
	(*Driver)(c).locked(func() { c.lies[id] = lie })
}

// ReportWrongImage implements fakectl.Controls.
func (c *controls) ReportWrongImage(id string) {
	(*Driver)(c).locked(func() { c.wrongImage[id] = true })
}

// ClearFaults implements fakectl.Controls.
func (c *controls) ClearFaults() {
	(*Driver)(c).locked(func() { c.faults, c.lies, c.wrongImage = nil, map[string]string{}, map[string]bool{} })
}

// SetStartDelay implements fakectl.Controls.
func (c *controls) SetStartDelay(delay time.Duration) {
	(*Driver)(c).locked(func() { c.startDelay = delay })
}

// SetClock implements fakectl.Controls.
func (c *controls) SetClock(clk clock.Clock) { c.clock = clk }

// SetStartupBudget implements fakectl.Controls.
func (c *controls) SetStartupBudget(budget time.Duration) { c.startupBudget = budget }

// SetDeleteInUse implements fakectl.Controls.
func (c *controls) SetDeleteInUse(on bool) { (*Driver)(c).locked(func() { c.deleteInUse = on }) }

// Lose implements fakectl.Controls.
func (c *controls) Lose(id string) error {
	d := (*Driver)(c)
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.boxes[id]; ok {
		b.end()
		delete(d.boxes, id)
		return nil
	}
	return fmt.Errorf("fake: lose %s: %w", id, errcode.ErrNotFound)
}

// Calls implements fakectl.Controls.
func (c *controls) Calls(op string) (n int) {
	o := parseOp(op)
	(*Driver)(c).locked(func() { n = c.calls[o] })
	return n
}

// TotalCalls implements fakectl.Controls.
func (c *controls) TotalCalls() (n int) {
	(*Driver)(c).locked(func() {
		for _, k := range c.calls {
			n += k
		}
	})
	return n
}

func (d *Driver) locked(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// call counts a call of op about sandbox id and returns its fault's error.
func (d *Driver) call(op opKind, id string) (err error) {
	d.locked(func() { err = d.callLocked(op, id) })
	return err
}

// callLocked is call with d.mu held.
func (d *Driver) callLocked(op opKind, id string) error {
	d.calls[op]++
	n := d.calls[op]
	for _, f := range d.faults {
		if f.op == op && (f.nth <= 0 || f.nth == n) && (f.sandbox == "" || f.sandbox == id) {
			err := cmp.Or(f.err, fmt.Errorf("injected failure: %w", drivers.ErrTransient))
			return fmt.Errorf("fake: %s (call %d): %w", strings.TrimSpace(op.String()+" "+id), n, err)
		}
	}
	return nil
}

// Image config values.
const (
	// DefaultImage is the tag every image table starts with, which sandboxes
	// without an image run (a provider default: QUAL-5).
	DefaultImage       = "registry.fake.test/berth/base:latest"
	snapshotPrefix     = "snapshot:"      // "snapshot:<id>", or an identity's "snapshot:<provider>/<id>"
	snapshotNamePrefix = "snapshot-name:" // "snapshot-name:<name>", resolved at each Acquire
)

// imageTable is the provider's images: ids can be pulled, names resolve to
// one of them ("repo:tag" to a digest, "snapshot-name:<name>" to a
// snapshot). Guarded by Driver.mu.
type imageTable struct {
	ids    map[images.Identity]bool
	names  map[string]images.Identity
	pushes map[string]int // times each name was pushed
}

// push points name at a new identity made from a seed derived from the name
// and its pushes.
func (t *imageTable) push(name string, mk func(seed string) (images.Identity, error)) images.Identity {
	t.pushes[name]++
	id, _ := mk(fmt.Sprintf("%s#%d", name, t.pushes[name])) // cannot fail: the parts are valid
	t.ids[id], t.names[name] = true, id
	return id
}

// remove deletes id and the names of it.
func (t *imageTable) remove(id images.Identity) {
	delete(t.ids, id)
	maps.DeleteFunc(t.names, func(_ string, v images.Identity) bool { return v == id })
}

func fakeDigest(seed string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(seed))) }

// parseImage reads an image config value: snapshotPrefix and
// snapshotNamePrefix without a provider name this provider's snapshots; ""
// is the provider default (the zero Reference).
func (d *Driver) parseImage(raw string) (images.Reference, error) {
	for _, p := range []string{snapshotNamePrefix, snapshotPrefix} {
		if rest, ok := strings.CutPrefix(raw, p); ok && !strings.Contains(rest, "/") {
			raw = p + d.provider + "/" + rest
		}
	}
	if raw == "" {
		return images.Reference{}, nil
	}
	return images.ParseReference(raw)
}

// AddImage pushes ref to the image table and returns the identity it names:
// a tag gets a new digest derived from it and its pushes (pushing it again
// moves it; the old digest stays), a digest is registered. It panics on a
// malformed or snapshot reference.
func (d *Driver) AddImage(ref string) images.Identity {
	r, err := images.ParseReference(ref)
	if err != nil || r.Repository() == "" {
		panic(fmt.Sprintf("fake: AddImage(%q): not an OCI reference: %v", ref, err))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := r.Identity(); ok {
		d.images.ids[id] = true
		return id
	}
	return d.images.push(r.Repository()+":"+r.Tag(), func(seed string) (images.Identity, error) {
		return images.DigestIdentity(r.Repository(), fakeDigest(seed))
	})
}

// AddSnapshot implements fakectl.Controls.
func (c *controls) AddSnapshot(snapName string) string {
	d := (*Driver)(c)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.images.push(snapshotNamePrefix+snapName, func(seed string) (images.Identity, error) {
		return images.SnapshotIdentity(d.provider, "snap-"+fakeDigest(seed)[7:19])
	}).SnapshotID()
}

// DeleteSnapshot implements fakectl.Controls.
func (c *controls) DeleteSnapshot(id string) {
	d := (*Driver)(c)
	d.mu.Lock()
	defer d.mu.Unlock()
	if sid, err := images.SnapshotIdentity(d.provider, id); err == nil {
		d.images.remove(sid)
	}
}

// resolveImageLocked returns the identity the image config value names
// now, or an error wrapping drivers.ErrImageNotFound that quotes it.
func (d *Driver) resolveImageLocked(raw string) (images.Identity, error) {
	raw = cmp.Or(raw, DefaultImage)
	r, err := d.parseImage(raw)
	if err != nil {
		return images.Identity{}, fmt.Errorf("fake: image %w", err)
	}
	id, _ := r.Identity() // a digest or a snapshot id
	switch r.Kind() {
	case images.RefTag:
		id = d.images.names[r.Repository()+":"+r.Tag()]
	case images.RefSnapshotName:
		id = d.images.names[snapshotNamePrefix+r.SnapshotName()]
	}
	p := r.Provider()
	if (p == "" || p == d.provider) && d.images.ids[id] {
		return id, nil
	}
	why := map[images.RefKind]string{images.RefTag: "no such tag", images.RefDigest: "no such digest", images.RefSnapshotID: "no snapshot has that id", images.RefSnapshotName: "no snapshot has that name"}[r.Kind()]
	if p != "" && p != d.provider {
		why = fmt.Sprintf("snapshot of provider %q, not %q", p, d.provider)
	}
	return images.Identity{}, fmt.Errorf("fake: image %q: %s: %w", raw, why, drivers.ErrImageNotFound)
}

// Isolation implements drivers.IsolationDeclarer: Options.Isolation. No I/O.
func (d *Driver) Isolation(config.Config) drivers.Isolation { return d.o.Isolation }

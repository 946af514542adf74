package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/secretcfg"
)

// startupTimeoutField is the config knob, when a driver's schema has one of
// type Duration, that configures an environment's startup budget (LEASE-3).
const startupTimeoutField = "startup_timeout"

// AcquireRequest asks for a lease of one environment, named in one of
// two ways: EnvironmentID (a saved environment by id) or Scope (the
// environment bound to a scope, resolved by the manager from the store).
// (The prober also leases unsaved configs, for draft probes, through
// internal/leasehook.Draft.) The manager fetches the
// saved record itself; a caller never hands it a record or a resolution.
// The zero AcquireRequest is refused (errcode.ErrInvalid) before anything
// is written or allocated: it names no environment. A request that names
// one (with EnvironmentID, and its Company) and leaves the rest zero gets
// an ephemeral lease, destroyed at its zero-options Release, and a sweep
// expires it after its TTL.
type AcquireRequest struct {
	// EnvironmentID names a saved environment. Under DefaultPolicy only
	// instance admins and local operators lease by id; Company is required.
	EnvironmentID string
	// Scope names the company, project, workspace and agent of a run; the
	// environment is the one its binding resolves to (ASG-1..4). The host's
	// Authorizer decides whether the principal belongs to the scope.
	Scope *authz.Scope
	// Company is the tenant the lease is for: required with EnvironmentID;
	// with Scope it defaults to (and must equal) the scope's company.
	Company string
	// Workspace is the workspace of the run (a working directory hint for
	// host drivers, and part of the reuse key of ReuseByWorkspace). With a
	// Scope it defaults to the scope's workspace.
	Workspace string
	// Project is the project of the run: with Workspace the reuse key of
	// ReuseByWorkspace, so that a workspace is its project's and another
	// project's acquisition never resumes its lease. With a Scope it
	// defaults to (and must equal) the scope's project. Default "": the
	// key of a run of no project (the key leases acquired before the
	// field existed hold).
	Project string
	// Run identifies the run. Acquiring again with the same Company, Run and
	// environment while the lease is active returns the same lease (LEASE-8).
	// Default "": acquisitions are not matched by run (a reusable policy
	// still reuses by its key).
	Run string
	// Policy defaults to Ephemeral.
	Policy Policy
	// Budget is the startup budget of this acquisition. Zero means the
	// environment's startup_timeout knob, else the driver's declared
	// StartupBudget, else 5 minutes (LEASE-3).
	Budget time.Duration
	// Required lists capabilities the caller needs; an environment whose
	// effective set lacks one is refused naming it (CAP-4). Reusable
	// policies add drivers.CapReuse, Runner and WithRunner
	// drivers.CapRunnerIngress. Default empty: nothing beyond those.
	Required drivers.Set
	// Metadata is copied onto a new lease record. Default none.
	Metadata map[string]string
	// Runner, if not nil, says the sandbox will host berth's runner
	// (Handle.Run, controller.Attach): it adds
	// drivers.CapRunnerIngress to Required. The binary for the target's
	// architecture is picked before anything is allocated: the driver
	// reports the architecture (drivers.ArchReporter: local, Docker, the
	// fake), else a set of one binary is used as it is (the driver checks
	// it at install: SSH reads its ELF header). A target of an
	// architecture the set has no binary for is refused then, naming the
	// architecture, with an error wrapping drivers.ErrUnsupported; nothing
	// is written or created. The picked binary is handed to the driver,
	// which prepares the sandbox for it at creation (Docker's bind mount),
	// and recorded on the lease (Lease.Runner). Default nil: no runner,
	// unless WithRunner.
	Runner *drivers.RunnerSet
	// WithRunner acquires the sandbox to host the System's runner, for
	// Handle.Run: as Runner set to the binaries berth.New was given
	// (berth.Options.RunnerBinary, RunnerSet, or the one it builds). Where
	// no runner binary can be had the acquisition fails before anything is
	// written, with an error wrapping drivers.ErrUnsupported. Ignored when
	// Runner is set. Default false.
	WithRunner bool
	// Expires, if not zero, is when the lease expires, instead of the
	// manager's lease TTL (24 h by default) after each acquisition: a
	// Sweep after it stops the lease's runner tasks and destroys its
	// sandbox with proof, as for any expired lease. A host bounding a run
	// passes the run's deadline plus a margin, so that nothing of the run
	// outlives it even when no process of the host is left to stop it.
	// Default zero: the TTL.
	Expires time.Time

	// draft, if not nil, acquires for an unsaved config (leasehook.Draft).
	draft *draftTarget
}

// expiry is when a lease acquired by a at now expires.
func (m *Manager) expiry(a *acq, now time.Time) time.Time {
	if !a.req.Expires.IsZero() {
		return a.req.Expires
	}
	return now.Add(m.o.knobs.LeaseTTL)
}

// draftTarget is an unsaved target: a driver and a config normalized by its
// schema (envhook.Draft returns both), for a draft probe (PRB-4; see
// leasehook.Draft).
type draftTarget struct {
	driver string
	config config.Config
}

func init() {
	leasehook.Draft = func(req any, driver string, cfg config.Config) any {
		r := req.(AcquireRequest)
		r.draft = &draftTarget{driver: driver, config: cfg}
		return r
	}
}

// acq is one prepared acquisition.
type acq struct {
	req      AcquireRequest
	draft    bool
	env      *environment.Environment
	drv      drivers.Driver
	snapshot config.Config // secret references only: recorded on the lease
	cfg      config.Config // secrets resolved: given to the driver
	fp       string
	reuseKey string
	runKey   string
	budget   time.Duration
	runner   *drivers.RunnerSpec         // the binary of req.Runner for the target's architecture
	template *environment.ActiveTemplate // the applied template the sandbox starts from (IMG-8), or nil
	member   bool                        // a warm-pool refill: the record becomes pooled, not active
	quotas   Quotas                      // the limits in force for its company (quotasFor)
	// detached, if not nil, is the caller's context without its
	// cancellation (the shared acquisition's): store writes that must
	// outlive the budget use it.
	detached context.Context
	// set when a recorded sandbox was replaced (LEASE-4)
	replaces      string
	replaceReason string
}

func (a *acq) reusable() bool { return a.reuseKey != "" }

// Acquire returns a lease of the environment req names, with a live
// sandbox, for the acting principal p.
//
// Authorization (AUTH-1, ASG-3): the manager asks the Authorizer of the
// Assignments it was built with (berth.New's) for authz.ActionLease; by environment id the
// resource carries the id and Company, through a scope also the Scope, and
// the binding is resolved from the store as Assignments.Resolve does. A
// company never leases an environment bound to other
// companies only. Refusals wrap errcode.ErrDenied and name neither
// another company nor an environment the caller did not name.
//
// A durable starting record is written before the driver is asked to create
// anything; if the store refuses it, nothing is created (LEASE-2). The
// provider lease id is recorded as soon as the provider assigns it. One
// startup budget bounds all attempts; only transient errors are retried
// (LEASE-3). Reusable policies resume the recorded sandbox when its reuse
// fingerprint matches, else replace it and record why (LEASE-4); a failed
// resume keeps the lease and returns an error of reason "lease_preserved"
// (errcode.ReasonOf; code Unavailable) (LEASE-5). The same run acquiring again gets the same lease, and
// concurrent acquisitions of one reuse key make one sandbox (LEASE-8).
//
// Errors: errcode.ErrInvalid for a malformed request; errcode.ErrDenied;
// errcode.ErrNotFound (and ErrNoBinding) for a missing target;
// drivers.ErrUnavailable for an unregistered, unavailable driver or an
// archived environment (also environment.ErrArchived), and for a target
// the instance settings refuse (CFG-9, through the Assignments' gate: also
// instance.ErrEnvironmentsDisabled, or instance.ErrManagedSandboxOnly for a
// host driver, drafts included; nothing is written or created);
// drivers.ErrUnsupported naming a missing capability; reason
// "startup_budget" (errcode.ReasonOf; code Timeout) when the budget ran
// out; reason "image_mismatch" (code Conflict) when the live sandbox does
// not run the active template's image (IMG-3: the sandbox was destroyed);
// ErrCleanupPending when a failed start could not be cleaned up (a Sweep
// retries it); the driver's sentinels otherwise.
// Concurrent callers coalesced onto one acquisition share its outcome; the
// shared acquisition runs on a context detached from every caller and
// bounded by the startup budget plus Options.ClaimGrace, and each caller
// returns as soon as its own ctx ends (an error wrapping ctx.Err()).
func (m *Manager) Acquire(ctx context.Context, p authz.Principal, req AcquireRequest) (*Handle, error) {
	if req.WithRunner && req.Runner == nil {
		set, err := m.systemRunners()
		if err != nil {
			return nil, err
		}
		req.Runner = set
	}
	a, err := m.prepare(ctx, p, req)
	if err != nil {
		return nil, err
	}
	// The two kinds of keys cannot collide: a reuse key starts "env:" or
	// "ws:", a run key "run:" (prepareFor).
	key := a.reuseKey
	switch {
	case key != "":
	case a.runKey != "":
		key = a.runKey
	default:
		h, err := m.acquireVerified(ctx, a)
		if err != nil {
			return nil, err
		}
		return m.forCaller(ctx, p, h), nil
	}
	// The shared acquisition runs detached from every caller, bounded by
	// the budget (plus the claim grace for waiting on another manager), so
	// that no caller's cancellation cancels it for the others; each caller
	// waits for it only as long as its own ctx allows.
	shared := func() (*Handle, error) {
		detached := detach(ctx)
		a.detached = detached
		sctx := m.withBudget(detached, m.now().Add(a.budget+m.o.ClaimGrace))
		defer sctx.cancel()
		return m.acquireVerified(sctx, a)
	}
	if ctx.Done() == nil && m.joined == nil {
		// A caller whose ctx never ends would wait for the shared
		// acquisition to its end anyway: it runs it in its own goroutine
		// (or joins the running one), sparing a hand-over.
		h, err := m.flights.do(key, shared)
		if err != nil {
			return nil, err
		}
		return m.forCaller(ctx, p, h), nil
	}
	f := m.flights.start(key, shared)
	if m.joined != nil {
		m.joined(key)
	}
	select {
	case <-f.done:
		if f.err != nil {
			return nil, f.err
		}
		return m.forCaller(ctx, p, f.h), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("lease: acquire environment %s: gave up waiting for the shared acquisition (it goes on for the other callers; a later acquisition of the run or reuse key gets its lease): %w",
			a.env.ID, ctx.Err())
	}
}

// forCaller returns a copy of the shared handle h whose Lease shows the
// record as p may read it. The record itself is shown to a principal who
// may read the config: Handle.Lease hands out deep copies of it.
func (m *Manager) forCaller(ctx context.Context, p authz.Principal, h *Handle) *Handle {
	c := *h
	c.p, c.acquired = p, true
	c.shown = h.lease
	if m.authorize(ctx, p, authz.ActionReadConfig, leaseResource(h.lease)) != nil {
		c.shown = h.lease.redactCopy()
	}
	return &c
}

func (m *Manager) prepare(ctx context.Context, p authz.Principal, req AcquireRequest) (*acq, error) {
	env, err := m.target(ctx, p, &req)
	if err != nil {
		return nil, err
	}
	return m.prepareFor(ctx, env, req)
}

// prepareFor prepares an acquisition of env, the record the manager read
// and authorized (target) or, for a pool refill, listed itself.
func (m *Manager) prepareFor(ctx context.Context, env *environment.Environment, req AcquireRequest) (*acq, error) {
	var err error
	draft := req.draft != nil
	switch {
	case req.Company == "" && !draft:
		return nil, fmt.Errorf("lease: acquire: company is required: %w", errcode.ErrInvalid)
	case draft && req.Policy != "" && req.Policy != Ephemeral:
		return nil, fmt.Errorf("lease: acquire: a draft lease is ephemeral, not %s: %w", req.Policy, errcode.ErrInvalid)
	}
	name := envLabel{env} // formatted only in an error
	if env.Status == environment.StatusArchived {
		return nil, fmt.Errorf("lease: %s is archived: %w", name, drivers.ErrUnavailable)
	}
	if req.Policy == "" {
		req.Policy = Ephemeral
	}
	if !req.Policy.valid() {
		return nil, fmt.Errorf("lease: acquire %s: unknown policy %q: %w", name, req.Policy, errcode.ErrInvalid)
	}
	drv, err := m.reg.Lookup(env.Driver)
	if err != nil {
		return nil, fmt.Errorf("lease: %s: %w", name, err)
	}
	if err := drivers.Available(drv); err != nil {
		return nil, fmt.Errorf("lease: %s: %w", name, err)
	}
	required := req.Required
	if req.Policy.reusable() {
		required |= drivers.NewSet(drivers.CapReuse)
	}
	if req.Runner != nil {
		required |= drivers.NewSet(drivers.CapRunnerIngress)
	}
	if missing := drivers.Effective(drv, 0).Missing(required); len(missing) > 0 {
		return nil, fmt.Errorf("lease: %s: driver %q lacks capability %s needed by this request (policy %s): %w",
			name, drv.Name(), drivers.NewSet(missing...), req.Policy, drivers.ErrUnsupported)
	}
	schema := drv.Schema()
	if plain := secretcfg.PlainSecrets(schema, env.Config); len(plain) > 0 && !draft {
		return nil, &config.Error{Driver: drv.Name(), Field: plain[0],
			Reason: fmt.Sprintf("%s holds a secret value, not a secret reference; save it through the catalog", name)}
	}
	// The snapshot of a saved environment is the config of the copy the
	// store returned, which nothing else holds; a draft's is the caller's,
	// so it is copied before its secret fields are dropped below.
	a := &acq{req: req, draft: draft, env: env, drv: drv, snapshot: env.Config}
	if draft {
		a.snapshot = env.Config.Clone()
	}
	if !draft {
		if err := startFromTemplate(a, schema); err != nil {
			return nil, fmt.Errorf("lease: %s: %w", name, err)
		}
		if a.fp, a.snapshot, err = m.fingerprint(drv, env, a.snapshot); err != nil {
			return nil, err
		}
	}
	a.cfg, err = m.resolveConfig(ctx, drv, a.snapshot)
	if err != nil {
		return nil, fmt.Errorf("lease: %s: %w", name, err)
	}
	if draft {
		for _, f := range schema.Fields {
			if f.Kind == config.KindSecret || f.Kind == config.KindSecretMap {
				delete(a.snapshot, f.Name) // the record never holds a secret
			}
		}
		if a.fp, err = reuseFingerprint(drv, a.snapshot); err != nil {
			return nil, err
		}
	}
	a.budget = req.Budget
	if a.budget <= 0 {
		if f, ok := schema.Field(startupTimeoutField); ok && f.Type == config.TypeDuration {
			a.budget = a.snapshot.Duration(startupTimeoutField)
		}
	}
	if a.budget <= 0 {
		a.budget = drv.Capabilities().StartupBudget
	}
	if a.budget <= 0 {
		a.budget = m.o.knobs.StartupBudget
	}
	if req.Runner != nil {
		spec, err := m.runnerFor(ctx, drv, a.cfg, req.Runner)
		if err != nil {
			return nil, fmt.Errorf("lease: %s: %w", name, err)
		}
		a.runner = &spec
	}
	switch req.Policy {
	case ReuseByEnvironment:
		a.reuseKey = fmt.Sprintf("env:%q:%q", req.Company, env.ID)
	case ReuseByWorkspace:
		// The project joins the key only when there is one: a key of
		// three parts and one of four never meet (each part is quoted).
		a.reuseKey = quotedKey("ws:", req.Company, env.ID, req.Workspace)
		if req.Project != "" {
			a.reuseKey = quotedKey("ws:", req.Company, env.ID, req.Project, req.Workspace)
		}
	default:
		if req.Run != "" {
			a.runKey = quotedKey("run:", req.Company, env.ID, req.Run)
		}
	}
	return a, nil
}

// quotedKey returns prefix followed by the parts, each quoted as %q quotes
// it, joined by ":" (fmt.Sprintf("run:%q:%q:%q", ...) in one allocation).
func quotedKey(prefix string, parts ...string) string {
	var buf [128]byte
	b := append(buf[:0], prefix...)
	for i, p := range parts {
		if i > 0 {
			b = append(b, ':')
		}
		b = strconv.AppendQuote(b, p)
	}
	return string(b)
}

// envLabel formats as "environment ID (NAME)" when an error names it.
type envLabel struct{ env *environment.Environment }

func (l envLabel) String() string { return fmt.Sprintf("environment %s (%s)", l.env.ID, l.env.Name) }

// fingerprint returns reuseFingerprint(drv, snapshot) for the snapshot of a
// saved environment's acquisition, and the snapshot to record, from the
// manager's cache when snapshot is the config of a revision it has seen: a
// revision's record never changes (every update makes a new one), and the
// snapshot of a non-draft acquisition is a function of the record (its
// config, with its active template applied). The snapshot it returns is
// the cached one when that equals snapshot (compared, not assumed), so
// that the leases of a revision share one config map (read-only, see
// Store) instead of each keeping the copy the environment store returned:
// a memory store's history would otherwise hold one per lease.
func (m *Manager) fingerprint(drv drivers.Driver, env *environment.Environment, snapshot config.Config) (string, config.Config, error) {
	if env.ID == "" || env.Revision <= 0 {
		fp, err := reuseFingerprint(drv, snapshot)
		return fp, snapshot, err
	}
	k := fpKey{env: env.ID, revision: env.Revision, driver: drv.Name()}
	c := &m.fps
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && sameConfig(e.snapshot, snapshot) {
		return e.fp, e.snapshot, nil
	}
	fp, err := reuseFingerprint(drv, snapshot)
	if err != nil {
		return "", nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxFingerprints {
		c.m = make(map[fpKey]fpEntry, 16)
	}
	c.m[k] = fpEntry{fp: fp, snapshot: snapshot}
	c.mu.Unlock()
	return fp, snapshot, nil
}

// sameConfig reports whether a and b hold the same values (a nil list or
// map is not an empty one, as for reflect.DeepEqual): without an
// allocation for the types a normalized config holds (config.Type, and
// secret references), with reflect.DeepEqual for any other.
func sameConfig(a, b config.Config) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			return false
		}
		var same bool
		switch x := av.(type) {
		case string:
			y, ok := bv.(string)
			same = ok && x == y
		case int64:
			y, ok := bv.(int64)
			same = ok && x == y
		case bool:
			y, ok := bv.(bool)
			same = ok && x == y
		case config.SecretRef:
			y, ok := bv.(config.SecretRef)
			same = ok && x == y
		case []string:
			y, ok := bv.([]string)
			same = ok && (x == nil) == (y == nil) && slices.Equal(x, y)
		case map[string]string:
			y, ok := bv.(map[string]string)
			same = ok && (x == nil) == (y == nil) && maps.Equal(x, y)
		default:
			same = reflect.DeepEqual(av, bv)
		}
		if !same {
			return false
		}
	}
	return true
}

// fpCache maps environment revisions to their fingerprints and snapshots;
// it starts over at maxFingerprints entries.
type fpCache struct {
	mu sync.Mutex
	m  map[fpKey]fpEntry
}

type fpKey struct {
	env      string
	revision int64
	driver   string
}

type fpEntry struct {
	fp       string
	snapshot config.Config // read-only: shared by the leases of the revision
}

const maxFingerprints = 1024

// runnerFor picks the binary of set for the architecture drv reports for
// cfg (drivers.ArchReporter), before anything is allocated; a driver that
// reports none gets the set's only binary (drivers.RunnerSet.For).
func (m *Manager) runnerFor(ctx context.Context, drv drivers.Driver, cfg config.Config, set *drivers.RunnerSet) (drivers.RunnerSpec, error) {
	arch := ""
	if ar, err := drivers.DriverAs[drivers.ArchReporter](drv); err == nil {
		if arch, err = ar.RunnerArch(ctx, cfg); err != nil {
			return drivers.RunnerSpec{}, fmt.Errorf("the target's architecture, for its runner binary: %w", err)
		}
	}
	spec, err := set.For(ctx, arch)
	if err != nil && arch != "" {
		return drivers.RunnerSpec{}, fmt.Errorf("the target is linux/%s: %w", arch, err)
	}
	return spec, err
}

// maxRaces bounds how often one acquisition re-reads the store after
// losing a race to another manager.
const maxRaces = 32

func (m *Manager) acquire(ctx context.Context, a *acq) (*Handle, error) {
	q, err := m.quotasFor(ctx, a)
	if err != nil {
		return nil, err
	}
	a.quotas = q
	for range maxRaces {
		var existing *Lease
		if a.reuseKey != "" {
			// A reuse key is usually held (the sandbox to resume): read first.
			var err error
			existing, err = m.store.FindByReuseKey(ctx, a.reuseKey)
			if err != nil && !errors.Is(err, errcode.ErrNotFound) {
				return nil, fmt.Errorf("lease: acquire environment %s: %w", a.env.ID, err)
			}
		}
		unlock := func() {}
		if existing == nil {
			// Concurrent acquisitions of a company with a quota wait here,
			// not holding a store connection in the store's quota lock.
			// The store counts and writes in one step (InsertLease,
			// AdoptPooled), which is what holds across replicas.
			unlock = m.lockQuota(a)
		}
		if existing == nil && a.poolable() {
			h, err := m.adopt(ctx, a)
			if errors.Is(err, ErrQuota) {
				// At the limit: an acquisition of a run whose lease
				// exists still gets that lease.
				held, rerr := m.runLeaseOr(ctx, a, err)
				if rerr != nil {
					unlock()
					return nil, rerr
				}
				existing = held
			} else if h != nil || err != nil {
				unlock()
				return h, err
			}
		}
		if existing == nil {
			// A run key is usually free: the insert itself finds out, and a
			// refused one answers with the lease that holds the key (the
			// same as reading it first, one statement fewer).
			l := m.newLease(a)
			holder, err := m.insert(ctx, a, l)
			unlock()
			if err == nil {
				return m.create(ctx, a, l)
			}
			if errors.Is(err, ErrQuota) {
				// The company is at its limit (another replica may have
				// taken its last place first): an acquisition of a run
				// whose lease exists still gets that lease.
				held, rerr := m.runLeaseOr(ctx, a, err)
				if rerr != nil {
					return nil, rerr
				}
				h, again, uerr := m.useExisting(ctx, a, held)
				if again {
					continue
				}
				return h, uerr
			}
			if !errors.Is(err, errcode.ErrConflict) || holder == nil {
				return nil, fmt.Errorf("lease: write-ahead record for environment %s refused; nothing was created: %w", a.env.ID, err)
			}
			if a.runKey == "" || holder.RunKey != a.runKey {
				continue // another manager won the key; re-read and use its lease
			}
			existing = holder
		}
		unlock()
		h, again, err := m.useExisting(ctx, a, existing)
		if again {
			continue
		}
		return h, err
	}
	return nil, fmt.Errorf("lease: acquire environment %s: too many concurrent changes: %w", a.env.ID, errcode.ErrConflict)
}

func (m *Manager) newLease(a *acq) *Lease {
	now := m.now()
	id := m.o.knobs.NewID()
	l := &Lease{
		ID: id, Company: a.req.Company, Environment: a.env.ID, Workspace: a.req.Workspace, Run: a.req.Run,
		Status: StatusStarting, Policy: a.req.Policy, Provider: a.drv.Name(),
		AcquiredAt: now, LastUsedAt: now,
		Fingerprint: a.fp, ReuseKey: a.reuseKey, RunKey: a.runKey,
		Replaces: a.replaces, ReplaceReason: a.replaceReason,
		Config: a.snapshot, // the acquisition's own copy, not changed after prepare
		Runner: cloneRunner(a.runner),
		Draft:  a.draft,
		Labels: map[string]string{
			labelInstance: m.o.InstanceID, labelEnvironment: a.env.ID, labelLease: id,
		},
		Metadata:  maps.Clone(a.req.Metadata),
		ClaimedBy: m.opOwner(), ClaimedUntil: now.Add(a.budget + m.o.ClaimGrace),
	}
	if a.template != nil {
		l.Labels[labelTemplate] = a.template.ID
	}
	return l
}

// useExisting acts on the lease that holds the acquisition's key. again
// means: re-read the store and start over.
func (m *Manager) useExisting(ctx context.Context, a *acq, l *Lease) (h *Handle, again bool, err error) {
	now := m.now()
	if h := m.liveHandle(l.ID); h != nil && l.Status == StatusActive && l.Fingerprint == a.fp && !preparedForOtherRunner(a, l) {
		m.touch(ctx, l, a)
		return h, false, nil
	}
	switch l.Status {
	case StatusStarting:
		if l.ClaimedUntil.After(now) {
			if err := m.waitChange(ctx, l); err != nil {
				return nil, false, err
			}
			return nil, true, nil
		}
		if !a.reusable() || l.ProviderLeaseID == "" {
			// Its acquirer vanished (a crash): leave it to the sweep.
			m.abandon(ctx, l, "acquisition interrupted before it finished (its claim expired)")
			return nil, true, nil
		}
	case StatusActive:
		if !a.reusable() {
			return nil, false, fmt.Errorf("lease %s of run %s (environment %s) is active in another process or with an earlier configuration; release it first: %w",
				l.ID, l.Run, l.Environment, errcode.ErrConflict)
		}
	}
	return m.resume(ctx, a, l)
}

// waitChange waits (polling the store on the wall clock) until the lease
// changes, its claim expires on the manager's clock, or ctx ends. The
// polls start at a sixteenth of the poll interval (knobs.PollInterval) (at least 1 ms) and
// double up to it: most claims (a resume, a release) end within
// milliseconds, and a waiter that slept a whole interval each time made
// every contended reuse key a queue of 20 ms steps across replicas.
func (m *Manager) waitChange(ctx context.Context, l *Lease) error {
	wait := max(m.o.knobs.PollInterval/16, time.Millisecond)
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("lease %s: waiting for another manager to finish with it: %w", l.ID, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, m.o.knobs.PollInterval)
		t.Reset(wait)
		cur, err := m.store.GetLease(ctx, l.ID)
		if err != nil || cur.Version != l.Version || !cur.ClaimedUntil.After(m.now()) {
			return nil
		}
	}
}

// touch records another use of a live lease (best effort). It writes
// nothing while another operation holds a claim on the lease: writing back
// a snapshot that carries that claim would persist it past the claimant's
// own (then stale) update, and keep everyone waiting until it expires.
func (m *Manager) touch(ctx context.Context, l *Lease, a *acq) {
	now := m.now()
	if l.ClaimedBy != "" && l.ClaimedUntil.After(now) {
		return
	}
	upd := l.clone()
	upd.Run, upd.LastUsedAt, upd.ExpiresAt = a.req.Run, now, m.expiry(a, now)
	upd.Uses++
	if err := m.store.UpdateLease(ctx, upd); err != nil {
		m.o.logger.Debug("lease: recording reuse", "lease", l.ID, "err", err)
	}
}

// abandon turns a lease whose acquirer vanished into pending_cleanup.
func (m *Manager) abandon(ctx context.Context, l *Lease, reason string) {
	now := m.now()
	owner := m.opOwner()
	cl, err := m.store.ClaimLease(ctx, l.ID, owner, now, now.Add(m.o.knobs.CleanupBudget))
	if err != nil {
		return
	}
	if cl.Status != StatusStarting {
		m.unclaim(ctx, cl, "")
		return
	}
	cl.Status, cl.Cleanup, cl.CleanupDisposition, cl.AfterCleanup = StatusPendingCleanup, cleanupPending, drivers.Destroy, StatusFailed
	cl.FailureReason = reason
	cl.ReuseKey, cl.RunKey, cl.ClaimedBy, cl.ClaimedUntil = "", "", "", time.Time{}
	if err := m.store.UpdateLease(ctx, cl); err != nil {
		m.o.logger.Warn("lease: marking an interrupted acquisition for cleanup", "lease", l.ID, "err", err)
	}
}

// unclaim drops this manager's claim on l, recording reason if not "".
func (m *Manager) unclaim(ctx context.Context, l *Lease, reason string) {
	upd := l.clone()
	upd.ClaimedBy, upd.ClaimedUntil = "", time.Time{}
	if reason != "" {
		upd.FailureReason = reason
	}
	if err := m.store.UpdateLease(context.WithoutCancel(ctx), upd); err != nil {
		m.o.logger.Warn("lease: dropping a claim", "lease", l.ID, "err", err)
	}
}

// replace retires a reusable lease whose sandbox cannot be resumed so that
// the acquisition makes a replacement, recording the reason (LEASE-4).
// owner is the claim the caller already holds on old, or "".
func (m *Manager) replace(ctx context.Context, a *acq, old *Lease, reason string, owner string) (*Handle, bool, error) {
	now := m.now()
	if owner == "" {
		owner = m.opOwner()
	}
	cl, err := m.store.ClaimLease(ctx, old.ID, owner, now, now.Add(m.o.knobs.CleanupBudget))
	if errors.Is(err, ErrClaimed) {
		if cl == nil {
			cl = old
		}
		if werr := m.waitChange(ctx, cl); werr != nil {
			return nil, false, werr
		}
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("lease %s: claiming it for replacement: %w", old.ID, err)
	}
	cl.ReuseKey, cl.RunKey = "", ""
	cl.FailureReason = fmt.Sprintf("replaced (%s)", reason)
	if reason == replaceNotFound {
		cl.Status, cl.Cleanup, cl.ReleasedAt = StatusFailed, cleanupConfirmed, now
		cl.CleanupEvidence = fmt.Sprintf("resume: provider has no sandbox %s", cl.ProviderLeaseID)
		cl.CleanupEvidenceKind = drivers.EvidenceProvider
		cl.ClaimedBy, cl.ClaimedUntil = "", time.Time{}
		if err := m.store.UpdateLease(ctx, cl); err != nil {
			return nil, false, fmt.Errorf("lease %s: recording its replacement: %w", old.ID, err)
		}
	} else {
		cl.Status, cl.Cleanup, cl.CleanupDisposition = StatusPendingCleanup, cleanupPending, drivers.Destroy
		cl.AfterCleanup = StatusReleased
		if reason == replaceExpired {
			cl.AfterCleanup = StatusExpired
		}
		if err := m.store.UpdateLease(ctx, cl); err != nil {
			return nil, false, fmt.Errorf("lease %s: recording its replacement: %w", old.ID, err)
		}
		// Best effort now; a Sweep retries what is not proven.
		if _, err := m.cleanup(ctx, cl); err != nil {
			m.o.logger.Info("lease: cleanup of a replaced sandbox left pending", "lease", cl.ID, "err", err)
		}
	}
	a.replaces, a.replaceReason = cl.ID, reason
	return nil, true, nil
}

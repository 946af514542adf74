package lease

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/clock"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/retry"
	"github.com/berthdev/berth/internal/secretcfg"
)

// Defaults of Options' zero fields.
const (
	DefaultInstanceID    = "berth"
	DefaultStartupBudget = 5 * time.Minute
	DefaultLeaseTTL      = 24 * time.Hour
	DefaultResumableTTL  = 7 * 24 * time.Hour
	DefaultClaimGrace    = time.Minute
	DefaultCleanupBudget = time.Minute
	DefaultPollInterval  = 20 * time.Millisecond
	DefaultSweepLimit    = 100
	DefaultHostHeartbeat = 10 * time.Second
	DefaultPruneAfter    = 30 * 24 * time.Hour
)

// HolderClaimBeats is how many heartbeats a host lease holder's claim
// lasts: a holder that misses this many renewals is taken as gone.
const HolderClaimBeats = 3

// SecretLookup returns the value of a secret reference from the host's
// secret store. Errors must not contain the value.
type SecretLookup func(ctx context.Context, ref config.SecretRef) (string, error)

// Options configure a Manager: optional knobs, each documenting its
// default; nil means all defaults. The Assignments and the runner
// controller's TaskStopper hook are NewManager's arguments.
type Options struct {
	// InstanceID is put on every sandbox as the berth.instance label and
	// scopes orphan sweeps to this installation. Default DefaultInstanceID.
	InstanceID string
	// Clock measures budgets, expiry and claims. Default the wall clock.
	Clock clock.Clock
	// Logger receives operational messages (never secrets). Default discard.
	Logger *slog.Logger
	// Rand returns uniform numbers in [0, 1) for backoff jitter. Default
	// math/rand/v2.
	Rand func() float64
	// NewID returns a new lease id. Default "lse_" and 16 random hex digits.
	NewID func() string
	// Secrets resolves the secret references of environment configs at
	// acquire and again at cleanup time; lease records keep references only.
	// Default: none, so a config with a secret reference fails with
	// config.ErrCredentialsMissing.
	Secrets SecretLookup
	// StartupBudget is used when neither the request, the environment's
	// startup_timeout knob nor the driver declares a budget (LEASE-3).
	// Default DefaultStartupBudget.
	StartupBudget time.Duration
	// LeaseTTL is how long an active lease lives without being acquired
	// again before a sweep expires it. Default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// ResumableTTL is how long a retained or stopped (resumable) lease stays
	// resumable before a sweep expires it. Default DefaultResumableTTL.
	ResumableTTL time.Duration
	// ClaimGrace is added to the startup budget to form the claim of an
	// acquisition; after it another replica treats the acquisition as
	// crashed. Default DefaultClaimGrace.
	ClaimGrace time.Duration
	// CleanupBudget bounds one stop, destroy or listing done for cleanup.
	// Default DefaultCleanupBudget.
	CleanupBudget time.Duration
	// RetryInitial and RetryMax shape the backoff between attempts; zero
	// means the internal/retry defaults (200ms, 10s).
	RetryInitial, RetryMax time.Duration
	// PollInterval is how often (wall clock) an acquisition re-reads a lease
	// that another manager is starting or holds a claim on, at most: the
	// first re-reads come sooner (a sixteenth of it, at least 1 ms,
	// doubling up to it). Default DefaultPollInterval.
	PollInterval time.Duration
	// SweepLimit bounds the leases one Sweep claims. Default DefaultSweepLimit.
	SweepLimit int
	// HostHeartbeat is how often (on Clock) the manager that holds a host
	// lease's live session renews its claim on it (Lease.Holder); the claim
	// lasts HolderClaimBeats heartbeats. Default DefaultHostHeartbeat.
	HostHeartbeat time.Duration
	// PruneAfter is how long the record of an ended lease (released and not
	// resumable, expired, failed) is kept after its ReleasedAt, receipt
	// (CleanupEvidence) included; each Sweep then prunes it. Default
	// DefaultPruneAfter; a negative value keeps records forever.
	PruneAfter time.Duration
	// SecretKeeper, if not nil, records the secret references of every
	// lease record before it is written and releases them once the lease
	// is proven clean (released, expired or failed with nothing left), so
	// that a secret the catalog retired (an update superseded it, its
	// environment was deleted) stays in the SecretStore until the last
	// lease that uses it is clean and sweeps always have the credentials
	// they need (CFG-7, LEASE-9). Give the catalog the same keeper
	// (environment.Options.SecretKeeper). Default nil: nothing is recorded.
	SecretKeeper *environment.SecretKeeper
	// SweepEnvironments, if not nil, lists the environments whose providers
	// a Sweep searches for orphans. Default: every environment that appears
	// on a lease in the store (with the config recorded on its newest lease).
	SweepEnvironments func(ctx context.Context) ([]*environment.Environment, error)
	// Quotas limit the live leases per company and per company and
	// environment; an acquisition that would pass one is refused before
	// anything is written or allocated, with an error wrapping ErrQuota.
	// Default: no limits.
	Quotas Quotas
	// PoolConcurrency bounds the members one environment's pool starts at
	// once (a refill, MaintainPools). Default DefaultPoolConcurrency.
	PoolConcurrency int
	// ManualPoolRefill, if set, refills pools only in MaintainPools (a
	// host that schedules refills itself, or a test that wants them in
	// step): no background refill follows adoptions and sweeps. Default
	// false.
	ManualPoolRefill bool
	// PoolRunners returns the runner binaries members of a runner pool
	// (environment.Pool.Runner) are prepared for (AcquireRequest.Runner:
	// the driver fixes what the runner needs at create, Docker's bind
	// mount); an acquisition for the same binary adopts them. Default nil:
	// a runner pool's refill fails with an error wrapping
	// drivers.ErrUnsupported. berth.New sets it to System.RunnerSet.
	PoolRunners func() (*drivers.RunnerSet, error)
	// Settings reads the instance settings (CFG-9): while they disable
	// environments (or a pool's driver is a host driver under
	// managed-sandbox-only) no refill starts a member. Acquisitions pass
	// the Assignments' gate, which reads them too. nil: refills read none.
	Settings instance.Reader
}

// Manager hands out leases of environments: it acquires sandboxes with a
// write-ahead record, a startup budget and reuse, releases them with
// provider-confirmed proof, and sweeps expired leases, pending cleanups and
// orphans. It is safe for concurrent use; several Managers (one per host
// replica) may share one Store.
type Manager struct {
	fps   fpCache
	store Store
	reg   *drivers.Registry
	asg   *environment.Assignments
	tasks TaskStopper
	o     Options
	owner string // this manager's claim owner prefix
	opSeq atomic.Int64
	// flights coalesces the acquisitions of a reuse or run key (flight.go).
	flights flights
	// joined, if not nil, is called once a caller has joined a coalesced
	// acquisition (tests only, export_test.go).
	joined func(key string)

	mu   sync.Mutex
	live map[string]*Handle // lease id -> live handle in this process

	pools *pools // warm-pool refills (pool.go)

	// quotaLocks serialize a company's quota check with the record it
	// admits (lockQuota), striped by company.
	quotaLocks [32]sync.Mutex
}

// NewManager returns a Manager over store and the drivers of reg, with
// the hook the catalog needs from it.
//
// asg reads saved environments and bindings for Acquire (by environment id
// or through a scope), and its Authorizer (give it the catalog's) decides
// every acquire, release, read and sweep (AUTH-1). With a nil asg Acquire
// refuses saved environments, and the other calls decide with
// authz.DefaultPolicy.
//
// tasks, if not nil, is the runner protocol's hook (the lease.TaskStopper
// that prp/controller.New returns): it stops and verifies the runner
// tasks of a lease before its release or cleanup stops or destroys the
// sandbox (PRP-6). An unproven stop leaves the lease pending_cleanup with
// the reason; the cleanup that retries it (a Sweep, a second Release) asks
// tasks again and, if the runner still cannot prove the stop, relies on
// the sandbox's own proof: a confirmed stop or destroy of a sandbox (no
// process survives it), or the tag check of a host lease. A host lease
// with runner sessions gets the host check in any case (its runner runs
// detached from the session): the lease's runner cgroup, where one was
// made, is killed, seen empty and removed; every process tagged with the
// lease (EnvTag) is killed and a /proc scan must find none. The receipt
// (Lease.CleanupEvidence, Lease.CleanupEvidenceKind) says which. nil: the
// leases have no runner tasks to stop.
//
// The returned environment.UsageReporter is the manager's hook for the
// catalog's blast radius (environment.Options.UsageReporters, CFG-7): it
// lists the active (and starting), reusable and pending-cleanup leases of
// an environment, one Reference of kind "lease" each (a lease may be both
// active and reusable), reading the live records only (Filter.Live) and
// calling no provider (CAP-1). It answers for no principal, so it is
// handed to the composer here and is no method of the Manager: the
// catalog authorizes BlastRadius and Delete before it asks.
func NewManager(store Store, reg *drivers.Registry, asg *environment.Assignments, tasks TaskStopper, opts *Options) (*Manager, environment.UsageReporter) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.InstanceID == "" {
		o.InstanceID = DefaultInstanceID
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.NewID == nil {
		o.NewID = newLeaseID
	}
	if o.StartupBudget <= 0 {
		o.StartupBudget = DefaultStartupBudget
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.ResumableTTL <= 0 {
		o.ResumableTTL = DefaultResumableTTL
	}
	if o.ClaimGrace <= 0 {
		o.ClaimGrace = DefaultClaimGrace
	}
	if o.CleanupBudget <= 0 {
		o.CleanupBudget = DefaultCleanupBudget
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.SweepLimit <= 0 {
		o.SweepLimit = DefaultSweepLimit
	}
	if o.PruneAfter == 0 {
		o.PruneAfter = DefaultPruneAfter
	}
	if o.HostHeartbeat <= 0 {
		o.HostHeartbeat = DefaultHostHeartbeat
	}
	if o.PoolConcurrency <= 0 {
		o.PoolConcurrency = DefaultPoolConcurrency
	}
	store = &recordStore{Store: store, k: o.SecretKeeper, log: o.Logger.Warn}
	m := &Manager{
		store: store, reg: reg, asg: asg, tasks: tasks, o: o,
		owner: o.InstanceID + "/" + randomHex(4),
		live:  map[string]*Handle{},
		pools: newPools(),
	}
	return m, leaseUsage{m}
}

// newLeaseID returns "lse_" and 16 random hex digits, in one allocation.
func newLeaseID() string {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	var buf [4 + 2*len(raw)]byte
	copy(buf[:], "lse_")
	hex.Encode(buf[4:], raw[:])
	return string(buf[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// opOwner returns a claim owner unique to one operation of this manager, so
// that claims are never re-entrant between concurrent operations.
func (m *Manager) opOwner() string {
	var buf [64]byte
	b := append(buf[:0], m.owner...)
	b = append(b, '#')
	return string(strconv.AppendInt(b, m.opSeq.Add(1), 10))
}

func (m *Manager) now() time.Time { return m.o.Clock.Now() }

// detach returns ctx without its cancellation (context.WithoutCancel):
// ctx itself when it can never be cancelled (Done returns nil, as for
// context.Background), which spares an allocation on the hot path. A
// budget (budgetCtx) is detached by detaching its parent, whose values are
// the budget's: asking the budget itself for Done would start its timer
// only to throw the cancellation away.
func detach(ctx context.Context) context.Context {
	for {
		b, ok := ctx.(*budgetCtx)
		if !ok {
			break
		}
		ctx = b.parent
	}
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

func (m *Manager) retryPolicy() retry.Policy {
	return retry.Policy{Initial: m.o.RetryInitial, Max: m.o.RetryMax, Clock: m.o.Clock, Rand: m.o.Rand}
}

// InstanceID returns the instance id that labels this manager's sandboxes
// (LabelInstance), so that others who allocate for the same instance label
// alike and sweeps find them.
func (m *Manager) InstanceID() string { return m.o.InstanceID }

// Fingerprint returns the reuse fingerprint of cfg for driver d: a SHA-256
// over the driver name, the identity fields and the secret references with
// their versions (LEASE-4). Knobs, metadata and SecretMap fields (secret env
// vars, keys and references alike) are left out, so that tuning a timeout or
// rotating an env token keeps a sandbox reusable while changing the image,
// target or account does not. An identity value that has no JSON encoding (a channel,
// a function, a NaN) is an error wrapping ErrInvalid that names the driver;
// Fingerprint never panics.
func Fingerprint(d drivers.Driver, cfg config.Config) (string, error) {
	p := secretcfg.Partition(d.Schema(), cfg)
	b, err := json.Marshal(struct {
		Driver   string                      `json:"driver"`
		Identity map[string]any              `json:"identity"`
		Secrets  map[string]config.SecretRef `json:"secrets"`
	}{d.Name(), p.Identity, p.Secrets})
	if err != nil {
		return "", fmt.Errorf("lease: fingerprint of a %s config: identity values must be JSON values: %v: %w", d.Name(), err, ErrInvalid)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func (m *Manager) cacheHandle(h *Handle) {
	m.mu.Lock()
	m.live[h.lease.ID] = h
	m.mu.Unlock()
}

// Close stops the heartbeats of the host leases this manager holds; it
// releases nothing. Their claims then expire after HolderClaimBeats
// heartbeats, and other managers may end the sessions only by a check on
// the host. It stops the background pool refills and waits for them; it
// drains no pool: pooled members stay for the next process to adopt. It
// ends the goroutines parked for coalesced acquisitions (acquisitions in
// progress finish). The manager must not acquire afterwards.
func (m *Manager) Close() error {
	m.pools.close()
	m.flights.close()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range m.live {
		h.stopBeat()
	}
	return nil
}

func (m *Manager) liveHandle(id string) *Handle {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

func (m *Manager) dropHandle(id string) {
	m.mu.Lock()
	if h := m.live[id]; h != nil {
		h.stopBeat()
	}
	delete(m.live, id)
	m.mu.Unlock()
	if m.tasks != nil {
		m.tasks.LeaseEnded(id)
	}
}

// resolveConfig resolves the secret references of a recorded config. A
// config that sets no secret field is returned as it is, not copied: a
// driver never changes the config it is given (drivers.Driver), and the
// manager never changes a recorded one (see Store).
func (m *Manager) resolveConfig(ctx context.Context, d drivers.Driver, cfg config.Config) (config.Config, error) {
	schema := d.Schema()
	if !setsSecret(schema, cfg) {
		return cfg, nil
	}
	lookup := m.o.Secrets
	if lookup == nil {
		lookup = func(_ context.Context, ref config.SecretRef) (string, error) {
			return "", fmt.Errorf("no secret resolver configured for %s: %w", ref, config.ErrCredentialsMissing)
		}
	}
	return secretcfg.ResolveSecrets(ctx, schema, cfg, lookup)
}

// setsSecret reports whether cfg holds a value for a secret or secret-map
// field of schema.
func setsSecret(schema *config.Schema, cfg config.Config) bool {
	for _, f := range schema.Fields {
		if f.Kind == config.KindSecret || f.Kind == config.KindSecretMap {
			if _, ok := cfg[f.Name]; ok {
				return true
			}
		}
	}
	return false
}

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

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/internal/retry"
	"github.com/berthdev/berth/internal/secretcfg"
)

// Defaults of Options' zero fields.
const (
	defaultInstanceID    = "berth"
	defaultStartupBudget = 5 * time.Minute
	defaultLeaseTTL      = 24 * time.Hour
	defaultResumableTTL  = 7 * 24 * time.Hour
	defaultClaimGrace    = time.Minute
	defaultCleanupBudget = time.Minute
	defaultPollInterval  = 20 * time.Millisecond
	defaultSweepLimit    = 100
	defaultHostHeartbeat = 10 * time.Second
	defaultPruneAfter    = 30 * 24 * time.Hour
)

// holderClaimBeats is how many heartbeats a host lease holder's claim
// lasts: a holder that misses this many renewals is taken as gone.
const holderClaimBeats = 3

// Options are the lease manager's knobs a host sets, through
// berth.Options.Leases; each documents its default, and nil means all
// defaults. The manager's collaborators (the secret store, the instance
// settings, the runner controller, the runner binaries) are berth.New's
// to wire, and its logger is berth.Options.Logger.
//
// What Options does not set is fixed: a startup budget of 5
// minutes where neither the request, the environment's startup_timeout
// knob nor the driver declares one (LEASE-3); active leases expire after 24
// hours without an acquisition, resumable (retained or stopped) ones after
// 7 days; one cleanup step (a stop, destroy or listing) gets one minute; a
// Sweep claims up to 100 leases; the holder of a host lease renews its
// claim every 10 seconds (the claim lasts three renewals); a pool starts up
// to 2 members of one environment at once.
type Options struct {
	// InstanceID is put on every sandbox as the berth.instance label and
	// scopes orphan sweeps to this installation. Default "berth".
	InstanceID string
	// ClaimGrace is added to the startup budget to form the claim of an
	// acquisition; after it another replica treats the acquisition as
	// crashed. Default one minute.
	ClaimGrace time.Duration
	// PruneAfter is how long the record of an ended lease (released and not
	// resumable, expired, failed) is kept after its ReleasedAt, receipt
	// (CleanupEvidence) included; each Sweep then prunes it. Default
	// 30 days; a negative value keeps records forever.
	PruneAfter time.Duration
	// Quotas limit the live leases per company and per company and
	// environment; an acquisition that would pass one is refused before
	// anything is written or allocated, with an error wrapping ErrQuota.
	// The instance settings' quotas apply too (the stricter per field).
	// Default: no limits of its own.
	Quotas Quotas
	// ManualPoolRefill, if set, refills pools only in MaintainPools (a
	// host that schedules refills itself, or a test that wants them in
	// step): no background refill follows adoptions and sweeps. Default
	// false.
	ManualPoolRefill bool

	// tuning holds internal knobs (randomness, ids, budgets, TTLs, pacing)
	// that only berth's own tests set (internal/leasehook.Tune); nil means
	// the defaults stated above.
	tuning *leasetune.Knobs

	// What berth.New wires (internal/leasehook.Sources), set by newManager.
	clock             clock.Clock
	logger            *slog.Logger
	secrets           func(ctx context.Context, ref config.SecretRef) (string, error)
	secretKeeper      envhook.SecretKeeper
	sweepEnvironments func(ctx context.Context) ([]*environment.Environment, error)
	poolRunners       func() (*drivers.RunnerSet, error)
	settings          instance.Reader

	// knobs is a copy of *tuning with the defaults filled in (newManager).
	knobs leasetune.Knobs
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
	tasks leasehook.TaskStopper
	// ended, if not nil, is told of every lease a release returns
	// (leasehook.Sources.Ended: the workspaces it ends).
	ended func(ctx context.Context, l any)
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

func init() {
	leasehook.New = func(src leasehook.Sources) (any, envhook.UsageReporter[environment.Usage]) { return newManager(src) }
	leasehook.Close = func(m any) error { return m.(*Manager).close() }
	leasehook.Tune = func(opts any, f func(*leasetune.Knobs)) { leasetune.Update(&opts.(*Options).tuning, f) }
}

// newManager returns a Manager over src (leasehook.New), and its hook for
// the catalog's blast radius (leaseUsage): it lists the active (and
// starting), reusable and pending-cleanup leases of an environment, one
// Reference of kind "lease" each (a lease may be both active and
// reusable), reading the live records only (Filter.Live) and calling no
// provider (CAP-1), and drains or refills the environment's pool.
func newManager(src leasehook.Sources) (*Manager, envhook.UsageReporter[environment.Usage]) {
	store := src.Store.(Store)
	reg, asg, tasks := src.Drivers, src.Assignments, src.Tasks
	var o Options
	if opts, _ := src.Options.(*Options); opts != nil {
		o = *opts
	}
	o.clock, o.logger, o.secrets, o.secretKeeper = src.Clock, src.Logger, src.Secrets, src.SecretKeeper
	o.sweepEnvironments, o.poolRunners, o.settings = src.SweepEnvironments, src.PoolRunners, src.Settings
	if o.InstanceID == "" {
		o.InstanceID = defaultInstanceID
	}
	if o.clock == nil {
		o.clock = clock.Real{}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.tuning != nil {
		o.knobs = *o.tuning
	}
	if o.knobs.NewID == nil {
		o.knobs.NewID = newLeaseID
	}
	if o.knobs.StartupBudget <= 0 {
		o.knobs.StartupBudget = defaultStartupBudget
	}
	if o.knobs.LeaseTTL <= 0 {
		o.knobs.LeaseTTL = defaultLeaseTTL
	}
	if o.knobs.ResumableTTL <= 0 {
		o.knobs.ResumableTTL = defaultResumableTTL
	}
	if o.ClaimGrace <= 0 {
		o.ClaimGrace = defaultClaimGrace
	}
	if o.knobs.CleanupBudget <= 0 {
		o.knobs.CleanupBudget = defaultCleanupBudget
	}
	if o.knobs.PollInterval <= 0 {
		o.knobs.PollInterval = defaultPollInterval
	}
	if o.knobs.SweepLimit <= 0 {
		o.knobs.SweepLimit = defaultSweepLimit
	}
	if o.PruneAfter == 0 {
		o.PruneAfter = defaultPruneAfter
	}
	if o.knobs.HostHeartbeat <= 0 {
		o.knobs.HostHeartbeat = defaultHostHeartbeat
	}
	if o.knobs.PoolConcurrency <= 0 {
		o.knobs.PoolConcurrency = defaultPoolConcurrency
	}
	store = &recordStore{Store: store, k: o.secretKeeper, log: o.logger.Warn}
	m := &Manager{
		store: store, reg: reg, asg: asg, tasks: tasks, ended: src.Ended, o: o,
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

func (m *Manager) now() time.Time { return m.o.clock.Now() }

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
	return retry.Policy{Initial: m.o.knobs.RetryInitial, Max: m.o.knobs.RetryMax, Clock: m.o.clock, Rand: m.o.knobs.Rand}
}

// reuseFingerprint returns the reuse fingerprint of cfg for driver d: a SHA-256
// over the driver name, the identity fields and the secret references with
// their versions (LEASE-4). Knobs, metadata and SecretMap fields (secret env
// vars, keys and references alike) are left out, so that tuning a timeout or
// rotating an env token keeps a sandbox reusable while changing the image,
// target or account does not. An identity value that has no JSON encoding (a channel,
// a function, a NaN) is an error wrapping errcode.ErrInvalid that names the driver;
// reuseFingerprint never panics.
func reuseFingerprint(d drivers.Driver, cfg config.Config) (string, error) {
	p := secretcfg.Partition(d.Schema(), cfg)
	b, err := json.Marshal(struct {
		Driver   string                      `json:"driver"`
		Identity map[string]any              `json:"identity"`
		Secrets  map[string]config.SecretRef `json:"secrets"`
	}{d.Name(), p.Identity, p.Secrets})
	if err != nil {
		return "", fmt.Errorf("lease: fingerprint of a %s config: identity values must be JSON values: %v: %w", d.Name(), err, errcode.ErrInvalid)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func (m *Manager) cacheHandle(h *Handle) {
	m.mu.Lock()
	m.live[h.lease.ID] = h
	m.mu.Unlock()
}

// close stops the heartbeats of the host leases this manager holds; it
// releases nothing (leasehook.Close, System.Close). Their claims then
// expire after three heartbeats (30 seconds), and other managers may end
// the sessions only by a check on the host. It stops the background pool
// refills and waits for them; it drains no pool: pooled members stay for
// the next process to adopt. It ends the goroutines parked for coalesced
// acquisitions (acquisitions in progress finish). The manager must not
// acquire afterwards.
func (m *Manager) close() error {
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
	lookup := m.o.secrets
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

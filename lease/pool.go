package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/retry"
)

// defaultPoolConcurrency is knobs.PoolConcurrency's default.
const defaultPoolConcurrency = 2

// PoolReport counts what one pool pass (Manager.MaintainPools, or the pool
// part of a Sweep) did.
type PoolReport struct {
	// Created counts members started; CreateFailed those whose start
	// failed.
	Created      int `json:"created"`
	CreateFailed int `json:"createFailed"`
	// Retired counts members destroyed with a confirmed receipt:
	// older than the pool's max age, made from a config or template the
	// environment no longer has, beyond the pool's size, or of an
	// environment that is gone, archived or has no pool any more.
	// RetirePending counts those whose destroy is not proven yet (their
	// records are pending_cleanup: the next Sweep retries them).
	Retired       int `json:"retired"`
	RetirePending int `json:"retirePending"`
}

// pools is the manager's warm-pool state: the background refills.
type pools struct {
	mu      sync.Mutex
	filling map[string]bool // environment id -> a refill runs
	// again holds, by environment id, the environment as last saved when
	// a refill was asked for while one ran: the running one refills again
	// with it once done (a pool grown meanwhile is filled to its new size).
	again  map[string]*environment.Environment
	closed bool
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newPools() *pools {
	ctx, cancel := context.WithCancel(context.Background())
	return &pools{filling: map[string]bool{}, again: map[string]*environment.Environment{}, ctx: ctx, cancel: cancel}
}

// close stops background refills and waits for them: their starts end
// (a start cut short is destroyed or left to a sweep, as any failed
// start); members already pooled stay for the next process to adopt.
func (p *pools) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// poolable reports whether the acquisition may adopt a pool member: a
// saved, active environment with a pool.
func (a *acq) poolable() bool {
	return !a.draft && !a.member && a.env.Pool != nil && a.env.Status == environment.StatusActive
}

// isMember reports whether l is a warm-pool member not adopted (yet): the
// instance's record, made by a refill, starting or pooled.
func isMember(l *Lease) bool {
	return l.Company == authz.InstanceCompany && l.Labels[labelPool] == "member" &&
		(l.Status == StatusPooled || l.Status == StatusStarting)
}

// adopt gives the acquisition a pool member of its environment whose
// fingerprint (identity, image, active template) and runner match, in
// one store transaction (Store.AdoptPooled), and makes it the lease: the
// member's record id becomes the lease's id. nil, nil: no member to adopt
// (or the run key is held: the ordinary path finds its lease); the caller
// creates a sandbox then. Either way a refill is started in the
// background.
func (m *Manager) adopt(ctx context.Context, a *acq) (*Handle, error) {
	defer m.refillSoon(a.env)
	for range 4 { // a member whose sandbox is gone is marked and the next one tried
		ad := m.newLease(a)
		l, err := m.store.AdoptPooled(ctx, ad, a.quotasFor(ad.Company))
		switch {
		case errors.Is(err, errcode.ErrNotFound), errors.Is(err, errcode.ErrConflict):
			return nil, nil
		case errors.Is(err, ErrQuota):
			return nil, err
		case err != nil:
			return nil, fmt.Errorf("lease: acquire environment %s: adopting a pool member: %w", a.env.ID, err)
		}
		h, next, err := m.startAdopted(ctx, a, l)
		if !next {
			return h, err
		}
	}
	return nil, nil
}

// startAdopted makes the adopted member l (starting, claimed) the active
// lease: its live sandbox is the handle this manager kept from the refill,
// else the provider's, resumed by id within the startup budget. next
// means the member could not serve (its record now says why) and another
// one, or a new sandbox, is to be tried.
func (m *Manager) startAdopted(ctx context.Context, a *acq, l *Lease) (*Handle, bool, error) {
	wctx := context.WithoutCancel(ctx)
	var sb drivers.Sandbox
	var err error
	if h := m.liveHandle(l.ID); h != nil {
		sb = h.sandbox
	} else {
		var resumer drivers.Resumer
		if resumer, err = drivers.DriverAs[drivers.Resumer](a.drv); err == nil {
			bctx, cancel := retry.WithTimeout(ctx, m.o.clock, a.budget)
			sb, err = resumer.Resume(bctx, a.cfg, l.ProviderLeaseID)
			cancel()
		}
	}
	now := m.now()
	if err != nil {
		if sandboxGone(err) {
			upd := l.clone()
			upd.Status, upd.Cleanup, upd.ReleasedAt = StatusFailed, cleanupConfirmed, now
			upd.CleanupEvidence = fmt.Sprintf("adoption: provider has no sandbox %s", l.ProviderLeaseID)
			upd.CleanupEvidenceKind = drivers.EvidenceProvider
			upd.FailureReason = "pool member gone at adoption"
			upd.ReuseKey, upd.RunKey, upd.ClaimedBy, upd.ClaimedUntil = "", "", "", time.Time{}
			if uerr := m.store.UpdateLease(wctx, upd); uerr != nil {
				m.o.logger.Warn("lease: recording a pool member gone at adoption", "lease", l.ID, "err", uerr)
			}
			return nil, true, nil
		}
		if pending, ok := m.markPending(wctx, l.clone(), drivers.Destroy, StatusFailed, "pool member could not be resumed at adoption: "+err.Error()); ok {
			if _, cerr := m.cleanup(wctx, pending); cerr != nil {
				m.o.logger.Info("lease: cleanup of a pool member that failed adoption left pending", "lease", l.ID, "err", cerr)
			}
		}
		return nil, true, nil
	}
	if why := m.liveImageMismatch(ctx, a, sb); why != "" {
		// IMG-3: a member that does not run the identity its record
		// promises is destroyed, and the next one tried.
		if pending, ok := m.markPending(wctx, l.clone(), drivers.Destroy, StatusFailed, "pool member's live image at adoption: "+why); ok {
			if _, cerr := m.cleanup(wctx, pending); cerr != nil {
				m.o.logger.Info("lease: cleanup of a pool member with another image left pending", "lease", l.ID, "err", cerr)
			}
		}
		return nil, true, nil
	}
	upd := l.shallow()
	upd.Status, upd.LastUsedAt, upd.ExpiresAt, upd.Uses = StatusActive, now, m.expiry(a, now), 1
	upd.ClaimedBy, upd.ClaimedUntil = "", time.Time{}
	if err := m.store.UpdateLease(wctx, upd); err != nil {
		return nil, false, m.failStart(wctx, a, l, l.ProviderLeaseID, sb, fmt.Errorf("recording the adopted pool member: %w", err))
	}
	h := &Handle{m: m, lease: upd, driver: a.drv, sandbox: sb}
	m.cacheHandle(h)
	return h, false, nil
}

// refillSoon starts a background refill of env's pool (fill), bounded by
// the startup budget of each start and knobs.PoolConcurrency; while one
// runs for env already, that one refills once more when done, with env as
// given last.
func (m *Manager) refillSoon(env *environment.Environment) {
	if m.o.ManualPoolRefill || env.Pool == nil || env.Status != environment.StatusActive {
		return
	}
	p := m.pools
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.filling[env.ID] {
		p.again[env.ID] = env
		p.mu.Unlock()
		return
	}
	p.filling[env.ID] = true
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		for cur := env; cur != nil; {
			var rep PoolReport
			if err := m.fill(p.ctx, cur, &rep); err != nil {
				m.o.logger.Info("lease: pool refill", "environment", env.ID, "err", err)
			}
			p.mu.Lock()
			cur = p.again[env.ID]
			delete(p.again, env.ID)
			if p.closed {
				cur = nil
			}
			if cur == nil {
				delete(p.filling, env.ID)
			}
			p.mu.Unlock()
		}
	}()
}

// members returns the pool members of environment envID, oldest first:
// pooled ones, and starting ones whose refill still holds its claim (a
// start whose refill crashed is the sweep's, and counts no more).
func (m *Manager) members(ctx context.Context, envID string) ([]*Lease, error) {
	ls, err := m.store.ListLeases(ctx, Filter{Environment: envID, Company: authz.InstanceCompany, Statuses: []Status{StatusPooled, StatusStarting}})
	if err != nil {
		return nil, err
	}
	now := m.now()
	out := ls[:0]
	for _, l := range ls {
		if isMember(l) && (l.Status == StatusPooled || l.ClaimedUntil.After(now)) {
			out = append(out, l)
		}
	}
	return out, nil
}

// fill starts the members env's pool lacks, at most
// knobs.PoolConcurrency at once, each with its own write-ahead record
// (LEASE-2) of authz.InstanceCompany labelled labelPool, made from the config
// and active template env has now.
func (m *Manager) fill(ctx context.Context, env *environment.Environment, rep *PoolReport) error {
	if env.Pool == nil || env.Status != environment.StatusActive {
		return nil
	}
	if m.o.settings != nil {
		s, err := m.o.settings.Current(ctx)
		if err != nil {
			return fmt.Errorf("lease: pool of environment %s: reading the instance settings: %w", env.ID, err)
		}
		host, declared := false, drivers.IsolationNone
		if d, err := m.reg.Lookup(env.Driver); err == nil {
			host, declared = d.Capabilities().Kind == drivers.KindHost, drivers.IsolationOf(d, env.Config)
		}
		if s.Admit(env.Driver, host) != nil {
			return nil // no member while the settings refuse the target (CFG-9)
		}
		if declared < s.Minimum() || declared < env.RequireIsolation {
			return nil // nor while it isolates less than the minimum (isolation_below_minimum)
		}
	}
	req := AcquireRequest{Company: authz.InstanceCompany, EnvironmentID: env.ID, Policy: Ephemeral}
	if env.Pool.Runner {
		if m.o.poolRunners == nil {
			return fmt.Errorf("lease: pool of environment %s is a runner pool and the manager has no runner binaries (leasehook.Sources.PoolRunners): %w", env.ID, drivers.ErrUnsupported)
		}
		set, err := m.o.poolRunners()
		if err != nil {
			return fmt.Errorf("lease: pool of environment %s: its runner binaries: %w", env.ID, err)
		}
		req.Runner = set
	}
	have, err := m.members(ctx, env.ID)
	if err != nil {
		return fmt.Errorf("lease: pool of environment %s: %w", env.ID, err)
	}
	need := env.Pool.Size - len(have)
	orphans := m.disconnectedRunners(ctx, have)
	if need <= 0 && len(orphans) == 0 {
		return nil
	}
	a0, err := m.prepareFor(ctx, env, req)
	if err != nil {
		return fmt.Errorf("lease: pool of environment %s: %w", env.ID, err)
	}
	a0.member = true
	for _, l := range orphans {
		m.reconnectRunner(ctx, a0, l)
	}
	if need <= 0 {
		return nil
	}
	sem := make(chan struct{}, m.o.knobs.PoolConcurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range need {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return errors.Join(append(errs, ctx.Err())...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a := *a0
			l := m.newLease(&a)
			l.Labels[labelPool] = "member"
			_, err := m.store.InsertLease(ctx, l, Quotas{})
			if err == nil {
				_, err = m.create(ctx, &a, l)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				rep.CreateFailed++
				errs = append(errs, err)
				return
			}
			rep.Created++
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startPoolRunner connects the runner of cur, a starting member of a
// runner pool whose sandbox sb was just created, through the runner
// protocol's hook (poolRunnerStarter), bounded by ctx (the startup
// budget). The provider id is recorded first, so that a crash while the
// runner starts leaves a record that points at the sandbox. It returns the
// record as stored.
func (m *Manager) startPoolRunner(ctx, wctx context.Context, a *acq, cur *Lease, sb drivers.Sandbox) (*Lease, error) {
	starter, ok := m.tasks.(poolRunnerStarter)
	if !ok {
		return cur, fmt.Errorf("lease %s: a runner pool's member needs the runner protocol's hook (leasehook.Sources.Tasks: the controller's): %w", cur.ID, drivers.ErrUnsupported)
	}
	if cur.ProviderLeaseID != sb.ID() {
		upd := cur.shallow()
		upd.ProviderLeaseID = sb.ID()
		if err := m.store.UpdateLease(wctx, upd); err != nil {
			return cur, fmt.Errorf("lease %s: recording provider lease id %s: %w", cur.ID, sb.ID(), err)
		}
		cur = upd
	}
	h := &Handle{m: m, lease: cur, driver: a.drv, sandbox: sb}
	if err := starter.StartPoolRunner(ctx, h); err != nil {
		return cur, fmt.Errorf("lease %s: starting the pool member's runner: %w", cur.ID, err)
	}
	return cur, nil
}

// disconnectedRunners returns the pooled members of a runner pool among
// have that this process holds no sandbox of and whose runner is connected
// nowhere: members another process started, whose runners lost their
// ingress with it (a restart).
func (m *Manager) disconnectedRunners(ctx context.Context, have []*Lease) []*Lease {
	starter, ok := m.tasks.(poolRunnerStarter)
	if !ok {
		return nil
	}
	var out []*Lease
	for _, l := range have {
		if l.Status != StatusPooled || l.Runner == nil || m.liveHandle(l.ID) != nil {
			continue
		}
		if connected, err := starter.PoolRunnerConnected(ctx, l.ID); err == nil && !connected {
			out = append(out, l)
		}
	}
	return out
}

// reconnectRunner has the runner of l, a pooled member of a runner pool
// that another process started, connect to this process (the runner
// protocol's ReconnectPoolRunner), so that its adopter's first task starts
// on a connected runner again. It claims l meanwhile (no adoption takes a
// claimed member, and no other replica reconnects it), resumes its sandbox
// by id within the startup budget, and keeps the handle; a member whose
// sandbox or runner cannot be had is left as it is: its adoption resumes
// it and launches a runner as for any lease, and the pool pass retires it
// when it may no longer be adopted.
func (m *Manager) reconnectRunner(ctx context.Context, a *acq, l *Lease) {
	resumer, err := drivers.DriverAs[drivers.Resumer](a.drv)
	if err != nil {
		return
	}
	now := m.now()
	cl, err := m.store.ClaimLease(ctx, l.ID, m.opOwner(), now, now.Add(a.budget+m.o.ClaimGrace))
	if err != nil {
		return
	}
	defer func() {
		if cur, err := m.store.GetLease(context.WithoutCancel(ctx), l.ID); err == nil && cur.ClaimedBy == cl.ClaimedBy {
			m.unclaim(ctx, cur, "")
		}
	}()
	if cl.Status != StatusPooled || cl.Company != authz.InstanceCompany {
		return
	}
	bctx, cancel := retry.WithTimeout(ctx, m.o.clock, a.budget)
	defer cancel()
	sb, err := resumer.Resume(bctx, a.cfg, cl.ProviderLeaseID)
	if err != nil {
		m.o.logger.Info("lease: pool member's sandbox not resumed to reconnect its runner", "lease", l.ID, "err", err)
		return
	}
	h := &Handle{m: m, lease: cl, driver: a.drv, sandbox: sb}
	if err := m.tasks.(poolRunnerStarter).ReconnectPoolRunner(bctx, h); err != nil {
		m.o.logger.Info("lease: pool member's runner not reconnected", "lease", l.ID, "err", err)
		return
	}
	m.cacheHandle(h)
}

// retire destroys the pool member l with a receipt, for reason: it claims
// the member first, so that no adoption takes it meanwhile (adoptions skip
// claimed members), and leaves it alone if it was adopted before.
func (m *Manager) retire(ctx context.Context, l *Lease, reason string, rep *PoolReport) {
	now := m.now()
	cl, err := m.store.ClaimLease(ctx, l.ID, m.opOwner(), now, now.Add(m.o.knobs.CleanupBudget))
	if err != nil {
		return
	}
	if cl.Status != StatusPooled || cl.Company != authz.InstanceCompany {
		m.unclaim(ctx, cl, "")
		return
	}
	pending, ok := m.markPending(ctx, cl.clone(), drivers.Destroy, StatusReleased, "pool member retired: "+reason)
	if !ok {
		return
	}
	if _, err := m.cleanup(ctx, pending); err != nil {
		rep.RetirePending++
		return
	}
	rep.Retired++
}

// reapPools retires the members that may no longer be adopted: of an
// environment that is gone (when envs is the complete list,
// leasehook.Sources.SweepEnvironments), archived, or without a pool; made from
// another fingerprint than the environment's now (a config edit, a new
// template); older than the pool's max age; or beyond its size (the
// youngest go).
func (m *Manager) reapPools(ctx context.Context, envs []*environment.Environment, complete bool, rep *PoolReport) error {
	ls, err := m.store.ListLeases(ctx, Filter{Company: authz.InstanceCompany, Statuses: []Status{StatusPooled}})
	if err != nil {
		return fmt.Errorf("lease: pools: listing members: %w", err)
	}
	byID := make(map[string]*environment.Environment, len(envs))
	for _, e := range envs {
		byID[e.ID] = e
	}
	now := m.now()
	kept := map[string]int{}
	for _, l := range ls { // oldest first
		if !isMember(l) {
			continue
		}
		env, ok := byID[l.Environment]
		reason := ""
		switch {
		case !ok && !complete:
			continue // unknown here: never destroyed on a guess
		case !ok:
			reason = "its environment is gone"
		case env.Status != environment.StatusActive:
			reason = "its environment is " + string(env.Status)
		case env.Pool == nil:
			reason = "its environment has no pool"
		case env.Pool.MaxAge > 0 && !now.Before(l.AcquiredAt.Add(env.Pool.MaxAge)):
			reason = fmt.Sprintf("older than the pool's max age %s", env.Pool.MaxAge)
		}
		if reason == "" {
			if d, err := m.reg.Lookup(env.Driver); err == nil {
				if fp, err := environmentFingerprint(d, env); err == nil && fp != l.Fingerprint {
					reason = "the environment's config or active template changed since it started"
				}
			}
		}
		if reason == "" && kept[env.ID] >= env.Pool.Size {
			reason = fmt.Sprintf("the pool keeps %d members", env.Pool.Size)
		}
		if reason == "" {
			kept[env.ID]++
			continue
		}
		m.retire(ctx, l, reason, rep)
	}
	return nil
}

// drain retires every member of environment envID (its delete: the blast
// radius shows them as pooled leases).
func (m *Manager) drain(ctx context.Context, envID, reason string, rep *PoolReport) error {
	ls, err := m.members(ctx, envID)
	if err != nil {
		return fmt.Errorf("lease: draining the pool of environment %s: %w", envID, err)
	}
	for _, l := range ls {
		if l.Status == StatusPooled {
			m.retire(ctx, l, reason, rep)
		}
	}
	return nil
}

// poolTargets returns the environments of pools, and whether the list is
// complete (leasehook.Sources.SweepEnvironments lists every environment).
func (m *Manager) poolTargets(ctx context.Context) ([]*environment.Environment, bool, error) {
	if m.o.sweepEnvironments == nil {
		return nil, false, nil
	}
	envs, err := m.o.sweepEnvironments(ctx)
	return envs, true, err
}

// MaintainPools runs one pool pass for p, who must be allowed
// authz.ActionSweep: it retires (destroys, with receipts) the members that
// may no longer be adopted (see PoolReport.Retired) and starts the members
// each active environment's pool lacks, waiting for those starts, over
// every saved environment. Failures of single
// members are counted; the error joins store failures and failed starts.
func (m *Manager) MaintainPools(ctx context.Context, p authz.Principal) (PoolReport, error) {
	var rep PoolReport
	if err := m.authorize(ctx, p, authz.ActionSweep, authz.Resource{Kind: authz.ResourceKindLease}); err != nil {
		return rep, fmt.Errorf("lease: maintain pools: %w", err)
	}
	envs, complete, err := m.poolTargets(ctx)
	if err != nil {
		return rep, fmt.Errorf("lease: maintain pools: listing environments: %w", err)
	}
	err = m.reapPools(ctx, envs, complete, &rep)
	for _, env := range envs {
		if env.Pool != nil && env.Status == environment.StatusActive {
			err = errors.Join(err, m.fill(ctx, env, &rep))
		}
	}
	return rep, err
}

// sweepPools is the pool part of a Sweep: it retires what may no longer
// be adopted and starts refills in the background.
func (m *Manager) sweepPools(ctx context.Context, rep *SweepReport) error {
	envs, complete, err := m.poolTargets(ctx)
	if err != nil {
		return fmt.Errorf("lease: sweep: pools: listing environments: %w", err)
	}
	err = m.reapPools(ctx, envs, complete, &rep.Pools)
	for _, env := range envs {
		m.refillSoon(env)
	}
	return err
}

// liveImageMismatch checks the live image identity of an adopted member's
// sandbox (IMG-3) against the one the acquisition expects: the active
// template's while it applies, else the configured image's when the
// reference pins one (a digest, a snapshot id). It returns why they
// differ, or "" when they match or nothing is expected or reported (a
// mutable tag, a driver without image_identity).
func (m *Manager) liveImageMismatch(ctx context.Context, a *acq, sb drivers.Sandbox) string {
	want := ""
	if a.template != nil {
		want = a.template.Identity
	} else if ref, err := a.drv.Schema().Image(a.snapshot); err == nil {
		if id, ok := ref.Identity(); ok {
			want = id.String()
		}
	}
	if want == "" {
		return ""
	}
	ir, err := drivers.SandboxAs[drivers.ImageReporter](sb, drivers.Narrowing(a.drv, 0))
	if err != nil {
		return ""
	}
	live, err := ir.ImageIdentity(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("it could not report its image (%v); want %s", err, want)
	case live.String() != want:
		return fmt.Sprintf("it reports %s, want %s", live, want)
	}
	return ""
}

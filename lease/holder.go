package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
)

// A host lease (local, ssh) is a session that lives in the process of the
// manager that acquired it (its holder): nothing at a provider can be
// destroyed by id, and "the process ended" is not something another
// manager can see. So the holder keeps a claim on the lease (Lease.Holder,
// HolderUntil), renewed on a heartbeat; only the holder's handle ends the
// session with a receipt (the driver kills and verifies the process
// groups); any other manager's release or sweep records pending_cleanup
// naming the holder and never confirms what nobody checked (LEASE-7).

// beat is the heartbeat of one held host lease.
type beat struct {
	stop chan struct{}
	once sync.Once
}

func (h *Handle) stopBeat() {
	if h.beat != nil {
		h.beat.once.Do(func() { close(h.beat.stop) })
	}
}

// holderTTL is how long a holder's claim lasts after a renewal.
func (m *Manager) holderTTL() time.Duration {
	return holderClaimBeats * m.o.knobs.HostHeartbeat
}

// hold marks upd (a host lease about to become active) as held by this
// manager.
func (m *Manager) hold(upd *Lease, now time.Time) {
	upd.Holder, upd.HolderUntil = m.owner, now.Add(m.holderTTL())
}

// startBeat renews this manager's claim on the host lease of h every
// heartbeat until the handle is dropped or the manager closed.
func (m *Manager) startBeat(h *Handle) {
	h.beat = &beat{stop: make(chan struct{})}
	next := m.now().Add(m.o.knobs.HostHeartbeat)
	go func() {
		for {
			// Wait for the beat's own deadline, not a fixed interval from
			// whenever this line runs: a clock that moved on meanwhile
			// fires at once, and no beat is skipped.
			select {
			case <-h.beat.stop:
				return
			case <-clock.At(m.o.clock, next):
			}
			m.renewHolder(h.lease.ID)
			next = next.Add(m.o.knobs.HostHeartbeat)
			if now := m.now(); next.Before(now) {
				next = now // beats missed while renewing are not replayed
			}
		}
	}()
}

// renewHolder extends this manager's claim on lease id. It writes nothing
// while another operation holds a claim on the lease (its own update would
// then be stale); the compare-and-set update loses to any concurrent write.
func (m *Manager) renewHolder(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A concurrent write of another field (a touch, a release's claim)
	// makes the compare-and-set fail; read again and retry a few times so
	// that an unrelated write does not cost the holder its renewal.
	for range 3 {
		if !m.renewHolderOnce(ctx, id) {
			return
		}
	}
}

// renewHolderOnce tries one renewal; it reports whether it lost a
// compare-and-set race and should be tried again.
func (m *Manager) renewHolderOnce(ctx context.Context, id string) (retry bool) {
	l, err := m.store.GetLease(ctx, id)
	now := m.now()
	if err != nil || l.Holder != m.owner || l.ClaimedBy != "" && l.ClaimedUntil.After(now) {
		return
	}
	switch l.Status {
	case StatusActive, StatusRetained, StatusPendingCleanup:
	default:
		return
	}
	upd := l.clone()
	upd.HolderUntil = now.Add(m.holderTTL())
	err = m.store.UpdateLease(ctx, upd)
	if errors.Is(err, errcode.ErrConflict) {
		return true
	}
	if err != nil {
		m.o.logger.Info("lease: renewing a host lease claim", "lease", id, "err", err)
	}
	return false
}

// hostUnchecked is why a host lease without this manager's live session
// cannot be ended here while its holder's claim lasts: it names the
// holder and says what ends it.
func (m *Manager) hostUnchecked(l *Lease) error {
	return fmt.Errorf("lease %s: host session held by manager %s (claim renewed until %s); it ends when that manager releases it, or by a check on the host once the claim expires; not confirmed",
		l.ID, l.Holder, l.HolderUntil.UTC().Format(time.RFC3339))
}

// envTag is the variable berth sets, to the lease id, in the environment of
// every command a Handle runs, so that the processes of a host lease (and
// their children, which inherit it) are found on the host after their
// holder is gone.
const envTag = "BERTH_LEASE"

// tagged returns cmd with the lease's tag in its environment.
func tagged(cmd drivers.Command, leaseID string) drivers.Command {
	env := make(map[string]string, len(cmd.Env)+1)
	for k, v := range cmd.Env {
		env[k] = v
	}
	env[envTag] = leaseID
	cmd.Env = env
	return cmd
}

// checkHost ends a host lease whose holder is gone (no live session here,
// the holder's claim expired) by a check: over a fresh session of the
// driver it ends the lease's cgroup where its runner got one, kills every
// process whose environment carries the lease's tag and verifies, by
// scanning /proc again, that none is left (hostCheck: evidence cgroup or
// tag_scan). The receipt is
// confirmed only when the scan found none; a host without /proc, a session
// that cannot be opened or processes that survive leave an error.
func (m *Manager) checkHost(ctx context.Context, drv drivers.Driver, l *Lease) (drivers.Receipt, error) {
	if !safeTag(l.ID) {
		return drivers.Receipt{}, fmt.Errorf("lease %s: the id cannot be used as a process tag; an operator must check the host", l.ID)
	}
	cfg, err := m.resolveConfig(ctx, drv, l.Config)
	if err != nil {
		return drivers.Receipt{}, fmt.Errorf("lease %s: check on the host: %w", l.ID, err)
	}
	sb, err := drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: l.ID + "-check", Workspace: l.Workspace})
	if err != nil {
		return drivers.Receipt{}, fmt.Errorf("lease %s: check on the host: opening a fresh session: %w", l.ID, err)
	}
	defer func() {
		if _, err := sb.Release(context.WithoutCancel(ctx), drivers.Destroy); err != nil {
			m.o.logger.Info("lease: ending a host check session", "lease", l.ID, "err", err)
		}
	}()
	ev, kind, err := hostCheck(ctx, sb, l.ID)
	if err != nil {
		return drivers.Receipt{}, fmt.Errorf("lease %s: check on the host: %w", l.ID, err)
	}
	return drivers.Receipt{ProviderLeaseID: l.ProviderLeaseID, State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: m.now(), EvidenceKind: kind,
		Evidence: fmt.Sprintf("holder %s gone (claim expired %s); checked on the host over a fresh session: %s",
			l.Holder, l.HolderUntil.UTC().Format(time.RFC3339), ev)}, nil
}

// safeTag reports whether id holds only characters that need no quoting.
func safeTag(id string) bool {
	if id == "" {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// killTaggedScript ($1 = NAME=VALUE, $2 = the lease id as a basic regular
// expression) kills every process whose environment holds $1 (one grep -z
// over every /proc/*/environ where grep has -z, else a tr and grep per
// process) and every runner launched for the lease, by its argument
// --lease=ID (driverkit.LaunchRunnerByExec): a runner is not dumpable, so
// another process of its account cannot read its environment, but every
// process can read its command line. The regular expression's own text
// (in grep's argv) does not match itself. It waits (up to about five
// seconds) until a /proc scan finds none; it prints "killed N tagged
// process(es)" and exits 0, or prints the survivors and exits 1; without
// /proc it exits 3.
const killTaggedScript = `tag=$1; arg="^--lease=$2\$"
[ -r /proc/self/environ ] || { echo "no readable /proc on this host"; exit 3; }
add() { case " $found " in *" $1 "*) ;; *) found="$found $1" ;; esac; }
if printf 'x\0%s\0' "$tag" | grep -qzxF -- "$tag" 2>/dev/null; then
  # One grep over every environ (NUL-separated entries), not two processes per pid.
  scan() { found=; for f in $(grep -lszxF -- "$tag" /proc/[0-9]*/environ) $(grep -lsz -- "$arg" /proc/[0-9]*/cmdline); do d=${f%/*}; [ "$d" = "/proc/$$" ] || add "${d#/proc/}"; done; }
else
  scan() { found=; for d in /proc/[0-9]*; do [ "$d" = "/proc/$$" ] && continue; if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qxF -- "$tag" || tr '\0' '\n' < "$d/cmdline" 2>/dev/null | grep -q -- "$arg"; then add "${d#/proc/}"; fi; done; }
fi
scan; n=0
for p in $found; do kill -KILL "$p" 2>/dev/null && n=$((n+1)); done
i=0
while :; do
  scan
  if [ -z "$found" ]; then echo "killed $n tagged process(es)"; exit 0; fi
  i=$((i+1)); if [ $i -ge 50 ]; then echo "still alive:$found"; exit 1; fi
  sleep 0.1 2>/dev/null || sleep 1
done`

// breQuote returns s with the characters special in a basic regular
// expression escaped (ids pass safeTag: only '.' is).
func breQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`.[]*^$\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// hostReopener is a host driver whose Acquire for a lease id opens that
// lease's session again from any process: the same workspace and the same
// runner directory (state, ingress path), so that a runner the first
// process launched is found (the ssh driver). The local driver is not one:
// its runner directory is a temporary directory the acquiring process
// made, and its ingress a socket served by that process alone.
type hostReopener interface{ ReopensLeaseSessions() bool }

// openHost is Manager.Open of a host lease that has no live handle here
// (l, as loaded and authorized for p). The lease's session lives in its
// holder's process (LEASE-7), so this manager becomes the holder first:
// it waits, within ctx, until the holder's claim (and any operation's
// claim) expired, takes the lease over by a compare-and-set write of
// itself as Holder, and then opens a fresh session of the driver for the
// lease (drivers.AcquireRequest.LeaseID), whose provider lease id must be
// the recorded one. A holder that is alive renews its claim, so another
// replica never takes a live session over; a holder killed with -9 stops
// renewing and its claim expires after three heartbeats (30 seconds). If
// the session cannot be opened after the takeover, the claim written is
// left to expire. A driver that is no hostReopener is refused with an
// error wrapping drivers.ErrUnsupported.
func (m *Manager) openHost(ctx context.Context, p authz.Principal, drv drivers.Driver, l *Lease) (*Handle, error) {
	if r, ok := drv.(hostReopener); !ok || !r.ReopensLeaseSessions() {
		return nil, fmt.Errorf("lease %s is a host lease of driver %q, whose session and runner directory belong to the process that acquired it: no other process can open it; release it from that process, or let a sweep check the host once its claim expired: %w",
			l.ID, drv.Name(), drivers.ErrUnsupported)
	}
	for {
		now := m.now()
		var until time.Time
		if l.Holder != "" && l.Holder != m.owner && l.HolderUntil.After(now) {
			until = l.HolderUntil
		}
		if l.ClaimedBy != "" && l.ClaimedUntil.After(now) && l.ClaimedUntil.After(until) {
			until = l.ClaimedUntil
		}
		if !until.IsZero() {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("lease %s: its host session is held by manager %s (claim renewed until %s), and it was still held when the wait for it ended; a holder that is gone stops renewing, so open it again once the claim expired: %w: %w",
					l.ID, l.Holder, l.HolderUntil.UTC().Format(time.RFC3339), errcode.ErrConflict, ctx.Err())
			case <-clock.At(m.o.clock, until.Add(time.Millisecond)):
			}
		} else {
			upd := l.clone()
			m.hold(upd, now)
			err := m.store.UpdateLease(ctx, upd)
			if err == nil {
				return m.reopenHost(ctx, p, drv, upd)
			}
			if !errors.Is(err, errcode.ErrConflict) {
				return nil, fmt.Errorf("lease %s: take over the host session: %w", l.ID, err)
			}
		}
		cur, err := m.store.GetLease(ctx, l.ID)
		if err != nil {
			return nil, fmt.Errorf("lease %s: %w", l.ID, err)
		}
		if cur.Status != StatusActive && cur.Status != StatusRetained {
			return nil, fmt.Errorf("lease %s is %s, not a live lease: %w", l.ID, cur.Status, errcode.ErrConflict)
		}
		l = cur
	}
}

// reopenHost opens the session of the host lease l, which this manager
// now holds (openHost), and returns its handle for p, kept as the live
// one (its heartbeat started).
func (m *Manager) reopenHost(ctx context.Context, p authz.Principal, drv drivers.Driver, l *Lease) (*Handle, error) {
	cfg, err := m.resolveConfig(ctx, drv, l.Config)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", l.ID, err)
	}
	sb, err := drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: l.ID, Workspace: l.Workspace, Runner: cloneRunner(l.Runner)})
	if err != nil {
		return nil, fmt.Errorf("lease %s: open its host session again: %w", l.ID, err)
	}
	if l.ProviderLeaseID != "" && sb.ID() != l.ProviderLeaseID {
		_, _ = sb.Release(context.WithoutCancel(ctx), drivers.Keep)
		return nil, fmt.Errorf("lease %s: the host session opened again is %s, not the recorded %s (the workspace changed): %w",
			l.ID, sb.ID(), l.ProviderLeaseID, errcode.ErrConflict)
	}
	h := &Handle{m: m, lease: l, driver: drv, sandbox: sb, resumed: true}
	m.startBeat(h)
	m.mu.Lock()
	if cur := m.live[l.ID]; cur != nil {
		// A concurrent Open of this manager won: its session is the one.
		m.mu.Unlock()
		h.stopBeat()
		_, _ = sb.Release(context.WithoutCancel(ctx), drivers.Keep)
		return m.forCaller(ctx, p, cur), nil
	}
	m.live[l.ID] = h
	m.mu.Unlock()
	return m.forCaller(ctx, p, h), nil
}

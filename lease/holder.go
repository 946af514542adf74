package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
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
	return HolderClaimBeats * m.o.HostHeartbeat
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
	go func() {
		for {
			select {
			case <-h.beat.stop:
				return
			case <-m.o.Clock.After(m.o.HostHeartbeat):
			}
			m.renewHolder(h.lease.ID)
		}
	}()
}

// renewHolder extends this manager's claim on lease id. It writes nothing
// while another operation holds a claim on the lease (its own update would
// then be stale); the compare-and-set update loses to any concurrent write.
func (m *Manager) renewHolder(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	upd := l.Clone()
	upd.HolderUntil = now.Add(m.holderTTL())
	if err := m.store.UpdateLease(ctx, upd); err != nil && !errors.Is(err, ErrConflict) {
		m.o.Logger.Info("lease: renewing a host lease claim", "lease", id, "err", err)
	}
}

// hostUnchecked is why a host lease without this manager's live session
// cannot be ended here: it names the holder and says what ends it.
func (m *Manager) hostUnchecked(l *Lease, d drivers.Disposition) error {
	now := m.now()
	switch {
	case l.Holder == "":
		return fmt.Errorf("lease %s: host session with no recorded holder; this manager has no live session to %s, and nothing on the host was checked: %w",
			l.ID, d, drivers.ErrUnsupported)
	case l.HolderUntil.After(now):
		return fmt.Errorf("lease %s: host session held by manager %s (claim renewed until %s); it ends when that manager releases it, or by a check on the host once the claim expires; not confirmed",
			l.ID, l.Holder, l.HolderUntil.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("lease %s: host session of manager %s, whose claim expired at %s; ending it needs a check on the host (kill and verify its process groups), which driver %q does not offer: %w",
		l.ID, l.Holder, l.HolderUntil.UTC().Format(time.RFC3339), l.Provider, drivers.ErrUnsupported)
}

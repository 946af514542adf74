package lease

import (
	"context"
	"io"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
)

// NewManager is leasehook.New, typed.
func NewManager(src leasehook.Sources) (*Manager, envhook.UsageReporter[environment.Usage]) {
	return newManager(src)
}

// Close is leasehook.Close, typed.
func Close(m *Manager) error { return m.close() }

// Clone returns a deep copy of l (Lease.clone).
func Clone(l *Lease) *Lease { return l.clone() }

// Draft returns req set to acquire for the unsaved config cfg of driver
// (leasehook.Draft).
func Draft(req AcquireRequest, driver string, cfg config.Config) AcquireRequest {
	return leasehook.Draft(req, driver, cfg).(AcquireRequest)
}

// The errors an acquisition tells apart by their reason.
var (
	ErrPreserved     = errPreserved
	ErrStartupBudget = errStartupBudget
	ErrImageMismatch = errImageMismatch
)

// SetJoinHook makes m call f each time a caller has joined a coalesced
// acquisition of key.
func SetJoinHook(m *Manager, f func(key string)) { m.joined = f }

// WaitPoolRefills waits until m's background pool refills are done.
func WaitPoolRefills(m *Manager) { m.pools.wg.Wait() }

// Fingerprint is the reuse fingerprint of cfg for d (reuseFingerprint).
var Fingerprint = reuseFingerprint

// Reusable reports whether leases of p are resumed by later acquisitions.
func Reusable(p Policy) bool { return p.reusable() }

// Start starts a streamed process through h (Handle.start).
func Start(h *Handle, ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	return h.start(ctx, cmd, stdout, stderr)
}

// HoldsSandbox reports whether l still owns a sandbox (Lease.holdsSandbox).
func HoldsSandbox(l *Lease) bool { return l.holdsSandbox() }

package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/lease"
)

// errCrashed is what a crashed process's calls return: they never reach the
// store or the provider.
var errCrashed = errors.New("process crashed")

// crasher simulates a process crash: after a given number of calls to the
// store or the provider, every later call of that process fails without
// effect, as if the process were gone.
type crasher struct {
	left atomic.Int64 // calls left before the crash; < 0: never
	dead atomic.Bool
}

func newCrasher() *crasher {
	c := &crasher{}
	c.left.Store(-1)
	return c
}

// arm makes the crash happen at the nth call from now (n >= 1).
func (c *crasher) arm(n int) { c.left.Store(int64(n)) }

// call reports whether the process is still alive for one more call.
func (c *crasher) call() error {
	if c.dead.Load() {
		return errCrashed
	}
	if c.left.Load() < 0 {
		return nil
	}
	if c.left.Add(-1) <= 0 {
		c.dead.Store(true)
		return errCrashed
	}
	return nil
}

// crashStore is the store as one process sees it.
type crashStore struct {
	s lease.Store
	c *crasher
}

func (s crashStore) InsertLease(ctx context.Context, l *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.InsertLease(ctx, l, q)
}

func (s crashStore) GetLease(ctx context.Context, id string) (*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.GetLease(ctx, id)
}

func (s crashStore) DeleteLease(ctx context.Context, id string, version int64) error {
	if err := s.c.call(); err != nil {
		return err
	}
	return s.s.DeleteLease(ctx, id, version)
}

func (s crashStore) PruneLeases(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := s.c.call(); err != nil {
		return 0, err
	}
	return s.s.PruneLeases(ctx, before, limit)
}

func (s crashStore) UpdateLease(ctx context.Context, l *lease.Lease) error {
	if err := s.c.call(); err != nil {
		return err
	}
	return s.s.UpdateLease(ctx, l)
}

func (s crashStore) FindByReuseKey(ctx context.Context, key string) (*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.FindByReuseKey(ctx, key)
}

func (s crashStore) FindByRunKey(ctx context.Context, key string) (*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.FindByRunKey(ctx, key)
}

func (s crashStore) ListLeases(ctx context.Context, f lease.Filter) ([]*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.ListLeases(ctx, f)
}

func (s crashStore) ClaimLease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.ClaimLease(ctx, id, owner, now, until)
}

func (s crashStore) ClaimForSweep(ctx context.Context, owner string, now, until time.Time, limit int) ([]*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.ClaimForSweep(ctx, owner, now, until, limit)
}

// crashDriver is the fake provider as one process sees it. A crash inside
// Acquire (for example while recording the provider lease id) leaves the
// sandbox running at the provider, as a real crash would.
type crashDriver struct {
	*fake.Driver
	c *crasher
}

var (
	_ drivers.Resumer   = crashDriver{}
	_ drivers.Lister    = crashDriver{}
	_ drivers.Destroyer = crashDriver{}
)

func (d crashDriver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if err := d.c.call(); err != nil {
		return nil, err
	}
	if alloc := req.Allocated; alloc != nil {
		req.Allocated = func(actx context.Context, id string) error {
			err := alloc(actx, id)
			if d.c.dead.Load() {
				return nil // the process is gone: nobody tells the provider anything
			}
			return err
		}
	}
	sb, err := d.Driver.Acquire(ctx, cfg, req)
	if d.c.dead.Load() {
		return nil, errCrashed
	}
	if err != nil {
		return nil, err
	}
	return &crashSandbox{Sandbox: sb, c: d.c}, nil
}

func (d crashDriver) Resume(ctx context.Context, cfg config.Config, id string) (drivers.Sandbox, error) {
	if err := d.c.call(); err != nil {
		return nil, err
	}
	sb, err := d.Driver.Resume(ctx, cfg, id)
	if err != nil {
		return nil, err
	}
	return &crashSandbox{Sandbox: sb, c: d.c}, nil
}

func (d crashDriver) List(ctx context.Context, cfg config.Config, labels map[string]string) ([]drivers.SandboxInfo, error) {
	if err := d.c.call(); err != nil {
		return nil, err
	}
	return d.Driver.List(ctx, cfg, labels)
}

func (d crashDriver) Destroy(ctx context.Context, cfg config.Config, id string) (drivers.Receipt, error) {
	if err := d.c.call(); err != nil {
		return drivers.Receipt{}, err
	}
	return d.Driver.Destroy(ctx, cfg, id)
}

type crashSandbox struct {
	drivers.Sandbox
	c *crasher
}

func (s *crashSandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.Sandbox.Exec(ctx, cmd)
}

func (s *crashSandbox) Release(ctx context.Context, d drivers.Disposition) (drivers.Receipt, error) {
	if err := s.c.call(); err != nil {
		return drivers.Receipt{}, err
	}
	return s.Sandbox.Release(ctx, d)
}

// process returns a manager that runs as one process over the world's
// store and provider, crashing as c says.
func (w *world) process(c *crasher) *lease.Manager {
	reg := drivers.NewRegistry(crashDriver{Driver: w.fk, c: c})
	m, _ := newManagerWith(crashStore{s: w.store, c: c}, reg, w.asg, nil, w.options())
	return m
}

func (s crashStore) AdoptPooled(ctx context.Context, ad *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	if err := s.c.call(); err != nil {
		return nil, err
	}
	return s.s.AdoptPooled(ctx, ad, q)
}

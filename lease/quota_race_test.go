package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/lease"
)

// meetingStore makes the quota reads of company "acme" wait (up to a
// moment) for each other after reading, so that concurrent acquisitions
// all read the count before any of them writes its record.
type meetingStore struct {
	lease.Store
	mu      sync.Mutex
	waiting int
	met     chan struct{}
	want    int
}

func (s *meetingStore) ListLeases(ctx context.Context, f lease.Filter) ([]*lease.Lease, error) {
	ls, err := s.Store.ListLeases(ctx, f)
	if f.Company == "acme" && f.Live {
		s.mu.Lock()
		s.waiting++
		if s.waiting == s.want {
			close(s.met)
		}
		met := s.met
		s.mu.Unlock()
		select {
		case <-met:
		case <-time.After(60 * time.Millisecond):
		}
	}
	return ls, err
}

// Concurrent acquisitions of one company in one manager do not pass its
// quota together: of four at once under PerCompany 2, two get a lease and
// two are refused with ErrQuota.
func TestQuotaHoldsUnderConcurrentAcquisitions(t *testing.T) {
	ctx := context.Background()
	const n = 4
	ms := &meetingStore{Store: lease.NewMemoryStore(), met: make(chan struct{}), want: n}
	w := newWorld(t, worldOpts{store: ms, options: func(o *mopts) {
		o.Quotas = lease.Quotas{PerCompany: 2}
	}})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: "env-1", Run: fmt.Sprint("run-", i)})
		}()
	}
	wg.Wait()
	ok, refused := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, lease.ErrQuota):
			refused++
		default:
			t.Errorf("acquisition %d: %v", i, err)
		}
	}
	if ok != 2 || refused != n-2 {
		t.Errorf("%d leased and %d refused under PerCompany 2; want 2 and %d", ok, refused, n-2)
	}
}

package leasetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// RecordActive records lease id of company in s as an active ephemeral
// lease without a sandbox, unless a lease with that id is recorded
// already: for tests of the runner controller, which mints tickets and
// connects sessions only for leases recorded active (the LeaseReader
// given to controller.New), without a lease manager.
func RecordActive(t testing.TB, s lease.Store, id, company string) {
	t.Helper()
	l := &lease.Lease{ID: id, Company: company, Environment: "env-test", Provider: "test", Status: lease.StatusActive,
		Policy: lease.Ephemeral, AcquiredAt: time.Now().UTC().Truncate(time.Microsecond)}
	if _, err := s.InsertLease(context.Background(), l, lease.Quotas{}); err != nil && !errors.Is(err, errcode.ErrConflict) {
		t.Fatalf("record lease %s: %v", id, err)
	}
}

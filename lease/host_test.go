package lease_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// TestHostLeaseReleasedWithoutItsHandle (issue 10 item 4, LEASE-7,
// LEASE-10) on OpenSSH's sshd: manager A acquires an ssh lease and starts
// a sleep; manager B, on the same store, releases it: the record is
// pending_cleanup naming A, never confirmed, and the sleep still runs
// (pgrep over a fresh connection). B's sweeps leave it pending, also once
// A's claim has expired (nothing checked the host). A's own release then
// ends the session, and pgrep over a fresh connection finds nothing.
func TestHostLeaseReleasedWithoutItsHandle(t *testing.T) {
	t.Parallel()
	srv := testenv.SSHD(t)
	ctx := context.Background()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]any{
		ssh.FieldHost: srv.Host(), ssh.FieldPort: srv.Port(), ssh.FieldUser: srv.User(),
		ssh.FieldPrivateKey: srv.ClientKeyPEM(), ssh.FieldKnownHosts: []any{srv.KnownHostsLine()}, ssh.FieldWorkdir: dir,
	}
	// One store and catalog shared by the replicas; each replica has its
	// own ssh driver (its own connections), as separate processes would.
	envs, secrets := environment.NewMemoryStore(), environment.NewMemorySecretStore()
	regA := drivers.NewRegistry(ssh.New(nil))
	cat := environment.NewCatalog(envs, regA, secrets, nil)
	v, err := cat.Create(ctx, op, environment.CreateRequest{Name: "box", Driver: "ssh", Config: raw})
	if err != nil {
		t.Fatal(err)
	}
	asg := environment.NewAssignments(environment.NewMemoryBindingStore(), envs, regA, nil)
	store := lease.NewMemoryStore()
	manager := func(reg *drivers.Registry, clk clock.Clock) *lease.Manager {
		m := lease.NewManager(store, reg, &lease.Options{Secrets: secrets.Get, Assignments: asg, Clock: clk})
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	mA := manager(regA, nil)
	mB := manager(drivers.NewRegistry(ssh.New(nil)), nil)

	// sleeping reports whether the sleep runs on the host, read over a
	// fresh connection (a new driver, so no pooled connection is reused).
	cfg, err := ssh.New(nil).Schema().Normalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	sleeping := func() bool {
		t.Helper()
		d := ssh.New(nil)
		sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = sb.Release(ctx, drivers.Destroy) }()
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"pgrep", "-f", "slee[p] 3141"}})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExitCode == 0
	}

	h, err := mA.Acquire(ctx, op, lease.AcquireRequest{EnvironmentID: v.ID, Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	holder := h.Lease().Holder
	if holder == "" {
		t.Fatalf("the host lease records no holder: %+v", h.Lease())
	}
	proc, err := h.Start(ctx, drivers.Command{Argv: []string{"sleep", "3141"}}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { defer close(waited); _, _ = proc.Wait() }()
	for !sleeping() { // the remote shell may still be starting it
	}

	l, err := mB.Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: drivers.Destroy})
	if !errors.Is(err, lease.ErrCleanupPending) {
		t.Fatalf("B's release: %v, want ErrCleanupPending", err)
	}
	if l.Status != lease.StatusPendingCleanup || l.Cleanup == lease.CleanupConfirmed || !strings.Contains(l.FailureReason, holder) {
		t.Fatalf("after B's release: status %s, cleanup %s, reason %q; want pending_cleanup naming %s, not confirmed",
			l.Status, l.Cleanup, l.FailureReason, holder)
	}
	if !sleeping() {
		t.Fatal("the sleep is gone although nobody ended it")
	}
	rep, err := mB.Sweep(ctx, op)
	if err != nil || rep.StillPending != 1 || rep.CleanedUp != 0 {
		t.Errorf("B's sweep while A holds the lease: %+v, %v; want it still pending", rep, err)
	}
	// Once A's claim has expired (B's clock an hour ahead), B still cannot
	// end what it cannot check: the lease stays pending.
	late := manager(drivers.NewRegistry(ssh.New(nil)), clock.NewFake(time.Now().Add(time.Hour)))
	if rep, err := late.Sweep(ctx, op); err != nil || rep.StillPending != 1 {
		t.Errorf("a sweep after A's claim expired: %+v, %v; want it still pending", rep, err)
	}
	if got, _ := store.GetLease(ctx, h.ID()); got.Status != lease.StatusPendingCleanup || got.Cleanup == lease.CleanupConfirmed ||
		!strings.Contains(got.CleanupEvidence, "expired") {
		t.Errorf("after the sweeps: %s, cleanup %s, evidence %q; want pending, unconfirmed, saying A's claim expired", got.Status, got.Cleanup, got.CleanupEvidence)
	}
	if !sleeping() {
		t.Fatal("the sleep is gone although nobody ended it")
	}

	l, err = h.Release(ctx, lease.ReleaseOptions{Disposition: drivers.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != lease.CleanupConfirmed || !strings.Contains(l.CleanupEvidence, "killed process groups") {
		t.Fatalf("A's release: %+v, %v; want released, confirmed by the killed process groups", l, err)
	}
	<-waited
	if sleeping() {
		t.Error("the sleep still runs after A's confirmed release")
	}
}

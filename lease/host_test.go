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
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// TestHostLeaseReleasedWithoutItsHandle (issue 10 item 4, LEASE-7,
// LEASE-10) on OpenSSH's sshd: manager A acquires an ssh lease and starts
// a sleep; manager B, on the same store, releases it: the record is
// pending_cleanup naming A, never confirmed, and the sleep still runs
// (pgrep over a fresh connection). B's sweep leaves it pending. A's own
// release then ends the session, and pgrep over a fresh connection finds
// nothing.
// sshReplicas is an ssh environment on OpenSSH's sshd, saved in a catalog
// whose store and lease store replicas share; each replica gets its own ssh
// driver (its own connections), as separate processes would.
type sshReplicas struct {
	t       *testing.T
	envID   string
	store   lease.Store
	asg     *environment.Assignments
	secrets environment.SecretStore
	cfg     config.Config // resolved, for the checks over fresh connections
	secs    string        // the sleep's argument, distinct per test (they run in parallel)
}

func newSSHReplicas(t *testing.T, secs string) *sshReplicas {
	srv := testenv.SSHD(t)
	ctx := context.Background()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": dir,
	}
	envs, secrets := envhook.NewMemoryStore().(environment.Store), envhook.NewMemorySecretStore().(environment.SecretStore)
	reg := drivers.NewRegistry(ssh.New(nil))
	v, err := envhook.NewCatalog(envs, reg, secrets, nil, nil).(*environment.Catalog).Create(ctx, op, environment.CreateRequest{Name: "box", Driver: "ssh", Config: raw})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ssh.New(nil).Schema().Normalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	return &sshReplicas{t: t, envID: v.ID, store: lease.NewMemoryStore(), secrets: secrets, cfg: cfg, secs: secs,
		asg: envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments)}
}

// manager returns a replica's manager on clk (nil: the wall clock).
func (r *sshReplicas) manager(clk clock.Clock) *lease.Manager {
	m, _ := newManagerWith(r.store, drivers.NewRegistry(ssh.New(nil)), r.asg, nil, &mopts{Sources: &leasehook.Sources{Secrets: r.secrets.Get, Clock: clk}})
	r.t.Cleanup(func() { _ = lease.Close(m) })
	return m
}

// sleeping reports whether the test's sleep runs on the host, read over a
// fresh connection (a new driver, so no pooled connection is reused).
func (r *sshReplicas) sleeping() bool {
	r.t.Helper()
	ctx := context.Background()
	sb, err := ssh.New(nil).Acquire(ctx, r.cfg, drivers.AcquireRequest{})
	if err != nil {
		r.t.Fatal(err)
	}
	defer func() { _, _ = sb.Release(ctx, drivers.Destroy) }()
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"pgrep", "-f", "slee[p] " + r.secs}})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.ExitCode == 0
}

// startSleep acquires the lease with m and starts the sleep through its
// handle; it returns when the host shows the sleep.
func (r *sshReplicas) startSleep(m *lease.Manager) *lease.Handle {
	r.t.Helper()
	ctx := context.Background()
	h, err := m.Acquire(ctx, op, lease.AcquireRequest{EnvironmentID: r.envID, Company: "acme"})
	if err != nil {
		r.t.Fatal(err)
	}
	proc, err := lease.Start(h, ctx, drivers.Command{Argv: []string{"sleep", r.secs}}, io.Discard, io.Discard)
	if err != nil {
		r.t.Fatal(err)
	}
	go func() { _, _ = proc.Wait(context.Background()) }()
	for !r.sleeping() { // the remote shell may still be starting it
	}
	return h
}

func TestHostLeaseReleasedWithoutItsHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newSSHReplicas(t, "3141")
	mA, mB := r.manager(nil), r.manager(nil)
	store, sleeping := r.store, r.sleeping
	h := r.startSleep(mA)
	holder := h.Lease().Holder
	if holder == "" {
		t.Fatalf("the host lease records no holder: %+v", h.Lease())
	}

	l, err := mB.Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if !errors.Is(err, lease.ErrCleanupPending) {
		t.Fatalf("B's release: %v, want ErrCleanupPending", err)
	}
	if l.Status != lease.StatusPendingCleanup || l.Cleanup == "confirmed" || !strings.Contains(l.FailureReason, holder) {
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
	if got, _ := store.GetLease(ctx, h.ID()); got.Status != lease.StatusPendingCleanup || got.Cleanup == "confirmed" {
		t.Errorf("after B's sweep: %s, cleanup %s; want pending, unconfirmed", got.Status, got.Cleanup)
	}
	if !sleeping() {
		t.Fatal("the sleep is gone although nobody ended it")
	}

	l, err = h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" || !strings.Contains(l.CleanupEvidence, "killed process groups") {
		t.Fatalf("A's release: %+v, %v; want released, confirmed by the killed process groups", l, err)
	}
	if l.CleanupEvidenceKind != drivers.EvidenceTagScan || !strings.Contains(l.CleanupEvidence, "would evade this scan") {
		t.Errorf("A's release: evidence %s %q, want tag_scan naming its evasion", l.CleanupEvidenceKind, l.CleanupEvidence)
	}
	if sleeping() {
		t.Error("the sleep still runs after A's confirmed release")
	}
}

// TestHostLeaseOfAGoneHolderEndsByACheck (issue 10 item 4): once the
// holder's claim has expired (A stopped renewing it, as a crashed process
// would; B's clock runs an hour ahead), B ends the lease only by a check:
// over a fresh session it kills the processes tagged with the lease id and
// verifies none is left. The receipt says what was checked, and pgrep over
// a fresh connection finds no sleep.
func TestHostLeaseOfAGoneHolderEndsByACheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newSSHReplicas(t, "2718")
	mA := r.manager(nil)
	h := r.startSleep(mA)
	_ = lease.Close(mA) // A stops renewing its claim and keeps its session

	mB := r.manager(clock.NewFake(time.Now().Add(time.Hour)))
	l, err := mB.Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Fatalf("B's release after A's claim expired: %+v, %v; want released by a check", l, err)
	}
	// No runner made a cgroup: berth's own tag scan, which names its
	// evasion (PRP-6).
	for _, want := range []string{"claim expired", "checked on the host", "tag_scan: killed 1", "BERTH_LEASE" + "=" + h.ID(), "would evade this scan"} {
		if !strings.Contains(l.CleanupEvidence, want) {
			t.Errorf("evidence %q lacks %q", l.CleanupEvidence, want)
		}
	}
	if l.CleanupEvidenceKind != drivers.EvidenceTagScan {
		t.Errorf("evidence kind %q, want tag_scan", l.CleanupEvidenceKind)
	}
	if r.sleeping() {
		t.Error("the sleep still runs after the checked release")
	}
	// A, back, finds the lease ended and frees its session.
	if l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil || l.Status != lease.StatusReleased {
		t.Errorf("A's release of the lease B ended: %+v, %v", l, err)
	}
}

// TestOpenTakesOverAHostLeaseOfAGoneHolder (issue 49 item 2): manager A
// acquires an ssh lease on OpenSSH's sshd and starts a sleep. B's Open
// while A's claim lasts waits and ends with its ctx, an error wrapping
// errcode.ErrConflict that names A. C's Open once A's claim expired (C's
// clock is an hour on) takes the lease over: the record names C as holder,
// the session is the recorded one, its commands run, and C's release ends
// A's sleep too (the tag check over C's session, since A's commands carry
// the lease's tag, not C's session's) with a confirmed receipt.
func TestOpenTakesOverAHostLeaseOfAGoneHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := newSSHReplicas(t, "1618")
	mA := r.manager(nil)
	h := r.startSleep(mA)
	// A, back at the end, frees its session (its connection would keep
	// sshd's connection process).
	t.Cleanup(func() { _, _ = h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy}) })
	holder := h.Lease().Holder
	_ = lease.Close(mA) // A stops renewing its claim and keeps its session

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := r.manager(nil).Open(wctx, op, h.ID())
	cancel()
	if !errors.Is(err, errcode.ErrConflict) || !strings.Contains(err.Error(), holder) || !strings.Contains(err.Error(), h.ID()) {
		t.Fatalf("B's Open while A's claim lasts: %v; want a conflict naming the lease and holder %s", err, holder)
	}

	mC := r.manager(clock.NewFake(time.Now().Add(time.Hour)))
	hC, err := mC.Open(ctx, op, h.ID())
	if err != nil {
		t.Fatalf("C's Open after A's claim expired: %v", err)
	}
	if got := hC.Lease().Holder; got == "" || got == holder {
		t.Errorf("holder after C's Open: %q; want C, not A (%s)", got, holder)
	}
	if stored, err := r.store.GetLease(ctx, h.ID()); err != nil || stored.Holder != hC.Lease().Holder {
		t.Errorf("stored holder after C's Open: %+v, %v", stored, err)
	}
	if hC.SandboxID() != h.SandboxID() {
		t.Errorf("C's session %s, want the recorded %s", hC.SandboxID(), h.SandboxID())
	}
	res, err := hC.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "echo $BERTH_LEASE"}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != h.ID() {
		t.Fatalf("a command of C's session: %+v, %v", res, err)
	}
	l, err := hC.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Fatalf("C's release: %+v, %v", l, err)
	}
	if !strings.Contains(l.CleanupEvidence, "BERTH_LEASE="+h.ID()) {
		t.Errorf("evidence %q lacks the tag check", l.CleanupEvidence)
	}
	if r.sleeping() {
		t.Error("A's sleep still runs after C's release")
	}
}

// TestOpenRefusesALocalLeaseOfAnotherManager (issue 49 item 2): a local
// lease's runner directory and ingress belong to the process that
// acquired it, so another manager's Open refuses it, naming the lease,
// with an error wrapping drivers.ErrUnsupported; the holder's own Open
// returns its live handle.
func TestOpenRefusesALocalLeaseOfAnotherManager(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	drv := local.New(nil)
	reg := drivers.NewRegistry(drv)
	cfg, err := drv.Schema().Normalize(map[string]any{"workdir": t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	envs := envhook.NewMemoryStore().(environment.Store)
	if err := envs.CreateEnvironment(ctx, &environment.Environment{ID: "here", Name: "here", Driver: drv.Name(),
		Status: environment.StatusActive, Config: cfg, Revision: 1}, false); err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemoryStore()
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, nil).(*environment.Assignments)
	mA, _ := newManagerWith(store, reg, asg, nil, nil)
	defer lease.Close(mA)
	mB, _ := newManagerWith(store, reg, asg, nil, nil)
	defer lease.Close(mB)
	h, err := mA.Acquire(ctx, op, lease.AcquireRequest{EnvironmentID: "here", Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = h.Release(ctx, lease.ReleaseOptions{}) }()
	_, err = mB.Open(ctx, op, h.ID())
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), h.ID()) || !strings.Contains(err.Error(), "local") {
		t.Errorf("another manager's Open of a local lease: %v; want unsupported, naming the lease and driver", err)
	}
	o, err := mA.Open(ctx, op, h.ID())
	if err != nil || o.SandboxID() != h.SandboxID() {
		t.Errorf("the holder's own Open: %v", err)
	}
}

package controller_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// leaseOperator acquires and releases the test leases (and attaches).
var leaseOperator = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

// leasePolicy allows ActionLease to local operators and to principals
// with a grant for the resource's company; it denies everything else.
var leasePolicy = authz.AuthorizerFunc(func(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
	if p.Role == authz.RoleLocalOperator {
		return nil
	}
	return companyPolicy(ctx, p, a, r)
})

// fakeSpec is a well-formed runner spec; the fake runs internal/runner
// in-process and never executes the binary.
var fakeSpec = drivers.RunnerSpec{Binary: "/opt/berth/berth-runner", SHA256: strings.Repeat("cd", 32), Arch: runtime.GOARCH}

// leaseWorld is the fake driver, a lease manager whose task hook is the
// controller of s, and one saved environment.
type leaseWorld struct {
	s  *server
	fk *fake.Driver
	m  *lease.Manager
	// leases is the lease store, when the world's constructor sets it
	// (newPoolReplicas).
	leases lease.Store
}

// newLeaseWorld composes the world; the manager names its leases
// lease-1, lease-2, ... (so that server.ticket mints for the first).
func newLeaseWorld(t *testing.T, cleanupBudget time.Duration) *leaseWorld {
	t.Helper()
	return newLeaseWorldWith(t, cleanupBudget, serverOptions{})
}

// newLeaseWorldWith is newLeaseWorld with the controller's options o
// (Authorizer is leasePolicy, Leases the world's lease store).
func newLeaseWorldWith(t *testing.T, cleanupBudget time.Duration, o serverOptions) *leaseWorld {
	t.Helper()
	return composeLeaseWorld(t, o, nil, func(lo *lease.Options) {
		leasehook.Tune(lo, func(k *leasetune.Knobs) { k.CleanupBudget = cleanupBudget })
	})
}

// composeLeaseWorld is newLeaseWorldWith whose environment env-1 and lease
// options the test changes (mod and modLease, if not nil) before they are
// used.
func composeLeaseWorld(t *testing.T, o serverOptions, mod func(*environment.Environment), modLease func(*lease.Options)) *leaseWorld {
	t.Helper()
	leases := lease.NewMemoryStore()
	o.Authorizer, o.Leases = leasePolicy, leases
	s := newServer(t, o)
	fk := fake.New(nil)
	cfg, err := fk.Schema().Normalize(map[string]any{"region": "local-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	envs := envhook.NewMemoryStore().(environment.Store)
	env := &environment.Environment{ID: "env-1", Name: "scratch", Driver: "fake", Status: environment.StatusActive, Config: cfg, Revision: 1}
	if mod != nil {
		mod(env)
	}
	if err := envs.CreateEnvironment(ctx, env, false); err != nil {
		t.Fatal(err)
	}
	reg := drivers.NewRegistry(fk)
	asg := envhook.NewAssignments(envhook.NewMemoryBindingStore().(environment.BindingStore), envs, reg, &envhook.Options{TestMode: true, Authorizer: leasePolicy}).(*environment.Assignments)
	var n atomic.Int64
	lo := &lease.Options{InstanceID: "test"}
	leasehook.Tune(lo, func(k *leasetune.Knobs) {
		k.NewID = func() string { return "lease-" + string(rune('0'+n.Add(1))) }
	})
	if modLease != nil {
		modLease(lo)
	}
	mgr, _ := leasehook.New(leasehook.Sources{Store: leases, Drivers: reg, Assignments: asg, Tasks: s.tasks, Options: lo,
		SweepEnvironments: func(ctx context.Context) ([]*environment.Environment, error) {
			return envs.ListEnvironments(ctx, environment.ListFilter{})
		}})
	m := mgr.(*lease.Manager)
	t.Cleanup(func() { leasehook.Close(m) })
	return &leaseWorld{s: s, fk: fk, m: m}
}

func (w *leaseWorld) acquire(t *testing.T) *lease.Handle {
	t.Helper()
	h, err := w.m.Acquire(context.Background(), leaseOperator, lease.AcquireRequest{Company: "co-1", EnvironmentID: "env-1", Run: "run-1", Runner: drivers.RunnerSetOf(fakeSpec)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// killTagged kills the processes of task when the test ends (the fake's
// tasks are processes of this host, which destroying a fake sandbox does
// not end).
func killTagged(t *testing.T, task string) {
	t.Cleanup(func() {
		for _, pid := range tagged(task) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// PRP-6, issue 17: releasing a lease stops every runner task first and
// verifies the stop; the receipt records the runner's proof before the
// sandbox's, and nothing of the task is left.
func TestReleaseStopsAndVerifiesTheRunnersTasksFirst(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := w.acquire(t)
	var stages []controller.AttachStage
	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{Progress: func(s controller.AttachStage) { stages = append(stages, s) }})
	if err != nil {
		t.Fatal(err)
	}
	want := []controller.AttachStage{controller.AttachInstalling, controller.AttachLaunching, controller.AttachConnecting, controller.AttachConnected}
	if strings.Join(toStrings(stages), ",") != strings.Join(toStrings(want), ",") {
		t.Errorf("progress = %v, want %v", stages, want)
	}
	if att.Lease() != h.ID() || att.Run() != "run-1" || att.Scope() != prp.ScopeTask || att.Hello().Platform.OS == "" {
		t.Errorf("attachment = %+v, want lease %s, run run-1, a task scope and the hello's platform", att, h.ID())
	}
	if _, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{}); err == nil {
		t.Error("a second Attach to the same lease succeeded")
	}
	killTagged(t, "t-release")
	if _, err := w.s.c.StartTask(ctx, leaseOperator, att.Session(), "c1", prp.TaskStart{TaskID: "t-release", Argv: []string{"sh", "-c", "sleep 300 & sleep 300"}}); err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, w.s, att.Session(), "t-release", controller.TaskRunning)

	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("lease %s %s, want released confirmed", l.Status, l.Cleanup)
	}
	if !strings.HasPrefix(l.CleanupEvidence, "runner (runner_attested): 1 task(s) of 1 runner session(s) stopped, attested by the runner") {
		t.Errorf("evidence %q, want the runner's proof first", l.CleanupEvidence)
	}
	if l.CleanupEvidenceKind != drivers.EvidenceProvider {
		t.Errorf("evidence kind %q, want provider (the sandbox's destroy), never the runner's attestation", l.CleanupEvidenceKind)
	}
	if left := tagged("t-release"); len(left) > 0 {
		t.Errorf("processes of t-release left after the release: %v", left)
	}
	for deadline := time.Now().Add(30 * time.Second); w.s.c.Connected(att.Session()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runner is still connected 30 s after the lease ended")
		}
	}
}

func toStrings(ss []controller.AttachStage) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// waitTaskState waits until task of session reads state.
func waitTaskState(t *testing.T, s *server, session, task string, state controller.TaskState) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ts, err := s.c.Tasks(context.Background(), leaseOperator, session)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range ts {
			if st.TaskID == task && st.State == state {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("task %s never read %s", task, state)
}

// PRP-6, CONVENTIONS 20: an incomplete proof leaves the lease
// pending_cleanup with the reason, never confirmed, and the sandbox as it
// is; the sweep asks the runner again and, once it proves the stop,
// confirms with the runner's proof.
func TestAnIncompleteProofLeavesTheLeasePendingAndTheSweepRetries(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := w.acquire(t)
	if h.ID() != "lease-1" {
		t.Fatalf("lease id %s, want lease-1", h.ID())
	}
	var complete atomic.Bool
	// The holder's ticket: the release stops the tasks of its session.
	tk, _, err := w.s.c.MintTicket(ctx, leaseOperator, controller.TicketRequest{Lease: h.ID(), Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, Holder: h})
	if err != nil {
		t.Fatal(err)
	}
	rawRunnerTicket(t, w.s, tk.String(), func() prp.StopProof {
		if complete.Load() {
			return prp.StopProof{Methods: []string{prp.MethodGroup, prp.MethodProcTag}, Survivors: []int{}, Complete: true, VerifiedAt: time.Now().UTC()}
		}
		return prp.StopProof{Methods: []string{prp.MethodGroup}, Failed: []string{prp.MethodProcTag + ": /proc is not readable"}, Survivors: []int{}, VerifiedAt: time.Now().UTC()}
	})
	session := waitSession(t, w.s)
	if _, err := w.s.c.StartTask(ctx, leaseOperator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, w.s, session, "c1")

	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if !errors.Is(err, lease.ErrCleanupPending) || !errors.Is(err, controller.ErrProofIncomplete) {
		t.Fatalf("Release = %v, want ErrCleanupPending wrapping ErrProofIncomplete", err)
	}
	if l.Status != lease.StatusPendingCleanup || l.Cleanup != "pending" || !strings.Contains(l.FailureReason, "task t1") || !strings.Contains(l.FailureReason, "/proc is not readable") {
		t.Errorf("lease %s/%s reason %q, want pending_cleanup naming task t1 and the check that could not run", l.Status, l.Cleanup, l.FailureReason)
	}
	if st, ok := fakectl.Of(w.fk).State(h.SandboxID()); !ok || st != drivers.StateRunning {
		t.Errorf("sandbox state %v (exists %t); want it left running while the stop is unproven", st, ok)
	}

	complete.Store(true)
	rep, err := w.m.Sweep(ctx, leaseOperator)
	if err != nil || rep.CleanedUp != 1 {
		t.Fatalf("Sweep = %+v, %v; want the pending cleanup done", rep, err)
	}
	got, err := w.m.Get(ctx, leaseOperator, h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != lease.StatusReleased || got.Cleanup != "confirmed" || !strings.HasPrefix(got.CleanupEvidence, "runner (runner_attested): 1 task(s)") {
		t.Errorf("after the sweep: %s/%s evidence %q, want released, confirmed with the runner's proof", got.Status, got.Cleanup, got.CleanupEvidence)
	}
}

// PRP-6: a runner that cannot be reached leaves the release pending with
// the reason; the sweep asks again and, still without an answer, destroys
// the sandbox, whose confirmed destroy is the proof; the receipt says so.
func TestAnUnreachableRunnerLeavesTheLeasePendingAndTheSweepDestroys(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := w.acquire(t)
	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	killTagged(t, "t-unreach")
	if _, err := w.s.c.StartTask(ctx, leaseOperator, att.Session(), "c1", prp.TaskStart{TaskID: "t-unreach", Argv: []string{"sleep", "300"}}); err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, w.s, att.Session(), "t-unreach", controller.TaskRunning)
	w.s.tasks.LeaseEnded(h.ID()) // the ingress closes: the runner cannot come back

	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if !errors.Is(err, lease.ErrCleanupPending) || !strings.Contains(err.Error(), "not answered") {
		t.Fatalf("Release = %v, want ErrCleanupPending saying the stop was not answered", err)
	}
	if l.Status != lease.StatusPendingCleanup || !strings.Contains(l.FailureReason, "task t-unreach") {
		t.Errorf("lease %s reason %q, want pending_cleanup naming task t-unreach", l.Status, l.FailureReason)
	}
	rep, err := w.m.Sweep(ctx, leaseOperator)
	if err != nil || rep.CleanedUp != 1 {
		t.Fatalf("Sweep = %+v, %v; want the pending cleanup done by destroying the sandbox", rep, err)
	}
	got, err := w.m.Get(ctx, leaseOperator, h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != lease.StatusReleased || got.Cleanup != "confirmed" ||
		!strings.Contains(got.CleanupEvidence, "not proven stopped") || !strings.Contains(got.CleanupEvidence, "the sandbox's own proof instead") {
		t.Errorf("after the sweep: %s/%s evidence %q, want confirmed by the sandbox's destroy, saying the runner could not prove the stop", got.Status, got.Cleanup, got.CleanupEvidence)
	}
	if st, ok := fakectl.Of(w.fk).State(h.SandboxID()); ok && st != drivers.StateDestroyed {
		t.Errorf("the sandbox is %s after the sweep, want destroyed", st)
	}
}

// PRP-6, issue 22 item 3: a perfect stop proof from the runner (here a
// task impersonating it could have sent it) is only attested: while the
// provider does not confirm the sandbox's destroy, the lease stays
// pending_cleanup and names no evidence; the sweep ends it on the
// provider's confirmation, and the receipt says which evidence is which.
func TestARunnerAttestedProofAloneNeverEndsALease(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := w.acquire(t)
	rawRunnerFunc(t, w.s, func() prp.StopProof {
		return prp.StopProof{Methods: []string{prp.MethodGroup, prp.MethodProcTag}, Survivors: []int{}, Complete: true, VerifiedAt: time.Now().UTC()}
	})
	session := waitSession(t, w.s)
	if _, err := w.s.c.StartTask(ctx, leaseOperator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, w.s, session, "c1")
	proofs, err := w.s.c.StopAndVerify(ctx, leaseOperator, session, time.Second)
	if err != nil || len(proofs) != 1 {
		t.Fatalf("StopAndVerify = %+v, %v; want one proof", proofs, err)
	}
	if proofs[0].Evidence != drivers.EvidenceRunnerAttested {
		t.Errorf("proof evidence %q, want runner_attested, which ends no lease", proofs[0].Evidence)
	}

	fakectl.Of(w.fk).FakeStop(h.SandboxID(), "unconfirmed")
	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if !errors.Is(err, lease.ErrCleanupPending) {
		t.Fatalf("Release = %v, want ErrCleanupPending: the runner's word alone is no proof", err)
	}
	if l.Status != lease.StatusPendingCleanup || l.Cleanup != "pending" || l.CleanupEvidenceKind != drivers.EvidenceNone {
		t.Errorf("lease %s/%s evidence %q, want pending_cleanup with no evidence", l.Status, l.Cleanup, l.CleanupEvidenceKind)
	}
	if st, ok := fakectl.Of(w.fk).State(h.SandboxID()); !ok || st != drivers.StateRunning {
		t.Errorf("sandbox state %v (exists %t); want it still running", st, ok)
	}

	fakectl.Of(w.fk).ClearFaults()
	if rep, err := w.m.Sweep(ctx, leaseOperator); err != nil || rep.CleanedUp != 1 {
		t.Fatalf("Sweep = %+v, %v; want the pending cleanup done", rep, err)
	}
	got, err := w.m.Get(ctx, leaseOperator, h.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Cleanup != "confirmed" || got.CleanupEvidenceKind != drivers.EvidenceProvider ||
		!strings.Contains(got.CleanupEvidence, "runner_attested") {
		t.Errorf("after the sweep: %s evidence %s %q, want confirmed by the provider, the runner's part named runner_attested",
			got.Cleanup, got.CleanupEvidenceKind, got.CleanupEvidence)
	}
}

// AUTH-1: Attach authorizes before it installs anything.
func TestAttachIsAuthorized(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	h := w.acquire(t)
	calls := fakectl.Of(w.fk).TotalCalls()
	_, err := w.s.c.Attach(context.Background(), stranger, h, controller.AttachRequest{})
	wantHidden(t, "Attach by a stranger", err, h.ID())
	if n := fakectl.Of(w.fk).TotalCalls() - calls; n != 0 {
		t.Errorf("a refused Attach made %d provider calls", n)
	}
	if _, err := h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}

// PRP-5: Disconnect drops the runner's connection, not the runner: it
// reconnects and the task's output is complete.
func TestDisconnectDropsTheConnectionNotTheRunner(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := w.acquire(t)
	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	killTagged(t, "t-cut")
	if _, err := w.s.c.StartTask(ctx, leaseOperator, att.Session(), "c1", prp.TaskStart{TaskID: "t-cut",
		Argv: []string{"sh", "-c", "i=0; while [ $i -lt 40 ]; do echo line-$i; i=$((i+1)); sleep 0.05; done"}}); err != nil {
		t.Fatal(err)
	}
	waitTaskState(t, w.s, att.Session(), "t-cut", controller.TaskRunning)
	if ok, err := w.s.c.Disconnect(ctx, leaseOperator, att.Session()); err != nil || !ok {
		t.Fatalf("Disconnect = %t, %v", ok, err)
	}
	_, err = w.s.c.Disconnect(ctx, stranger, att.Session())
	wantHidden(t, "Disconnect by a stranger", err, att.Session())
	res := wait(t, w.s, att.Session(), "c1")
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result %+v, want exit 0", res)
	}
	out, err := w.s.c.Output(ctx, leaseOperator, att.Session(), "t-cut", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 40 {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if string(out) != want.String() {
		t.Errorf("output after the cut:\n%q\nwant\n%q", out, want.String())
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}

// issue 29: a holder ticket (whose session's tasks the lease's release
// stops) is refused for a lease acquired without a runner, as Attach is:
// the lease manager asks for the stop of such a lease's tasks never
// (leasehook.TaskStopper). A ticket that is not the holder's is minted.
func TestAHolderTicketNeedsALeaseAcquiredForARunner(t *testing.T) {
	t.Parallel()
	w := newLeaseWorld(t, time.Minute)
	ctx := context.Background()
	h, err := w.m.Acquire(ctx, leaseOperator, lease.AcquireRequest{Company: "co-1", EnvironmentID: "env-1", Run: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = w.s.c.MintTicket(ctx, leaseOperator, controller.TicketRequest{Lease: h.ID(), Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, Holder: h})
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), h.ID()) || !strings.Contains(err.Error(), "without a runner") {
		t.Errorf("holder ticket for a lease without a runner: %v, want ErrUnsupported naming the lease and the missing runner", err)
	}
	if _, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{}); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("Attach to a lease without a runner: %v, want ErrUnsupported", err)
	}
	if _, _, err := w.s.c.MintTicket(ctx, leaseOperator, controller.TicketRequest{Lease: h.ID(), Run: "run-1", Company: "co-1", Scope: prp.ScopeTask}); err != nil {
		t.Errorf("a ticket that is not the holder's: %v", err)
	}
	if l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil || l.Status != lease.StatusReleased {
		t.Fatalf("Release = %v, %v", l, err)
	}
}

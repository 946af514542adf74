package berth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/images/resolve"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/store"
)

// TestSystemWiring: New composes the catalog with the lease manager and the
// assignments, so a delete shows their references (CFG-7), is refused while
// a reusable lease lives, and clears bindings once allowed (ASG-5).
func TestSystemWiring(t *testing.T) {
	ctx := context.Background()
	fk := fake.New(nil)
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

	v, err := sys.Catalog().Create(ctx, op, environment.CreateRequest{
		Name: "sbx", Driver: fk.Name(), Config: map[string]any{"image": fk.DefaultImageIdentity().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Assignments().Set(ctx, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws_1", Company: "acme"}, EnvironmentID: v.ID}, 0); err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, op, lease.AcquireRequest{
		Scope: &authz.Scope{Company: "acme", Workspace: "ws_1"}, Required: drivers.NewSet(drivers.CapExec),
		Run: "r1", Policy: lease.ReuseByEnvironment,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Leases().Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: lease.Stop}); err != nil {
		t.Fatal(err)
	}

	br, err := sys.Catalog().BlastRadius(ctx, op, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(br.Assignments) != 1 || len(br.ReusableLeases) != 1 || br.Deletable() {
		t.Fatalf("blast radius = %+v; want one binding, one reusable lease, not deletable", br)
	}
	if _, err := sys.Catalog().Delete(ctx, op, v.ID, br.Revision); !errors.Is(err, errcode.ErrConflict) {
		t.Fatalf("delete with a reusable lease: %v, want ErrConflict", err)
	}

	// Destroying the sandbox ends the reusable lease; the delete then goes
	// through and takes the binding with it.
	if _, err := sys.Leases().Release(ctx, op, h.ID(), lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	br, err = sys.Catalog().BlastRadius(ctx, op, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !br.Deletable() {
		t.Fatalf("blast radius after destroy = %+v; want deletable", br)
	}
	if _, err := sys.Catalog().Delete(ctx, op, v.ID, br.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = sys.Assignments().Resolve(ctx, op, authz.Scope{Company: "acme", Workspace: "ws_1"}, 0)
	if !errors.Is(err, errcode.ErrNotFound) {
		t.Fatalf("resolve after delete: %v, want no binding (ErrNotFound)", err)
	}
}

// closingFake is the fake driver with an io.Closer, as a driver that holds
// engine clients has.
type closingFake struct {
	*fake.Driver
	closed int
}

func (d *closingFake) Close() error { d.closed++; return nil }

// System.Close closes the drivers that implement io.Closer (docker's engine
// clients), not only the store.
func TestSystemCloseClosesDrivers(t *testing.T) {
	d := &closingFake{Driver: fake.New(nil)}
	sys, err := berth.New(context.Background(), &berth.Options{Drivers: []drivers.Driver{d}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Close(); err != nil {
		t.Fatal(err)
	}
	if d.closed != 1 {
		t.Errorf("driver closed %d times by System.Close, want 1", d.closed)
	}
}

// TestSystemComposesEveryService (issue 12 item 7): berth.New hands out a
// Prober and an image Resolver with defaults, wired to the same store and
// drivers: a probe records a qualification the store then holds, and the
// resolver pins a tag from a registry on loopback.
func TestSystemComposesEveryService(t *testing.T) {
	ctx := context.Background()
	fk := fake.New(nil)
	st := store.Memory()
	sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	v, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{
		Name: "sbx", Driver: fk.Name(), Config: map[string]any{"image": fk.DefaultImageIdentity().String()},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sys.Prober().Probe(ctx, admin, v.ID, probe.Request{Company: "acme"})
	if err != nil || !res.OK || !res.PlatformQualificationRecorded {
		t.Fatalf("probe through the System: %+v, %v", res, err)
	}
	if _, err := st.Qualifications.GetQualification(ctx, "acme", v.ID); err != nil {
		t.Errorf("the System's store lacks the probe's record: %v", err)
	}

	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	id, err := resolve.New(nil).Pin(ctx, images.MustParseReference(img.TagRef), v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil || id.String() != img.Ref {
		t.Errorf("Pin(%s) = %s, %v; want %s", img.TagRef, id, err, img.Ref)
	}
}

// TestRunHealthChecks (CAP-3): the System's background round measures every
// provider endpoint in use and stores the result where every reader sees
// it; it returns when its context ends.
func TestRunHealthChecks(t *testing.T) {
	ctx := context.Background()
	fk := fake.New(nil)
	fakectl.Of(fk).Inject(fakectl.Fault{Op: "health", Err: errors.New("api answers 503")})
	st := store.Memory()
	sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	v, err := sys.Catalog().Create(ctx, admin, environment.CreateRequest{Name: "sbx", Driver: fk.Name()})
	if err != nil {
		t.Fatal(err)
	}
	// A principal who may not probe is refused at once; nothing is measured.
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	if err := sys.RunHealthChecks(ctx, agent, time.Hour); !errors.Is(err, errcode.ErrDenied) {
		t.Fatalf("RunHealthChecks for an agent: %v, want errcode.ErrDenied", err)
	}
	if n := fakectl.Of(fk).Calls("health"); n != 0 {
		t.Fatalf("a refused round measured %d times", n)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sys.RunHealthChecks(rctx, admin, time.Hour) }()
	for {
		hs, err := st.Health.ListProviderHealth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("RunHealthChecks returned %v, want context.Canceled", err)
	}
	got, err := sys.Catalog().Get(ctx, admin, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Health == nil || got.Health.Status != environment.HealthUnavailable || got.Unavailable == "" {
		t.Errorf("after a round: health %+v, unavailable %q", got.Health, got.Unavailable)
	}
}

// TestSystemRunners: berth.New composes the runner protocol's controller
// on the System's store. A ticket minted by one System on a SQLite file is
// exchanged once through another System's controller on the same file (the
// ticket store is shared, as replicas on PostgreSQL share it), and a replay
// is refused; an agent of another company may not mint.
func TestSystemRunners(t *testing.T) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(t.TempDir(), "berth.db")
	var stores []store.Stores
	open := func() *berth.System {
		st := openStores(t, url)
		stores = append(stores, st)
		sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fake.New(nil)}, TestMode: true, MemorySecrets: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sys.Close() })
		if berth.Runners(sys) == nil {
			t.Fatal("the System has no runner controller")
		}
		return sys
	}
	a, b := open(), open()
	op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	// Tickets are minted for leases recorded active in the store, bound
	// to the recorded company (issue 22 item 1).
	if _, _, err := berth.Runners(a).MintTicket(ctx, op, controller.TicketRequest{Lease: "lse_1", Run: "r1", Scope: prp.ScopeTask}); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("a ticket for a lease the store does not hold: %v, want ErrNotFound", err)
	}
	leasetest.RecordActive(t, stores[0].Leases, "lse_1", "acme")
	tk, _, err := berth.Runners(a).MintTicket(ctx, op, controller.TicketRequest{Lease: "lse_1", Run: "r1", Company: "acme", Scope: prp.ScopeTask})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(berth.Runners(b))
	defer srv.Close()
	exchange := func() int {
		body, _ := json.Marshal(prpwire.ExchangeRequest{Ticket: tk.String(), Lease: "lse_1"})
		resp, err := http.Post(srv.URL+"/"+prpwire.ExchangePath, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := exchange(); got != http.StatusOK {
		t.Fatalf("exchange of a ticket minted by another System on the same store: %d", got)
	}
	if got := exchange(); got != http.StatusUnauthorized {
		t.Errorf("replayed ticket: %d, want 401", got)
	}
	stranger := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"globex"}}
	if _, _, err := berth.Runners(a).MintTicket(ctx, stranger, controller.TicketRequest{Lease: "lse_1", Run: "r1", Company: "globex", Scope: prp.ScopeTask}); !errors.Is(err, errcode.ErrNotFound) || strings.Contains(err.Error(), "acme") {
		t.Errorf("an agent of another company minting a ticket: %v, want ErrNotFound naming no company", err)
	}
}

// PRP-6, issue 17: the System's lease manager stops a runner's tasks
// through the System's controller before it releases the sandbox, and
// RunnerSpec reads Options.RunnerBinary.
func TestSystemReleasesRunnerLeasesThroughTheController(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := testenv.FakeRunnerBinary(t) // the fake never executes it
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{local.New(nil), fake.New(nil)}, TestMode: true, RunnerBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	set, err := sys.RunnerSet()
	if err != nil || len(set.Binaries) != 1 || set.Binaries[runtime.GOARCH].Binary != bin || len(set.Binaries[runtime.GOARCH].SHA256) != 64 {
		t.Fatalf("RunnerSet = %+v, %v; want the binary for %s", set, err, runtime.GOARCH)
	}
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "f", Driver: "fake", Config: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Runner: set})
	if err != nil {
		t.Fatal(err)
	}
	att, err := berth.Runners(sys).Attach(ctx, operator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := att.Start(ctx, operator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "sys-sleep", Argv: []string{"sleep", "300"}}}); err != nil {
		t.Fatal(err)
	}
	for !sysTaskEvent(ctx, t, att, prp.EventStarted, "sys-sleep") {
		time.Sleep(10 * time.Millisecond)
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.CleanupEvidence, "runner (runner_attested): 1 task(s)") {
		t.Errorf("evidence %q, want the runner's proof", l.CleanupEvidence)
	}
	if !sysTaskEvent(ctx, t, att, prp.EventExit, "sys-sleep") {
		t.Errorf("no exit event of the task after the release; want the task exited")
	}

	empty, err := berth.New(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	// Without a binary named, the set builds the runner from berth's
	// source when a lease needs it (runnerbin; issue 49).
	if set, err := empty.RunnerSet(); err != nil || set == nil || set.Build == nil || len(set.Binaries) != 0 {
		t.Errorf("RunnerSet without a binary = %+v, %v; want a set that builds the runner", set, err)
	}
}

// sysTaskEvent reports whether att's session stored an event of kind for
// task.
func sysTaskEvent(ctx context.Context, t *testing.T, att *controller.Attachment, kind prp.EventKind, task string) bool {
	t.Helper()
	var after uint64
	for {
		evs, err := att.Events(ctx, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return false
		}
		for _, e := range evs {
			if e.Event.Kind == kind && e.Event.TaskID == task {
				return true
			}
			after = e.Seq
		}
	}
}

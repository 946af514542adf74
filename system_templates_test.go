package berth_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/templates"
)

var (
	tplOps   = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	tplBoard = authz.Principal{ID: "board-1", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	tplAgent = authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
)

type tplWorld struct {
	sys *berth.System
	fk  *fake.Driver
	env *environment.View
	img string
}

func newTplWorld(t *testing.T, opts *berth.Options, fk *fake.Driver) *tplWorld {
	t.Helper()
	if fk == nil {
		fk = fake.New(nil)
	}
	o := berth.Options{Drivers: []drivers.Driver{fk}, TestMode: true}
	if opts != nil {
		o = *opts
	}
	sys, err := berth.New(context.Background(), &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Close() })
	img := fk.AddImage("registry.fake.test/team/app:v1").String()
	return &tplWorld{sys: sys, fk: fk, img: img}
}

func (w *tplWorld) create(t *testing.T, name string) *environment.View {
	t.Helper()
	v, err := w.sys.Catalog().Create(context.Background(), tplOps, environment.CreateRequest{
		Name: name, Driver: w.fk.Name(), Config: map[string]any{"image": w.img, "region": "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	w.env = v
	return v
}

func (w *tplWorld) view(t *testing.T) *environment.View {
	t.Helper()
	v, err := w.sys.Catalog().Get(context.Background(), tplOps, w.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (w *tplWorld) acquire(t *testing.T, policy lease.Policy) *lease.Handle {
	t.Helper()
	h, err := w.sys.Leases().Acquire(context.Background(), tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Policy: policy})
	if err != nil {
		t.Fatalf("acquire (%s): %v", policy, err)
	}
	return h
}

func (w *tplWorld) release(t *testing.T, h *lease.Handle, d lease.Disposition) {
	t.Helper()
	if _, err := w.sys.Leases().Release(context.Background(), tplOps, h.ID(), lease.ReleaseOptions{Disposition: d}); err != nil {
		t.Fatalf("release %s: %v", h.ID(), err)
	}
}

func (w *tplWorld) identity(t *testing.T, h *lease.Handle) string {
	t.Helper()
	id, err := leasehook.ImageIdentity(h, context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

func (w *tplWorld) qualified(t *testing.T) bool {
	t.Helper()
	v, err := w.sys.Prober().Qualification(context.Background(), tplOps, w.env.ID, "acme")
	if err != nil {
		t.Fatal(err)
	}
	return v.Qualified
}

func (w *tplWorld) probe(t *testing.T) {
	t.Helper()
	res, err := w.sys.Prober().Probe(context.Background(), tplOps, w.env.ID, probe.Request{Company: "acme"})
	if err != nil || !res.PlatformQualificationRecorded {
		t.Fatalf("probe: %v; recorded %v: %s", err, res != nil && res.PlatformQualificationRecorded, summary(res))
	}
}

func summary(r *probe.Result) string {
	if r == nil {
		return ""
	}
	return r.Summary
}

// Issue 27 (IMG-3, IMG-4, IMG-6, IMG-8, QUAL-3, LEASE-4) on the fake: a
// captured template, once promoted, is what new leases start from and
// report; it makes the qualification stale and replaces a reusable lease
// with template_changed; a rollback is a new promote in the history;
// revoke clears the pointer without falling back, and its deletion waits
// for the live leases that use it, then the sweep deletes it with the
// provider's receipt.
func TestTemplateFlowOnTheFake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newTplWorld(t, nil, nil)
	w.create(t, "tpl-flow")
	svc := w.sys.Templates()
	if v := w.view(t); v.ActiveTemplate != nil {
		t.Fatalf("a new environment shows active template %+v", v.ActiveTemplate)
	}
	w.probe(t)
	if !w.qualified(t) {
		t.Fatal("not qualified after the probe")
	}
	reused := w.acquire(t, lease.ReuseByEnvironment)
	w.release(t, reused, lease.Stop)

	src := w.acquire(t, lease.Ephemeral)
	tpl1, err := svc.Capture(ctx, tplOps, src.ID(), "with tools")
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if tpl1.State != templates.StateCaptured || !strings.HasPrefix(tpl1.Identity, "snapshot:fake/") || tpl1.Environment != w.env.ID {
		t.Fatalf("captured %+v", tpl1)
	}
	w.release(t, src, lease.Destroy)
	rev := w.view(t).Revision

	tpl1, err = svc.Promote(ctx, tplOps, tpl1.ID)
	if err != nil || tpl1.State != templates.StateActive {
		t.Fatalf("Promote: %+v, %v", tpl1, err)
	}
	v := w.view(t)
	if v.Revision != rev+1 || v.ActiveTemplate == nil || v.ActiveTemplate.ID != tpl1.ID ||
		v.ActiveTemplate.Identity != tpl1.Identity || v.ActiveTemplate.Drift != environment.DriftRelinked {
		t.Fatalf("after promote: revision %d (was %d), pointer %+v", v.Revision, rev, v.ActiveTemplate)
	}
	if w.qualified(t) {
		t.Error("a qualification recorded before the promote is still valid after it (QUAL-3)")
	}

	h := w.acquire(t, lease.Ephemeral)
	if got := w.identity(t, h); got != tpl1.Identity {
		t.Errorf("a new lease reports %s, want the template's %s (IMG-8)", got, tpl1.Identity)
	}
	if l := h.Lease(); l.Labels["berth.template-id"] != tpl1.ID {
		t.Errorf("lease labels %v, want %s=%s", l.Labels, "berth.template-id", tpl1.ID)
	}
	if fp, err := leasehook.Fingerprint(w.fk, &w.view(t).Environment); err != nil || fp != h.Lease().Fingerprint {
		t.Errorf("EnvironmentFingerprint = %s, %v; the lease records %s", fp, err, h.Lease().Fingerprint)
	}
	r2 := w.acquire(t, lease.ReuseByEnvironment)
	if l := r2.Lease(); l.Replaces != reused.ID() || l.ReplaceReason != "template_changed" {
		t.Errorf("reusable lease: replaces %q reason %q, want %s and %s (LEASE-4)", l.Replaces, l.ReplaceReason, reused.ID(), "template_changed")
	}
	w.release(t, r2, lease.Destroy)
	w.probe(t)
	if !w.qualified(t) {
		t.Error("a probe after the promote did not qualify the template")
	}

	tpl2, err := svc.Capture(ctx, tplOps, h.ID(), "more tools")
	if err != nil {
		t.Fatal(err)
	}
	if tpl2.SourceFingerprint != tpl1.SourceFingerprint {
		t.Errorf("a capture of a lease started from a template has source %s, want the template's %s", tpl2.SourceFingerprint, tpl1.SourceFingerprint)
	}
	if _, err := svc.Promote(ctx, tplOps, tpl2.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := svc.Get(ctx, tplOps, tpl1.ID); got.State != templates.StateSuperseded {
		t.Errorf("the previous template is %s, want superseded", got.State)
	}
	if _, err := svc.Rollback(ctx, tplOps, tpl2.ID); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("rollback to the active template: %v, want ErrConflict", err)
	}
	if tpl1, err = svc.Rollback(ctx, tplOps, tpl1.ID); err != nil || tpl1.State != templates.StateActive {
		t.Fatalf("Rollback: %+v, %v", tpl1, err)
	}
	hist, err := svc.History(ctx, tplOps, w.env.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range hist {
		got = append(got, string(e.Action)+":"+e.From+">"+e.To)
	}
	want := []string{"promote:>" + tpl1.ID, "promote:" + tpl1.ID + ">" + tpl2.ID, "rollback:" + tpl2.ID + ">" + tpl1.ID}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("history %v, want %v", got, want)
	}

	// Revoke with deletion while h (started from tpl1) is live: the
	// pointer is cleared, the deletion waits.
	tpl1, err = svc.Revoke(ctx, tplOps, tpl1.ID, templates.RevokeOptions{Delete: true, Reason: "leaks a token"})
	if err != nil {
		t.Fatal(err)
	}
	if tpl1.State != templates.StateRevoked || !tpl1.DeleteWanted || !strings.Contains(tpl1.DeleteNote, h.ID()) || tpl1.DeleteReceipt != nil {
		t.Fatalf("revoked while in use: %+v", tpl1)
	}
	if v := w.view(t); v.ActiveTemplate != nil {
		t.Errorf("after revoke the pointer is %+v, want none (no fall back)", v.ActiveTemplate)
	}
	plain := w.acquire(t, lease.Ephemeral)
	if got := w.identity(t, plain); got != w.img {
		t.Errorf("after revoke a new lease reports %s, want the configured %s", got, w.img)
	}
	w.release(t, plain, lease.Destroy)
	if n, err := svc.Sweep(ctx, tplOps); err != nil || n != 0 {
		t.Errorf("sweep while a lease uses it: %d, %v; want 0", n, err)
	}
	w.release(t, h, lease.Destroy)
	rep, err := w.sys.Sweep(ctx, tplOps)
	if err != nil || rep.TemplatesDeleted != 1 {
		t.Fatalf("System.Sweep after the release: %+v, %v; want one template deleted", rep, err)
	}
	tpl1, _ = svc.Get(ctx, tplOps, tpl1.ID)
	if tpl1.State != templates.StateDeleted || tpl1.DeleteWanted || tpl1.DeleteReceipt == nil || !tpl1.DeleteReceipt.Confirmed ||
		tpl1.DeleteReceipt.EvidenceKind != drivers.EvidenceProvider {
		t.Errorf("after the sweep: %+v", tpl1)
	}
	if _, err := svc.Promote(ctx, tplOps, tpl1.ID); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("promote of a deleted template: %v, want ErrConflict", err)
	}
}

// Issue 27: operators mutate, board members read without provider
// internals, agents see nothing.
func TestTemplateAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newTplWorld(t, nil, nil)
	w.create(t, "tpl-auth")
	h := w.acquire(t, lease.Ephemeral)
	defer w.release(t, h, lease.Destroy)
	svc := w.sys.Templates()
	if _, err := svc.Capture(ctx, tplBoard, h.ID(), "x"); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("board member capture: %v, want ErrDenied", err)
	}
	if _, err := svc.Capture(ctx, tplAgent, h.ID(), "x"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("agent capture: %v, want ErrNotFound", err)
	}
	tpl, err := svc.Capture(ctx, tplOps, h.ID(), "x")
	if err != nil {
		t.Fatal(err)
	}
	list, err := svc.List(ctx, tplBoard, w.env.ID)
	if err != nil || len(list) != 1 || !list[0].Redacted || list[0].Identity != "" || list[0].SourceFingerprint != "" || list[0].Lease != "" {
		t.Errorf("board member list: %+v, %v; want one redacted template", list, err)
	}
	if _, err := svc.Promote(ctx, tplBoard, tpl.ID); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("board member promote: %v, want ErrDenied", err)
	}
	for name, f := range map[string]func() error{
		"get":     func() error { _, err := svc.Get(ctx, tplAgent, tpl.ID); return err },
		"list":    func() error { _, err := svc.List(ctx, tplAgent, w.env.ID); return err },
		"history": func() error { _, err := svc.History(ctx, tplAgent, w.env.ID); return err },
		"promote": func() error { _, err := svc.Promote(ctx, tplAgent, tpl.ID); return err },
		"revoke":  func() error { _, err := svc.Revoke(ctx, tplAgent, tpl.ID, templates.RevokeOptions{}); return err },
	} {
		if err := f(); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("agent %s: %v, want ErrNotFound", name, err)
		}
	}
	if _, err := svc.Sweep(ctx, tplBoard); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("board member sweep: %v, want ErrDenied", err)
	}
	if got, _ := svc.Get(ctx, tplOps, tpl.ID); got.State != templates.StateCaptured {
		t.Errorf("refused calls changed the template: %+v", got)
	}
}

// A capture the provider fails is recorded as a failed template, with the
// reason, and never promoted.
func TestFailedCaptureIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newTplWorld(t, nil, nil)
	w.create(t, "tpl-fail")
	h := w.acquire(t, lease.Ephemeral)
	defer w.release(t, h, lease.Destroy)
	fakectl.Of(w.fk).Inject(fakectl.Fault{Op: "capture", Err: errors.New("disk full")})
	tpl, err := w.sys.Templates().Capture(ctx, tplOps, h.ID(), "x")
	if err == nil || !strings.Contains(err.Error(), "disk full") || tpl == nil || tpl.State != templates.StateFailed || !strings.Contains(tpl.FailureReason, "disk full") {
		t.Fatalf("failed capture: %+v, %v", tpl, err)
	}
	if _, err := w.sys.Templates().Promote(ctx, tplOps, tpl.ID); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("promote of a failed template: %v, want ErrConflict", err)
	}
}

// IMG-7: revoke with deletion on a driver that cannot delete templates is
// refused before anything changes, naming the driver and the capability.
func TestRevokeDeleteRefusedWithoutTheCapability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fk := fake.New(&fake.Options{Name: "nodelete", Undeclared: drivers.NewSet(drivers.CapTemplateDelete)})
	w := newTplWorld(t, nil, fk)
	w.create(t, "tpl-nodelete")
	h := w.acquire(t, lease.Ephemeral)
	tpl, err := w.sys.Templates().Capture(ctx, tplOps, h.ID(), "x")
	w.release(t, h, lease.Destroy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.sys.Templates().Promote(ctx, tplOps, tpl.ID); err != nil {
		t.Fatal(err)
	}
	_, err = w.sys.Templates().Revoke(ctx, tplOps, tpl.ID, templates.RevokeOptions{Delete: true})
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), `"nodelete"`) || !strings.Contains(err.Error(), "template_delete") {
		t.Fatalf("revoke --delete without template_delete: %v", err)
	}
	if got, _ := w.sys.Templates().Get(ctx, tplOps, tpl.ID); got.State != templates.StateActive {
		t.Errorf("the refused revoke changed the template: %s", got.State)
	}
	if v := w.view(t); v.ActiveTemplate == nil {
		t.Error("the refused revoke cleared the pointer")
	}
	if tpl, err = w.sys.Templates().Revoke(ctx, tplOps, tpl.ID, templates.RevokeOptions{}); err != nil || tpl.State != templates.StateRevoked {
		t.Errorf("revoke without deletion: %+v, %v", tpl, err)
	}
}

// IMG-7: a driver without template_capture is refused before anything
// happens, naming the driver and the capability.
func TestCaptureRefusedWithoutTheCapability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fk := fake.New(&fake.Options{Name: "nocap", Undeclared: drivers.NewSet(drivers.CapTemplateCapture)})
	w := newTplWorld(t, nil, fk)
	w.create(t, "tpl-nocap")
	h := w.acquire(t, lease.Ephemeral)
	defer w.release(t, h, lease.Destroy)
	_, err := w.sys.Templates().Capture(ctx, tplOps, h.ID(), "x")
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), `"nocap"`) || !strings.Contains(err.Error(), "template_capture") {
		t.Fatalf("capture on a driver without template_capture: %v", err)
	}
	if list, _ := w.sys.Templates().List(ctx, tplOps, w.env.ID); len(list) != 0 {
		t.Errorf("a refused capture left templates %+v", list)
	}
}

// IMG-6: a change of an identity field detaches the template (leases start
// from the configured image; it cannot be promoted again); undoing it
// relinks it. A rename keeps it relinked.
func TestTemplateDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newTplWorld(t, nil, nil)
	w.create(t, "tpl-drift")
	src := w.acquire(t, lease.Ephemeral)
	tpl, err := w.sys.Templates().Capture(ctx, tplOps, src.ID(), "x")
	if err != nil {
		t.Fatal(err)
	}
	w.release(t, src, lease.Destroy)
	if _, err := w.sys.Templates().Promote(ctx, tplOps, tpl.ID); err != nil {
		t.Fatal(err)
	}
	update := func(region, name string) {
		t.Helper()
		v := w.view(t)
		req := environment.UpdateRequest{BaseRevision: v.Revision, Config: map[string]any{"image": w.img, "region": region}}
		if name != "" {
			req.Name = &name
		}
		if _, err := w.sys.Catalog().Update(ctx, tplOps, v.ID, req); err != nil {
			t.Fatal(err)
		}
	}
	drift := func(want environment.Drift, image string) {
		t.Helper()
		v := w.view(t)
		if v.ActiveTemplate == nil || v.ActiveTemplate.Drift != want || v.ActiveTemplate.ID != tpl.ID {
			t.Errorf("pointer %+v, want %s drift %s", v.ActiveTemplate, tpl.ID, want)
		}
		list, err := w.sys.Catalog().List(ctx, tplBoard, environment.ListFilter{})
		if err != nil || len(list) != 1 || list[0].ActiveTemplate == nil || list[0].ActiveTemplate.Drift != want {
			t.Errorf("redacted listing %+v, %v; want drift %s", list, err, want)
		}
		h := w.acquire(t, lease.Ephemeral)
		if got := w.identity(t, h); got != image {
			t.Errorf("drift %s: a new lease reports %s, want %s", want, got, image)
		}
		w.release(t, h, lease.Destroy)
	}
	drift(environment.DriftRelinked, tpl.Identity)
	other := w.acquire(t, lease.Ephemeral)
	later, err := w.sys.Templates().Capture(ctx, tplOps, other.ID(), "later")
	if err != nil {
		t.Fatal(err)
	}
	w.release(t, other, lease.Destroy)
	update("r2", "")
	drift(environment.DriftDetached, w.img)
	if _, err := w.sys.Templates().Rollback(ctx, tplOps, tpl.ID); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("rollback of the active template: %v, want ErrConflict", err)
	}
	rev := w.view(t).Revision
	if _, err := w.sys.Templates().Promote(ctx, tplOps, later.ID); errcode.ReasonOf(err) != "source_mismatch" || !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("promote of a template captured from another source config: %v, want a conflict of reason source_mismatch", err)
	}
	if v := w.view(t); v.Revision != rev || v.ActiveTemplate.ID != tpl.ID {
		t.Errorf("a refused promote changed the environment: revision %d (was %d), pointer %+v", v.Revision, rev, v.ActiveTemplate)
	}
	update("r1", "tpl-drift renamed")
	drift(environment.DriftRelinked, tpl.Identity)
}

// IMG-3: a reusable lease resumed from the template whose sandbox reports
// another image is refused with reason image_mismatch.
func TestTemplateLeaseVerifiesTheLiveImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newTplWorld(t, nil, nil)
	w.create(t, "tpl-verify")
	src := w.acquire(t, lease.Ephemeral)
	tpl, err := w.sys.Templates().Capture(ctx, tplOps, src.ID(), "x")
	if err != nil {
		t.Fatal(err)
	}
	w.release(t, src, lease.Destroy)
	if _, err := w.sys.Templates().Promote(ctx, tplOps, tpl.ID); err != nil {
		t.Fatal(err)
	}
	r := w.acquire(t, lease.ReuseByEnvironment)
	w.release(t, r, lease.Stop)
	fakectl.Of(w.fk).ReportWrongImage(r.SandboxID())
	_, err = w.sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Policy: lease.ReuseByEnvironment})
	if errcode.ReasonOf(err) != "image_mismatch" || errcode.Code(err) != errcode.Conflict {
		t.Fatalf("resume of a sandbox that reports another image: %v, want reason image_mismatch", err)
	}
}

// barrierEnvs holds every UpdateEnvironment until both replicas reached
// one, so that the two promotes read the same revision before either
// writes: a real race on the compare-and-swap, every round.
type barrierEnvs struct {
	environment.Store
	gate *sync.WaitGroup
}

func (b barrierEnvs) UpdateEnvironment(ctx context.Context, e *environment.Environment, base int64) error {
	b.gate.Done()
	b.gate.Wait()
	return b.Store.UpdateEnvironment(ctx, e, base)
}

// CFG-6, issue 27: two promotes of different templates at once on two
// Systems over one PostgreSQL, both from the same revision: exactly one
// wins, the other is a conflict, and the pointer names the winner.
func TestTwoPromotesAtOnceOverOnePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	fk := fake.New(nil)
	gate := &sync.WaitGroup{}
	stA, stB := openStores(t, url), openStores(t, url)
	a := newTplWorld(t, &berth.Options{Stores: stA, Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true}, fk)
	a.create(t, "tpl-race")
	var tpls []*templates.Template
	for range 2 {
		h := a.acquire(t, lease.Ephemeral)
		tpl, err := a.sys.Templates().Capture(ctx, tplOps, h.ID(), "x")
		if err != nil {
			t.Fatal(err)
		}
		a.release(t, h, lease.Destroy)
		tpls = append(tpls, tpl)
	}
	stA.Environments = barrierEnvs{stA.Environments, gate}
	stB.Environments = barrierEnvs{stB.Environments, gate}
	ra, err := berth.New(ctx, &berth.Options{Stores: stA, Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	rb, err := berth.New(ctx, &berth.Options{Stores: stB, Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	for round := range 4 {
		gate.Add(2)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		want := []string{tpls[round%2].ID, tpls[(round+1)%2].ID}
		if round > 0 {
			// Each round promotes the template that is not active, so
			// both promotes are allowed and only the race decides.
			cur := a.view(t).ActiveTemplate.ID
			for i := range want {
				if want[i] == cur {
					want[i] = tpls[0].ID
					if cur == tpls[0].ID {
						want[i] = tpls[1].ID
					}
				}
			}
		}
		for i, sys := range []*berth.System{ra, rb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = sys.Templates().Promote(ctx, tplOps, want[i])
			}()
		}
		wg.Wait()
		v := a.view(t)
		switch {
		case errs[0] == nil && errors.Is(errs[1], errcode.ErrConflict) && errors.Is(errs[1], errcode.ErrConflict):
			if v.ActiveTemplate.ID != want[0] {
				t.Errorf("round %d: replica a won but the pointer names %s, want %s", round, v.ActiveTemplate.ID, want[0])
			}
		case errs[1] == nil && errors.Is(errs[0], errcode.ErrConflict) && errors.Is(errs[0], errcode.ErrConflict):
			if v.ActiveTemplate.ID != want[1] {
				t.Errorf("round %d: replica b won but the pointer names %s, want %s", round, v.ActiveTemplate.ID, want[1])
			}
		default:
			t.Errorf("round %d: errors %v and %v; want exactly one winner and one conflict", round, errs[0], errs[1])
		}
		list, err := a.sys.Templates().List(ctx, tplOps, a.env.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tpl := range list {
			if (tpl.State == templates.StateActive) != (tpl.ID == v.ActiveTemplate.ID) {
				t.Errorf("round %d: template %s is %s, the pointer names %s", round, tpl.ID, tpl.State, v.ActiveTemplate.ID)
			}
		}
	}
}

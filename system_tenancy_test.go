package berth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
)

// A terminal token is redeemed only by the principal it was minted for, on
// its path: another principal who presents it (one who saw the URL), or
// the right principal on another path, is refused (401, no upgrade) and
// the token stays redeemable by its owner (issue 51).
func TestTerminalTokenNotBurnedByAnotherPrincipal(t *testing.T) {
	ctx := context.Background()
	w, _ := newSetupWorld(t, nil, nil)
	svc := w.sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = svc.Cancel(ctx, tplOps, ses.ID) }()
	other := authz.Principal{ID: "ops-2", Role: authz.RoleInstanceAdmin}
	who := map[string]authz.Principal{"ops": tplOps, "ops-2": other}
	h := svc.TerminalHandler(func(r *http.Request) (authz.Principal, error) { return who[r.Header.Get("X-Test-As")], nil })
	mux := http.NewServeMux()
	mux.Handle("/term", h)
	mux.Handle("/other", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	m, _, err := svc.MintTerminalToken(ctx, tplOps, ses.ID, "/term")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, as string }{
		{"another principal", "/term", "ops-2"},
		{"its principal on another path", "/other", "ops"},
	} {
		_, resp, err := termDial(t, srv.URL, tc.path, tc.as, url.Values{"token": {m}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %v, response %v; want 401 before any upgrade", tc.name, err, resp)
		}
	}
	own, _, err := termDial(t, srv.URL, "/term", "ops", url.Values{"token": {m}})
	if err != nil {
		t.Fatalf("the owner after the refusals: %v (the token was used up by someone else)", err)
	}
	if own.first["type"] != "attached" {
		t.Errorf("the owner's first frame %v, want attached", own.first)
	}
	own.c.CloseNow()
}

// A setup session past its TTL, or past its cap while its TTL was pushed
// back, is refused when it is used, without a sweep (issue 51): minting a
// terminal token, redeeming one minted before, opening the terminal and
// capturing all fail, the session ends timed_out there and then, and its
// sandbox (which holds the environment's secret env) is destroyed.
func TestSetupSessionPastItsTimeRefusedWhenUsed(t *testing.T) {
	ctx := context.Background()
	st := store.Memory()
	w, _ := newSetupWorld(t, &berth.Options{Stores: st}, nil)
	svc := w.sys.Templates()
	srv := httptest.NewServer(svc.TerminalHandler(func(*http.Request) (authz.Principal, error) { return tplOps, nil }))
	defer srv.Close()
	uses := map[string]func(id, token string) error{
		"mint a terminal token": func(id, _ string) error {
			_, _, err := svc.MintTerminalToken(ctx, tplOps, id, "/")
			return err
		},
		"redeem a token minted while it was live": func(_, token string) error {
			c, resp, err := termDial(t, srv.URL, "/", "ops", url.Values{"token": {token}})
			if err == nil {
				c.c.CloseNow()
				return errors.New("the web terminal opened")
			}
			if resp == nil || resp.StatusCode != http.StatusConflict {
				return errors.New("refused, but not with 409: " + err.Error())
			}
			return errcode.ErrConflict
		},
		"open the terminal": func(id, _ string) error {
			ts, err := svc.OpenTerminal(ctx, tplOps, id, 24, 80)
			if err == nil {
				_ = ts.Close()
			}
			return err
		},
		"capture": func(id, _ string) error {
			_, err := svc.CaptureSession(ctx, tplOps, id, false)
			return err
		},
	}
	past := map[string]func(s *templates.Session){
		"past its TTL": func(s *templates.Session) { s.ExpiresAt = time.Now().Add(-time.Second) },
		"past its cap": func(s *templates.Session) {
			s.ExpiresAt, s.Deadline = time.Now().Add(time.Hour), time.Now().Add(-time.Second)
		},
	}
	for when, expire := range past {
		for use, do := range uses {
			ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: w.env.ID, Interactive: true})
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := svc.MintTerminalToken(ctx, tplOps, ses.ID, "/")
			if err != nil {
				t.Fatal(err)
			}
			cur, err := tplRecords(st.Templates).GetSession(ctx, ses.ID)
			if err != nil {
				t.Fatal(err)
			}
			expire(cur)
			cur.Version++
			if err := tplRecords(st.Templates).UpdateSession(ctx, cur); err != nil {
				t.Fatal(err)
			}
			if err := do(ses.ID, m); !errors.Is(err, errcode.ErrConflict) {
				t.Errorf("%s: %s: %v, want a refusal wrapping ErrConflict", when, use, err)
			}
			got, err := svc.Session(ctx, tplOps, ses.ID)
			if err != nil || got.State != templates.SessionTimedOut {
				t.Errorf("%s: after %s the session is %+v, %v; want timed_out", when, use, got, err)
			}
			if got != nil && got.State.Active() {
				_, _ = svc.Cancel(ctx, tplOps, ses.ID)
			}
			if tpls, err := svc.List(ctx, tplOps, w.env.ID); err != nil || len(tpls) != 0 {
				t.Errorf("%s: %s: templates %v, %v; want none captured", when, use, tpls, err)
			}
			if live := liveSandboxes(w.fk); len(live) != 0 {
				t.Errorf("%s: after %s sandboxes are left: %v", when, use, live)
			}
		}
	}
}

// The instance's lease quota holds across replicas (issue 51): two Systems
// on one PostgreSQL, the instance setting quotaPerCompany 4 written by one
// of them, acquire 20 leases for one company at once (10 each): exactly 4
// are granted, the others refused with lease.ErrQuota before anything is
// created, and never more than 4 are live.
func TestQuotaHoldsAcrossTwoSystemsOnOnePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.Postgres(t)
	fk := fake.New(nil)
	img := fk.AddImage("registry.fake.test/team/app:v1").String()
	newSystemOn := func(st store.Stores) *berth.System {
		sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fk}, TestMode: true, MemorySecrets: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sys.Close() })
		return sys
	}
	newSystem := func() *berth.System { return newSystemOn(openStores(t, url)) }
	a := newSystem()
	four := 4
	if _, err := a.Settings().Update(ctx, tplOps, instance.AnyRevision, func(c *instance.Settings) error { c.QuotaPerCompany = four; return nil }); err != nil {
		t.Fatal(err)
	}
	env, err := a.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "quota-race", Driver: fk.Name(),
		Config: map[string]any{"image": img, "region": "r1"}})
	if err != nil {
		t.Fatal(err)
	}
	b := newSystem()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted []*lease.Handle
	refused := 0
	for i := range 20 {
		sys := []*berth.System{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{EnvironmentID: env.ID, Company: "acme", Run: fmt.Sprintf("run-%d", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted = append(granted, h)
			case errors.Is(err, lease.ErrQuota):
				refused++
			default:
				t.Errorf("acquisition %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	live, err := a.Leases().List(ctx, tplOps, lease.Filter{Company: "acme", Live: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(granted) != 4 || refused != 16 || len(live) != 4 || fakectl.Of(fk).Calls("create") != 4 {
		t.Errorf("%d granted, %d refused, %d live, %d sandboxes created; want 4, 16, 4 and 4", len(granted), refused, len(live), fakectl.Of(fk).Calls("create"))
	}
	for _, h := range granted {
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Error(err)
		}
	}

	// The worst interleaving, in order: a replica whose own count is stale
	// (it counted before another replica's 4 inserts) still cannot add a
	// fifth: the store counts again in the step that writes.
	for i := range 4 {
		if _, err := a.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{EnvironmentID: env.ID, Company: "acme", Run: fmt.Sprintf("again-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	st := openStores(t, url)
	st.Leases = staleCount{st.Leases}
	late := newSystemOn(st)
	_, err = late.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{EnvironmentID: env.ID, Company: "acme", Run: "late"})
	if !errors.Is(err, lease.ErrQuota) {
		t.Errorf("a fifth lease through a replica whose count was stale: %v, want ErrQuota", err)
	}
	if live, err := a.Leases().List(ctx, tplOps, lease.Filter{Company: "acme", Live: true}); err != nil || len(live) != 4 {
		t.Errorf("%d live leases of acme, %v; want 4", len(live), err)
	}
}

// staleCount is a lease store whose list of a company's live leases is
// empty: a replica that counted before another one's inserts.
type staleCount struct{ lease.Store }

func (s staleCount) ListLeases(ctx context.Context, f lease.Filter) ([]*lease.Lease, error) {
	if f.Company != "" && f.Live {
		return nil, nil
	}
	return s.Store.ListLeases(ctx, f)
}

// A warm pool starts filling when its environment is saved (issue 51):
// created with a pool of 2, the environment gets 2 members without any
// sweep or MaintainPools; its pool raised to 3 by an update, a third
// follows. (The refill runs in the background: the test waits for it.)
func TestPoolFillsWhenItsEnvironmentIsSaved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.Memory()
	fk := fake.New(nil)
	img := fk.AddImage("registry.fake.test/team/app:v1").String()
	sys, err := berth.New(ctx, &berth.Options{Stores: st, Drivers: []drivers.Driver{fk}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	pooled := func() int {
		ls, err := st.Leases.ListLeases(ctx, lease.Filter{Statuses: []lease.Status{lease.StatusPooled}})
		if err != nil {
			t.Fatal(err)
		}
		return len(ls)
	}
	waitPooled := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); pooled() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d pooled members, want %d: saving the environment started no refill", pooled(), want)
			}
		}
	}
	v, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "warm", Driver: fk.Name(),
		Config: map[string]any{"image": img, "region": "r1"}, Pool: &environment.Pool{Size: 2}})
	if err != nil {
		t.Fatal(err)
	}
	waitPooled(2)
	if _, err := sys.Catalog().Update(ctx, tplOps, v.ID, environment.UpdateRequest{BaseRevision: v.Revision, Pool: &environment.Pool{Size: 3}}); err != nil {
		t.Fatal(err)
	}
	waitPooled(3)
	// A save while the refill it started still runs (its members start
	// slowly) is not lost: the running refill fills again to the size
	// saved last.
	fakectl.Of(fk).SetStartDelay(300 * time.Millisecond)
	cur, err := sys.Catalog().Get(ctx, tplOps, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur, err = sys.Catalog().Update(ctx, tplOps, v.ID, environment.UpdateRequest{BaseRevision: cur.Revision, Pool: &environment.Pool{Size: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Catalog().Update(ctx, tplOps, v.ID, environment.UpdateRequest{BaseRevision: cur.Revision, Pool: &environment.Pool{Size: 5}}); err != nil {
		t.Fatal(err)
	}
	waitPooled(5)
}

package environment_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// TestCreateGetRoundTrip (CFG-1): a saved environment is an instance-scoped
// record with id, name, description, driver, status, normalized config
// (defaults applied, secrets as references), env vars, metadata, revision,
// times and actor.
func TestCreateGetRoundTrip(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			testCreateGetRoundTrip(t, newFixtureOn(t, st.new(), nil))
		})
	}
}

func testCreateGetRoundTrip(t *testing.T, f *fixture) {
	ctx := context.Background()
	created := f.mustCreate(t, remoteRequest("build"))
	secrets := environment.ListSecrets(f.secrets)
	if len(secrets) != 1 {
		t.Fatalf("secret store holds %d secrets, want 1: %+v", len(secrets), secrets)
	}
	want := &environment.View{Environment: environment.Environment{
		ID: "env_001", Name: "build", Description: "a remote target", Driver: "remote",
		Status: environment.StatusActive,
		Config: config.Config{
			"host": "build-1.example", "port": int64(22), "timeout": "30s", "mode": "slow",
			"apiKey": config.SecretRef{ID: secrets[0].ID, Version: 1},
		},
		Env:      map[string]string{"GOFLAGS": "-mod=mod"},
		Metadata: map[string]string{"team": "infra"},
		Revision: 1, CreatedAt: t0, UpdatedAt: t0, CreatedBy: "u_admin", UpdatedBy: "u_admin",
	}}
	if diff := cmp.Diff(want, created); diff != "" {
		t.Errorf("Create view (-want +got):\n%s", diff)
	}
	got, err := f.cat.Get(ctx, operator, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get view (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(environment.SecretInfo{ID: secrets[0].ID, Owner: "env_001", Field: "apiKey", Versions: []int64{1}}, secrets[0]); diff != "" {
		t.Errorf("secret (-want +got):\n%s", diff)
	}
	if _, err := f.cat.Get(ctx, admin, "env_nope"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Get of a missing id: got %v, want errcode.ErrNotFound", err)
	}
}

// TestCatalogAuthorization (CFG-2): instance admins and local operators
// create, edit, archive and delete and see the full view; board members read
// the redacted view only; agents are denied every mutation even with company
// grants and see at most the redacted view. A denied mutation changes
// nothing.
func TestCatalogAuthorization(t *testing.T) {
	t.Parallel()
	type op struct {
		name   string
		mutate bool
		run    func(ctx context.Context, f *fixture, p authz.Principal, id string) error
	}
	ops := []op{
		{"create", true, func(ctx context.Context, f *fixture, p authz.Principal, _ string) error {
			_, err := f.cat.Create(ctx, p, remoteRequest("second"))
			return err
		}},
		{"update", true, func(ctx context.Context, f *fixture, p authz.Principal, id string) error {
			d := "changed"
			_, err := f.cat.Update(ctx, p, id, environment.UpdateRequest{BaseRevision: 1, Description: &d})
			return err
		}},
		{"archive", true, func(ctx context.Context, f *fixture, p authz.Principal, id string) error {
			_, err := f.cat.Archive(ctx, p, id, 1)
			return err
		}},
		{"delete", true, func(ctx context.Context, f *fixture, p authz.Principal, id string) error {
			_, err := f.cat.Delete(ctx, p, id, 1)
			return err
		}},
		{"blast radius", false, func(ctx context.Context, f *fixture, p authz.Principal, id string) error {
			_, err := f.cat.BlastRadius(ctx, p, id)
			return err
		}},
		{"update of a missing id", true, func(ctx context.Context, f *fixture, p authz.Principal, _ string) error {
			_, err := f.cat.Update(ctx, p, "env_missing", environment.UpdateRequest{BaseRevision: 1})
			return err
		}},
	}
	for _, o := range ops {
		for _, pr := range principals {
			t.Run(o.name+"/"+pr.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				f := newFixture(t, nil)
				v := f.mustCreate(t, remoteRequest("build"))
				before, _ := f.store.GetEnvironment(ctx, v.ID)
				err := o.run(ctx, f, pr.p, v.ID)
				privileged := pr.p.Role == authz.RoleInstanceAdmin || pr.p.Role == authz.RoleLocalOperator
				if privileged {
					if o.name == "update of a missing id" {
						wantErr(t, err, errcode.ErrNotFound)
					} else if err != nil {
						t.Fatalf("want allowed, got %v", err)
					}
					return
				}
				wantErr(t, err, errcode.ErrDenied)
				wantText(t, err, string(pr.p.Role))
				after, _ := f.store.GetEnvironment(ctx, v.ID)
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("denied %s changed the record (-before +after):\n%s", o.name, diff)
				}
				if n := f.count(t); n != 1 {
					t.Errorf("store holds %d environments after a denied %s, want 1", n, o.name)
				}
				if o.mutate && len(f.logs.lines("environment action denied")) != 1 {
					t.Errorf("want one denial log line, got log:\n%s", f.logs)
				}
			})
		}
	}
}

// TestReadViews (CFG-2): admins and operators get the full view, board
// members and agents the redacted one (no config, no env vars, no metadata),
// from Get and from List alike.
func TestReadViews(t *testing.T) {
	t.Parallel()
	for _, pr := range principals {
		t.Run(pr.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, nil)
			created := f.mustCreate(t, remoteRequest("build"))
			got, err := f.cat.Get(ctx, pr.p, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			list, err := f.cat.List(ctx, pr.p, environment.ListFilter{})
			if err != nil {
				t.Fatal(err)
			}
			want := created
			if pr.p.Role == authz.RoleBoardMember || pr.p.Role == authz.RoleAgent {
				want = &environment.View{Environment: environment.Environment{
					ID: created.ID, Name: "build", Description: "a remote target", Driver: "remote",
					Status: environment.StatusActive, Revision: 1, CreatedAt: t0, UpdatedAt: t0,
					CreatedBy: "u_admin", UpdatedBy: "u_admin",
				}, Redacted: true}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]*environment.View{want}, list); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExclusiveLocal (CFG-4): at most one local environment per instance,
// also when the first one is archived and when creates race; the error
// names the environment and the field.
func TestExclusiveLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	first := f.mustCreate(t, environment.CreateRequest{Name: "this machine", Driver: "local"})
	_, err := f.cat.Create(ctx, operator, environment.CreateRequest{Name: "another", Driver: "local"})
	wantErr(t, err, errcode.ErrConflict)
	wantText(t, err, `environment "another"`, `field "driver"`, "this machine")
	if _, err := f.cat.Archive(ctx, admin, first.ID, 1); err != nil {
		t.Fatal(err)
	}
	_, err = f.cat.Create(ctx, admin, environment.CreateRequest{Name: "after archive", Driver: "local"})
	wantErr(t, err, errcode.ErrConflict)
	if n := f.count(t); n != 1 {
		t.Errorf("store holds %d environments, want 1", n)
	}

	t.Run("racing creates make one", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = f.cat.Create(ctx, admin, environment.CreateRequest{Name: "local " + string(rune('a'+i)), Driver: "local"})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, errcode.ErrConflict):
				t.Errorf("unexpected error %v", err)
			}
		}
		if ok != 1 || f.count(t) != 1 {
			t.Errorf("%d creates succeeded and %d environments stored, want 1 and 1", ok, f.count(t))
		}
	})
	t.Run("exclusivity is configurable", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, func(o *environment.Options) {
			environment.WithTestOptions(o, environment.TestOptions{ExclusiveDrivers: []string{}})
		})
		f.mustCreate(t, environment.CreateRequest{Name: "one", Driver: "local"})
		f.mustCreate(t, environment.CreateRequest{Name: "two", Driver: "local"})
	})
}

// TestTestDrivers (CFG-4): the fake driver, and any driver the host lists as
// a test driver, cannot be saved unless the host enables test mode; an
// environment saved in test mode cannot be resolved by a catalog without it.
func TestTestDrivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name     string
		driver   string
		testMode bool
		wantErr  bool
	}{
		{"fake refused by default", "fake", false, true},
		{"fake allowed in test mode", "fake", true, false},
		{"host-listed test driver refused", "sim", false, true},
		{"host-listed test driver allowed in test mode", "sim", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, func(o *environment.Options) {
				o.TestMode = tc.testMode
				environment.WithTestOptions(o, environment.TestOptions{TestDrivers: []string{"sim"}})
			})
			for _, p := range []authz.Principal{admin, operator} {
				_, err := f.cat.Create(ctx, p, environment.CreateRequest{Name: "t-" + p.ID, Driver: tc.driver})
				if !tc.wantErr {
					if err != nil {
						t.Fatal(err)
					}
					continue
				}
				wantErr(t, err, errcode.ErrInvalid, drivers.ErrUnavailable)
				wantText(t, err, `environment "t-`+p.ID+`"`, `field "driver"`, "test mode")
			}
			if want := map[bool]int{true: 0, false: 2}[tc.wantErr]; f.count(t) != want {
				t.Errorf("store holds %d environments, want %d", f.count(t), want)
			}
		})
	}

	t.Run("saved in test mode, resolved without", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, func(o *environment.Options) { o.TestMode = true })
		v := f.mustCreate(t, environment.CreateRequest{Name: "sandbox", Driver: "fake"})
		if _, cfg, err := resolvedConfig(f.cat, ctx, v.ID); err != nil || cfg.String("image") != "busybox" {
			t.Fatalf("ResolvedConfig in test mode: %v, %v", cfg, err)
		}
		prod := environment.NewCatalog(f.store, newRegistry(), f.secrets, nil, nil)
		_, _, err := resolvedConfig(prod, ctx, v.ID)
		wantErr(t, err, drivers.ErrUnavailable)
		got, err := prod.Get(ctx, admin, v.ID)
		if err != nil || got.Unavailable == "" {
			t.Errorf("view outside test mode: %+v, %v; want Unavailable set", got, err)
		}
	})
}

// TestStaleRevision (CFG-6): updates, archives and deletes carry the revision
// they were based on; a stale one is a conflict and the record is unchanged.
func TestStaleRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := "renamed"
	ops := map[string]func(f *fixture, id string, base int64) error{
		"update": func(f *fixture, id string, base int64) error {
			_, err := f.cat.Update(ctx, admin, id, environment.UpdateRequest{BaseRevision: base, Name: &name,
				Config: map[string]any{"host": "other", "apiKey": "new-" + canary}})
			return err
		},
		"archive": func(f *fixture, id string, base int64) error {
			_, err := f.cat.Archive(ctx, operator, id, base)
			return err
		},
		"delete": func(f *fixture, id string, base int64) error {
			_, err := f.cat.Delete(ctx, admin, id, base)
			return err
		},
	}
	for opName, op := range ops {
		for _, base := range []int64{1, 3} {
			t.Run(opName, func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, nil)
				v := f.mustCreate(t, remoteRequest("build"))
				d := "second revision"
				if _, err := f.cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: 1, Description: &d}); err != nil {
					t.Fatal(err)
				}
				before, _ := f.store.GetEnvironment(ctx, v.ID)
				secretsBefore := environment.ListSecrets(f.secrets)
				err := op(f, v.ID, base)
				wantErr(t, err, errcode.ErrConflict)
				wantText(t, err, `"build" (env_001)`, "baseRevision", "stale revision")
				after, _ := f.store.GetEnvironment(ctx, v.ID)
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("record changed (-before +after):\n%s", diff)
				}
				if diff := cmp.Diff(secretsBefore, environment.ListSecrets(f.secrets)); diff != "" {
					t.Errorf("secrets changed (-before +after):\n%s", diff)
				}
			})
		}
	}

	t.Run("racing updates from one base: one wins", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		v := f.mustCreate(t, remoteRequest("build"))
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = f.cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: 1,
					Config: map[string]any{"host": "h", "apiKey": "rotated-" + canary}})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.Is(err, errcode.ErrConflict) {
				t.Errorf("unexpected error %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d updates succeeded, want 1", ok)
		}
		// The losers left no secret version behind: only the winner's.
		s := environment.ListSecrets(f.secrets)
		if len(s) != 1 || len(s[0].Versions) != 1 || s[0].Versions[0] < 2 {
			t.Errorf("secrets after the race: %+v, want one secret with only the winning version", s)
		}
		_, cfg, err := resolvedConfig(f.cat, ctx, v.ID)
		if err != nil || cfg.String("apiKey") != "rotated-"+canary {
			t.Errorf("winner's secret does not resolve: %v", err)
		}
	})
}

// TestDuplicateName: names are unique in the instance; a refused create
// leaves no record and no secret behind, a refused rename changes nothing.
func TestDuplicateName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	f.mustCreate(t, remoteRequest("build"))
	other := f.mustCreate(t, remoteRequest("other"))
	_, err := f.cat.Create(ctx, admin, remoteRequest("build"))
	wantErr(t, err, errcode.ErrConflict)
	wantText(t, err, `environment "build"`, "name already used")
	if f.count(t) != 2 || len(environment.ListSecrets(f.secrets)) != 2 {
		t.Errorf("refused create left %d environments and secrets %+v, want 2 and 2", f.count(t), environment.ListSecrets(f.secrets))
	}
	name := "build"
	_, err = f.cat.Update(ctx, admin, other.ID, environment.UpdateRequest{BaseRevision: 1, Name: &name,
		Config: map[string]any{"host": "h", "apiKey": "new value"}})
	wantErr(t, err, errcode.ErrConflict)
	if got, _ := f.cat.Get(ctx, admin, other.ID); got.Name != "other" || got.Revision != 1 {
		t.Errorf("refused rename changed the record: %+v", got)
	}
	if s := environment.ListSecrets(f.secrets); len(s) != 2 || len(s[0].Versions) != 1 || len(s[1].Versions) != 1 {
		t.Errorf("refused rename left a secret version behind: %+v", s)
	}
}

// TestUnavailableDriver (CAP-3): an environment whose driver is not
// registered is listed as unavailable with the reason, shown without config
// (it cannot be redacted by a schema), and cannot be resolved or edited.
func TestUnavailableDriver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	v := f.mustCreate(t, remoteRequest("build"))
	bare := environment.NewCatalog(f.store, drivers.NewRegistry(), f.secrets, nil, nil)
	list, err := bare.List(ctx, admin, environment.ListFilter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v", list, err)
	}
	if list[0].Unavailable == "" || list[0].Config != nil || list[0].Redacted {
		t.Errorf("view of an unregistered driver: %+v; want Unavailable set and no config", list[0])
	}
	_, _, err = resolvedConfig(bare, ctx, v.ID)
	wantErr(t, err, drivers.ErrUnavailable)
	d := "x"
	_, err = bare.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: 1, Description: &d})
	wantErr(t, err, drivers.ErrUnavailable, errcode.ErrInvalid)
	wantText(t, err, `environment "build" (env_001)`, `field "driver"`)
	// It can still be deleted, secrets included.
	if _, err := bare.Delete(ctx, admin, v.ID, 1); err != nil || len(environment.ListSecrets(f.secrets)) != 0 {
		t.Errorf("Delete = %v, secrets left %+v", err, environment.ListSecrets(f.secrets))
	}
}

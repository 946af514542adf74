package environmenttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// next returns a copy of e edited as an update from e's revision would be.
func next(e *environment.Environment, description string) *environment.Environment {
	n := *e
	n.Config = e.Config.Clone()
	n.Description = description
	n.Config["host"] = "build-2.example.test"
	n.Env = map[string]string{"ONLY": "this"}
	n.Metadata = nil
	n.Revision = e.Revision + 1
	n.UpdatedAt = e.UpdatedAt.Add(time.Second + 1)
	n.UpdatedBy = "admin-3"
	return &n
}

// CFG-6: an update based on the stored revision replaces the record.
func testEnvUpdate(t *testing.T, s environment.Store) {
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	upd := next(sampleEnv("env-1", "alpha", "ssh"), "edited")
	upd.Name = "alpha renamed"
	if err := s.UpdateEnvironment(context.Background(), upd, 1); err != nil {
		t.Fatalf("UpdateEnvironment: %v", err)
	}
	want := next(sampleEnv("env-1", "alpha", "ssh"), "edited")
	want.Name = "alpha renamed"
	diff(t, "after update", want, mustGet(t, s, "env-1"), configAsJSON)
	// The old name is free again.
	mustCreate(t, s, sampleEnv("env-2", "alpha", "ssh"), false)
}

// CFG-6: a stale revision is a conflict and the stored record is unchanged.
func testEnvUpdateStale(t *testing.T, s environment.Store) {
	ctx := context.Background()
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	v2 := next(sampleEnv("env-1", "alpha", "ssh"), "second")
	if err := s.UpdateEnvironment(ctx, v2, 1); err != nil {
		t.Fatal(err)
	}
	stale := next(sampleEnv("env-1", "alpha", "ssh"), "stale edit")
	wantErr(t, "update from revision 1 after revision 2", s.UpdateEnvironment(ctx, stale, 1), errcode.ErrConflict)
	// A revision that does not follow the base is refused too.
	skip := next(v2, "skipping")
	skip.Revision = 7
	if err := s.UpdateEnvironment(ctx, skip, 2); err == nil {
		t.Errorf("update with revision 7 from base 2 succeeded")
	}
	diff(t, "after refused updates", v2, mustGet(t, s, "env-1"), configAsJSON)
	missing := next(sampleEnv("nope", "nope", "ssh"), "x")
	wantErr(t, "update of a missing environment", s.UpdateEnvironment(ctx, missing, 1), errcode.ErrNotFound)
}

func testEnvUpdateTakenName(t *testing.T, s environment.Store) {
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	mustCreate(t, s, sampleEnv("env-2", "beta", "ssh"), false)
	upd := next(sampleEnv("env-2", "beta", "ssh"), "x")
	upd.Name = "alpha"
	wantErr(t, "rename onto a taken name", s.UpdateEnvironment(context.Background(), upd, 1), errcode.ErrConflict)
	diff(t, "after refused rename", sampleEnv("env-2", "beta", "ssh"), mustGet(t, s, "env-2"), configAsJSON)
}

// CFG-6: optimistic concurrency holds under contention.
func testEnvUpdateConcurrent(t *testing.T, s environment.Store) {
	const n = 20
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	warm(t, s, n)
	errs := race(n, func(i int) error {
		return s.UpdateEnvironment(context.Background(), next(sampleEnv("env-1", "alpha", "ssh"), fmt.Sprintf("writer %d", i)), 1)
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Errorf("writers %d and %d both succeeded from revision 1", winner, i)
			}
			winner = i
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("writer %d: got %v, want nil or ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer of %d succeeded", n)
	}
	diff(t, "stored environment", next(sampleEnv("env-1", "alpha", "ssh"), fmt.Sprintf("writer %d", winner)), mustGet(t, s, "env-1"), configAsJSON)
}

// CFG-6, CFG-7: delete is revision-checked too.
func testEnvDelete(t *testing.T, s environment.Store) {
	ctx := context.Background()
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	if err := s.UpdateEnvironment(ctx, next(sampleEnv("env-1", "alpha", "ssh"), "v2"), 1); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "delete with a stale revision", s.DeleteEnvironment(ctx, "env-1", 1), errcode.ErrConflict)
	if got := mustGet(t, s, "env-1"); got.Revision != 2 {
		t.Errorf("after refused delete: revision %d, want 2", got.Revision)
	}
	if err := s.DeleteEnvironment(ctx, "env-1", 2); err != nil {
		t.Fatalf("delete with the right revision: %v", err)
	}
	_, err := s.GetEnvironment(ctx, "env-1")
	wantErr(t, "get after delete", err, errcode.ErrNotFound)
	wantErr(t, "delete again", s.DeleteEnvironment(ctx, "env-1", 2), errcode.ErrNotFound)
	// The id and name are free again.
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
}

func testEnvNotFound(t *testing.T, s environment.Store) {
	ctx := context.Background()
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	_, err := s.GetEnvironment(ctx, "env-2")
	wantErr(t, "get missing", err, errcode.ErrNotFound)
	_, err = s.GetEnvironment(ctx, "")
	wantErr(t, "get empty id", err, errcode.ErrNotFound)
	wantErr(t, "delete missing", s.DeleteEnvironment(ctx, "env-2", 1), errcode.ErrNotFound)
}

// Every call honours cancellation (CONVENTIONS 7): a cancelled context
// returns an error wrapping context.Canceled and writes nothing.
func testEnvCancelled(t *testing.T, s environment.Store) {
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wantErr(t, "create", s.CreateEnvironment(ctx, sampleEnv("env-2", "beta", "ssh"), false), context.Canceled)
	_, err := s.GetEnvironment(ctx, "env-1")
	wantErr(t, "get", err, context.Canceled)
	_, err = s.ListEnvironments(ctx, environment.ListFilter{})
	wantErr(t, "list", err, context.Canceled)
	wantErr(t, "update", s.UpdateEnvironment(ctx, next(sampleEnv("env-1", "alpha", "ssh"), "x"), 1), context.Canceled)
	wantErr(t, "delete", s.DeleteEnvironment(ctx, "env-1", 1), context.Canceled)

	_, err = s.GetEnvironment(context.Background(), "env-2")
	wantErr(t, "get environment created with a cancelled context", err, errcode.ErrNotFound)
	diff(t, "after cancelled update and delete", sampleEnv("env-1", "alpha", "ssh"), mustGet(t, s, "env-1"), configAsJSON)
}

// IMG-6, CFG-6: the active template pointer (with its source fingerprint,
// without a drift) round-trips, is set and cleared only by a
// revision-checked update, and a stale one changes nothing.
func testEnvActiveTemplate(t *testing.T, s environment.Store) {
	ctx := context.Background()
	e := sampleEnv("env-1", "alpha", "ssh")
	mustCreate(t, s, e, false)
	if got := mustGet(t, s, "env-1"); got.ActiveTemplate != nil {
		t.Fatalf("a new environment has active template %+v, want none", got.ActiveTemplate)
	}
	ptr := &environment.ActiveTemplate{ID: "tpl-1", Identity: "snapshot:fake/snap-1", SourceFingerprint: "sha256:" + fmt.Sprintf("%064d", 1)}
	v2 := *e
	v2.ActiveTemplate = ptr
	v2.Revision = 2
	if err := s.UpdateEnvironment(ctx, &v2, 1); err != nil {
		t.Fatalf("UpdateEnvironment setting the pointer: %v", err)
	}
	got := mustGet(t, s, "env-1")
	diff(t, "pointer after update", ptr, got.ActiveTemplate)
	got.ActiveTemplate.ID = "changed by the caller"
	if again := mustGet(t, s, "env-1"); again.ActiveTemplate.ID != "tpl-1" {
		t.Errorf("changing a returned pointer changed the stored one: %q", again.ActiveTemplate.ID)
	}
	stale := v2
	stale.ActiveTemplate = &environment.ActiveTemplate{ID: "tpl-2", Identity: "snapshot:fake/snap-2"}
	wantErr(t, "pointer change from a stale revision", s.UpdateEnvironment(ctx, &stale, 1), errcode.ErrConflict)
	diff(t, "pointer after a stale change", ptr, mustGet(t, s, "env-1").ActiveTemplate)
	v3 := v2
	v3.ActiveTemplate, v3.Revision = nil, 3
	if err := s.UpdateEnvironment(ctx, &v3, 2); err != nil {
		t.Fatalf("UpdateEnvironment clearing the pointer: %v", err)
	}
	if got := mustGet(t, s, "env-1"); got.ActiveTemplate != nil || got.Revision != 3 {
		t.Errorf("after clearing: pointer %+v revision %d, want none at 3", got.ActiveTemplate, got.Revision)
	}
	list, err := s.ListEnvironments(ctx, environment.ListFilter{})
	if err != nil || len(list) != 1 || list[0].ActiveTemplate != nil {
		t.Errorf("ListEnvironments = %v, %v; want env-1 without a pointer", list, err)
	}
}

// The warm pool setting (issue 31) round-trips on create, update and list,
// its max age exact to the nanosecond, and is cleared by an update; so
// does the required isolation (issue 56).
func testEnvPool(t *testing.T, s environment.Store) {
	ctx := context.Background()
	e := sampleEnv("env-1", "alpha", "ssh")
	e.Pool = &environment.Pool{Size: 3, MaxAge: 90*time.Minute + 7, Runner: true}
	e.RequireIsolation = drivers.IsolationGVisor
	mustCreate(t, s, e, false)
	diff(t, "pool after create", e.Pool, mustGet(t, s, "env-1").Pool)
	if got := mustGet(t, s, "env-1").RequireIsolation; got != drivers.IsolationGVisor {
		t.Errorf("requireIsolation after create = %s, want gvisor", got)
	}
	v2 := *e
	v2.Pool, v2.Revision, v2.RequireIsolation = &environment.Pool{Size: 1}, 2, drivers.IsolationContainer
	if err := s.UpdateEnvironment(ctx, &v2, 1); err != nil {
		t.Fatalf("UpdateEnvironment changing the pool: %v", err)
	}
	got := mustGet(t, s, "env-1")
	diff(t, "pool after update", v2.Pool, got.Pool)
	if got.RequireIsolation != drivers.IsolationContainer {
		t.Errorf("requireIsolation after update = %s, want container", got.RequireIsolation)
	}
	got.Pool.Size = 9
	if again := mustGet(t, s, "env-1"); again.Pool.Size != 1 {
		t.Errorf("changing a returned pool changed the stored one: %d", again.Pool.Size)
	}
	list, err := s.ListEnvironments(ctx, environment.ListFilter{})
	if err != nil || len(list) != 1 || list[0].Pool == nil || *list[0].Pool != *v2.Pool {
		t.Errorf("ListEnvironments = %v, %v; want env-1 with pool size 1", list, err)
	}
	v3 := v2
	v3.Pool, v3.Revision = nil, 3
	if err := s.UpdateEnvironment(ctx, &v3, 2); err != nil {
		t.Fatalf("UpdateEnvironment removing the pool: %v", err)
	}
	if got := mustGet(t, s, "env-1"); got.Pool != nil {
		t.Errorf("after removing: pool %+v, want none", got.Pool)
	}
}

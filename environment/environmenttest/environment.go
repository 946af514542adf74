package environmenttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// RunStoreTests runs the environment.Store conformance suite.
// newStore returns a fresh, empty store for one subtest; it registers its
// own cleanup with t. Subtests run in parallel.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) environment.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s environment.Store)
	}{
		{"create then get returns an equal deep copy", testEnvRoundTrip},
		{"zero fields and nil maps round-trip", testEnvMinimalRoundTrip},
		{"secret reference still reads after a round trip", testEnvSecretRef},
		{"duplicate id is a conflict and changes nothing", testEnvDuplicateID},
		{"duplicate name is a conflict and changes nothing", testEnvDuplicateName},
		{"create with a revision other than 1 is refused", testEnvCreateRevision},
		{"exclusive driver refuses a second environment of that driver", testEnvExclusive},
		{"exclusive driver admits exactly one of 20 concurrent creates", testEnvExclusiveConcurrent},
		{"list filters and sorts by name then id", testEnvList},
		{"update with the right revision replaces the record", testEnvUpdate},
		{"update with a stale revision is a conflict and changes nothing", testEnvUpdateStale},
		{"update to a taken name is a conflict and changes nothing", testEnvUpdateTakenName},
		{"20 concurrent updates from one revision: exactly one wins", testEnvUpdateConcurrent},
		{"the active template pointer round-trips and changes with the revision", testEnvActiveTemplate},
		{"the pool setting round-trips on create, update and list", testEnvPool},
		{"delete checks the revision", testEnvDelete},
		{"missing environments are not found", testEnvNotFound},
		{"a cancelled context is honoured", testEnvCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t))
		})
	}
}

// baseTime has nanoseconds and a zone other than UTC, to catch stores that
// truncate or lose the instant.
var baseTime = time.Date(2026, 11, 29, 10, 11, 12, 123456789, time.FixedZone("UTC+1", 3600))

func sampleEnv(id, name, driver string) *environment.Environment {
	return &environment.Environment{
		ID:          id,
		Name:        name,
		Description: "a test environment " + name,
		Driver:      driver,
		Status:      environment.StatusActive,
		Config: config.Config{
			"host":    "build-1.example.test",
			"port":    int64(2222),
			"strict":  true,
			"timeout": "1m30s",
			"tags":    []string{"a", "b"},
			"labels":  map[string]string{"team": "core"},
			"key":     config.SecretRef{ID: "sec-" + id, Version: 3},
		},
		Env:       map[string]string{"PATH": "/usr/bin", "LANG": "C.UTF-8"},
		Metadata:  map[string]string{"owner": "ops"},
		Revision:  1,
		CreatedAt: baseTime,
		UpdatedAt: baseTime.Add(time.Microsecond + 7),
		CreatedBy: "admin-1",
		UpdatedBy: "admin-2",
	}
}

func mustCreate(t *testing.T, s environment.Store, e *environment.Environment, exclusiveDriver bool) {
	t.Helper()
	if err := s.CreateEnvironment(context.Background(), e, exclusiveDriver); err != nil {
		t.Fatalf("CreateEnvironment(%q): %v", e.ID, err)
	}
}

func mustGet(t *testing.T, s environment.Store, id string) *environment.Environment {
	t.Helper()
	e, err := s.GetEnvironment(context.Background(), id)
	if err != nil {
		t.Fatalf("GetEnvironment(%q): %v", id, err)
	}
	return e
}

// wantErr fails unless err wraps target.
func wantErr(t *testing.T, op string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one wrapping %v", op, err, target)
	}
}

// CFG-1: the record comes back as saved, and the store keeps its own copy.
func testEnvRoundTrip(t *testing.T, s environment.Store) {
	e := sampleEnv("env-1", "alpha", "ssh")
	want := sampleEnv("env-1", "alpha", "ssh")
	mustCreate(t, s, e, false)
	// Mutating the caller's value after create must not reach the store.
	e.Config["host"] = "changed"
	e.Config["labels"].(map[string]string)["team"] = "changed"
	e.Config["tags"].([]string)[0] = "changed"
	e.Env["PATH"] = "changed"
	e.Metadata["owner"] = "changed"
	e.Name = "changed"

	got := mustGet(t, s, "env-1")
	diff(t, "GetEnvironment", want, got, configAsJSON)
	// Mutating a returned value must not reach the store either.
	got.Config["host"] = "changed"
	got.Env["PATH"] = "changed"
	got.Metadata["owner"] = "changed"
	diff(t, "GetEnvironment after mutating a result", want, mustGet(t, s, "env-1"), configAsJSON)

	list, err := s.ListEnvironments(context.Background(), environment.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "ListEnvironments", []*environment.Environment{want}, list, configAsJSON)
}

func testEnvMinimalRoundTrip(t *testing.T, s environment.Store) {
	want := &environment.Environment{ID: "min", Name: "min", Driver: "local", Status: environment.StatusArchived, Revision: 1}
	mustCreate(t, s, want, false)
	got := mustGet(t, s, "min")
	diff(t, "GetEnvironment", want, got, cmpopts.EquateEmpty())
	if !got.CreatedAt.IsZero() || !got.UpdatedAt.IsZero() {
		t.Errorf("zero times came back as %v, %v", got.CreatedAt, got.UpdatedAt)
	}
}

// CFG-3: configs keep references, and the accessors read them after the
// store's encoding.
func testEnvSecretRef(t *testing.T, s environment.Store) {
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	cfg := mustGet(t, s, "env-1").Config
	ref, ok := cfg.SecretRef("key")
	if !ok {
		t.Fatalf("Config.SecretRef(%q) = _, false after a round trip; config %#v", "key", cfg["key"])
	}
	diff(t, "SecretRef", config.SecretRef{ID: "sec-env-1", Version: 3}, ref)
	type accessors struct {
		Host    string
		Port    int64
		Strict  bool
		Timeout time.Duration
		Tags    []string
		Labels  map[string]string
	}
	diff(t, "Config accessors", accessors{"build-1.example.test", 2222, true, 90 * time.Second, []string{"a", "b"}, map[string]string{"team": "core"}},
		accessors{cfg.String("host"), cfg.Int("port"), cfg.Bool("strict"), cfg.Duration("timeout"), cfg.Strings("tags"), cfg.StringMap("labels")})
}

func testEnvDuplicateID(t *testing.T, s environment.Store) {
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	err := s.CreateEnvironment(context.Background(), sampleEnv("env-1", "beta", "docker"), false)
	wantErr(t, "create with a taken id", err, errcode.ErrConflict)
	diff(t, "stored environment", sampleEnv("env-1", "alpha", "ssh"), mustGet(t, s, "env-1"), configAsJSON)
}

func testEnvDuplicateName(t *testing.T, s environment.Store) {
	mustCreate(t, s, sampleEnv("env-1", "alpha", "ssh"), false)
	err := s.CreateEnvironment(context.Background(), sampleEnv("env-2", "alpha", "docker"), false)
	wantErr(t, "create with a taken name", err, errcode.ErrConflict)
	_, err = s.GetEnvironment(context.Background(), "env-2")
	wantErr(t, "get refused environment", err, errcode.ErrNotFound)
}

func testEnvCreateRevision(t *testing.T, s environment.Store) {
	for _, rev := range []int64{0, 2} {
		e := sampleEnv("env-1", "alpha", "ssh")
		e.Revision = rev
		if err := s.CreateEnvironment(context.Background(), e, false); err == nil {
			t.Errorf("create with revision %d succeeded", rev)
		}
	}
	_, err := s.GetEnvironment(context.Background(), "env-1")
	wantErr(t, "get refused environment", err, errcode.ErrNotFound)
}

// CFG-4: one environment of an exclusive driver per instance.
func testEnvExclusive(t *testing.T, s environment.Store) {
	ctx := context.Background()
	excl := true
	mustCreate(t, s, sampleEnv("local-1", "local one", "local"), excl)
	err := s.CreateEnvironment(ctx, sampleEnv("local-2", "local two", "local"), excl)
	wantErr(t, "second exclusive create", err, errcode.ErrConflict)
	// Other drivers are not affected.
	mustCreate(t, s, sampleEnv("ssh-1", "ssh one", "ssh"), excl)
	mustCreate(t, s, sampleEnv("docker-1", "docker one", "docker"), false)
	// An exclusive create also sees environments created without the option.
	err = s.CreateEnvironment(ctx, sampleEnv("docker-2", "docker two", "docker"), excl)
	wantErr(t, "exclusive create beside a non-exclusive one", err, errcode.ErrConflict)
	// After a delete, the driver is free again.
	if err := s.DeleteEnvironment(ctx, "local-1", 1); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, sampleEnv("local-2", "local two", "local"), excl)
	list, err := s.ListEnvironments(ctx, environment.ListFilter{Driver: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "local-2" {
		t.Errorf("local environments after delete and re-create: %v", ids(list))
	}
}

// CFG-4: exclusivity is atomic, not check-then-insert.
func testEnvExclusiveConcurrent(t *testing.T, s environment.Store) {
	const n = 20
	warm(t, s, n)
	errs := race(n, func(i int) error {
		e := sampleEnv(fmt.Sprintf("local-%02d", i), fmt.Sprintf("local %02d", i), "local")
		return s.CreateEnvironment(context.Background(), e, true)
	})
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("create %d: got %v, want nil or ErrConflict", i, err)
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d concurrent exclusive creates succeeded, want exactly 1", wins, n)
	}
	list, err := s.ListEnvironments(context.Background(), environment.ListFilter{Driver: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("stored local environments: %v, want exactly one", ids(list))
	}
}

func ids(list []*environment.Environment) []string {
	out := make([]string, 0, len(list))
	for _, e := range list {
		out = append(out, e.ID)
	}
	return out
}

func testEnvList(t *testing.T, s environment.Store) {
	ctx := context.Background()
	for _, e := range []struct{ id, name, driver string }{
		{"id-c", "charlie", "ssh"},
		{"id-a", "alpha", "docker"},
		{"id-B", "Bravo", "ssh"}, // upper case sorts first in byte order
		{"id-d", "delta", "ssh"},
		{"id-e", "alpha-2", "docker"},
	} {
		env := sampleEnv(e.id, e.name, e.driver)
		if e.id == "id-d" {
			env.Status = environment.StatusArchived
		}
		mustCreate(t, s, env, false)
	}
	tests := []struct {
		filter environment.ListFilter
		want   []string
	}{
		{environment.ListFilter{}, []string{"id-B", "id-a", "id-e", "id-c", "id-d"}},
		{environment.ListFilter{Driver: "ssh"}, []string{"id-B", "id-c", "id-d"}},
		{environment.ListFilter{Status: environment.StatusArchived}, []string{"id-d"}},
		{environment.ListFilter{Driver: "ssh", Status: environment.StatusActive}, []string{"id-B", "id-c"}},
		{environment.ListFilter{Driver: "docker", Status: environment.StatusArchived}, []string{}},
		{environment.ListFilter{Driver: "nope"}, []string{}},
	}
	for _, tc := range tests {
		list, err := s.ListEnvironments(ctx, tc.filter)
		if err != nil {
			t.Fatalf("ListEnvironments(%+v): %v", tc.filter, err)
		}
		diff(t, fmt.Sprintf("ListEnvironments(%+v)", tc.filter), tc.want, ids(list))
	}
}

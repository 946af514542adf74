package environmenttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// RunBindingStoreTests runs the environment.BindingStore conformance suite
// (assignment bindings, ASG-1, ASG-5 at the store level). newStore returns a
// fresh, empty store for one subtest; it registers its own cleanup with t.
// Subtests run in parallel.
func RunBindingStoreTests(t *testing.T, newStore func(t *testing.T) environment.BindingStore) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s environment.BindingStore)
	}{
		{"put then get returns an equal copy", testBindRoundTrip},
		{"the instance default has no key and no company", testBindInstanceDefault},
		{"keys are exact: case and kind distinguish bindings", testBindKeysExact},
		{"binding keys are per company: two companies each bind workspace ws; the instance default stays one", testBindKeyPerCompany},
		{"malformed bindings are invalid and nothing is stored", testBindInvalid},
		{"inserting an existing binding is a conflict and changes nothing", testBindDuplicate},
		{"a revision that does not follow the base is a conflict", testBindRevisionSequence},
		{"replace with the right revision replaces the binding", testBindReplace},
		{"replace with a stale revision is a conflict and changes nothing", testBindReplaceStale},
		{"replacing a missing binding is not found", testBindReplaceMissing},
		{"20 concurrent inserts of one binding: exactly one wins", testBindInsertConcurrent},
		{"20 concurrent replaces from one revision: exactly one wins", testBindReplaceConcurrent},
		{"delete checks the revision", testBindDelete},
		{"list filters and sorts by kind then key", testBindList},
		{"deleting an environment's bindings removes exactly those, once", testBindDeleteEnvironment},
		{"a cancelled context is honoured", testBindCancelled},
		{"GetEnvironmentBindings answers what GetEnvironment and ListBindings answer", testBindTargetReader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t))
		})
	}
}

func sampleBinding(kind environment.BindingKind, key, company, envID string) *environment.Binding {
	b := &environment.Binding{
		BindingRef:    environment.BindingRef{Kind: kind, Company: company, Key: key},
		EnvironmentID: envID,
		Revision:      1,
		CreatedAt:     baseTime,
		UpdatedAt:     baseTime.Add(time.Microsecond + 7),
		CreatedBy:     "admin-1",
		UpdatedBy:     "admin-2",
	}
	if kind == environment.BindingInstanceDefault {
		b.Key, b.Company = "", ""
	}
	return b
}

func nextBinding(b *environment.Binding, envID string) *environment.Binding {
	n := *b
	n.EnvironmentID = envID
	n.Revision = b.Revision + 1
	n.UpdatedAt = b.UpdatedAt.Add(time.Second)
	n.UpdatedBy = "admin-3"
	return &n
}

func mustPut(t *testing.T, s environment.BindingStore, b *environment.Binding, base int64) {
	t.Helper()
	if err := s.PutBinding(context.Background(), b, base); err != nil {
		t.Fatalf("PutBinding(%s, %d): %v", b, base, err)
	}
}

func mustGetBinding(t *testing.T, s environment.BindingStore, ref environment.BindingRef) *environment.Binding {
	t.Helper()
	b, err := s.GetBinding(context.Background(), ref)
	if err != nil {
		t.Fatalf("GetBinding(%s): %v", ref, err)
	}
	return b
}

func mustList(t *testing.T, s environment.BindingStore, f environment.BindingFilter) []*environment.Binding {
	t.Helper()
	list, err := s.ListBindings(context.Background(), f)
	if err != nil {
		t.Fatalf("ListBindings(%+v): %v", f, err)
	}
	return list
}

// refsOf names each binding of list as "KIND:KEY" ("instance_default"
// for the instance default), in order.
func refsOf(list []*environment.Binding) []string {
	out := []string{}
	for _, b := range list {
		id := string(b.Kind)
		if b.Kind != environment.BindingInstanceDefault {
			id += ":" + b.Key
		}
		out = append(out, id)
	}
	return out
}

// ws is the ref of acme's workspace binding key.
func ws(key string) environment.BindingRef {
	return environment.BindingRef{Kind: environment.BindingWorkspace, Company: "acme", Key: key}
}

// ASG-1: a binding comes back as saved (times exact to the nanosecond, as
// UTC instants), and the store keeps its own copy.
func testBindRoundTrip(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingWorkspace, "ws-1", "acme", "env-1")
	want := *b
	mustPut(t, s, b, 0)
	b.EnvironmentID = "changed" // the caller's value is not the stored one
	got := mustGetBinding(t, s, ws("ws-1"))
	diff(t, "GetBinding", &want, got)
	got.EnvironmentID = "changed"
	diff(t, "GetBinding after mutating a result", &want, mustGetBinding(t, s, ws("ws-1")))
	diff(t, "ListBindings", []*environment.Binding{&want}, mustList(t, s, environment.BindingFilter{}))
}

func testBindInstanceDefault(t *testing.T, s environment.BindingStore) {
	want := sampleBinding(environment.BindingInstanceDefault, "", "", "env-1")
	mustPut(t, s, want, 0)
	got := mustGetBinding(t, s, environment.BindingRef{Kind: environment.BindingInstanceDefault})
	diff(t, "GetBinding(instance default)", want, got)
	second := sampleBinding(environment.BindingInstanceDefault, "", "", "env-2")
	wantErr(t, "second instance default", s.PutBinding(context.Background(), second, 0), errcode.ErrConflict)
	diff(t, "instance default after a refused second one", want,
		mustGetBinding(t, s, environment.BindingRef{Kind: environment.BindingInstanceDefault}))
}

func testBindKeysExact(t *testing.T, s environment.BindingStore) {
	mustPut(t, s, sampleBinding(environment.BindingWorkspace, "ws-1", "acme", "env-1"), 0)
	mustPut(t, s, sampleBinding(environment.BindingWorkspace, "WS-1", "acme", "env-2"), 0)
	mustPut(t, s, sampleBinding(environment.BindingProject, "ws-1", "acme", "env-3"), 0)
	for ref, env := range map[environment.BindingRef]string{
		ws("ws-1"): "env-1", ws("WS-1"): "env-2", {Kind: environment.BindingProject, Company: "acme", Key: "ws-1"}: "env-3",
	} {
		if got := mustGetBinding(t, s, ref).EnvironmentID; got != env {
			t.Errorf("GetBinding(%s).EnvironmentID = %q, want %q", ref, got, env)
		}
	}
	_, err := s.GetBinding(context.Background(), ws("ws-1 "))
	wantErr(t, "get with a trailing space", err, errcode.ErrNotFound)
	_, err = s.GetBinding(context.Background(), environment.BindingRef{Kind: environment.BindingAgent, Company: "acme", Key: "ws-1"})
	wantErr(t, "get of another kind", err, errcode.ErrNotFound)
}

// Issue 51: a binding is identified by (kind, company, key). Two companies
// bind one workspace key independently, each reads, replaces and deletes
// its own; a company's second binding of the key is still a conflict.
func testBindKeyPerCompany(t *testing.T, s environment.BindingStore) {
	ctx := context.Background()
	acme := sampleBinding(environment.BindingWorkspace, "ws", "acme", "env-a")
	globex := sampleBinding(environment.BindingWorkspace, "ws", "globex", "env-g")
	mustPut(t, s, acme, 0)
	mustPut(t, s, globex, 0)
	diff(t, "acme's ws", acme, mustGetBinding(t, s, acme.BindingRef))
	diff(t, "globex's ws", globex, mustGetBinding(t, s, globex.BindingRef))
	_, err := s.GetBinding(ctx, environment.BindingRef{Kind: environment.BindingWorkspace, Company: "initech", Key: "ws"})
	wantErr(t, "a third company's ws", err, errcode.ErrNotFound)
	wantErr(t, "acme's ws again", s.PutBinding(ctx, sampleBinding(environment.BindingWorkspace, "ws", "acme", "env-x"), 0), errcode.ErrConflict)
	n := nextBinding(globex, "env-g2")
	mustPut(t, s, n, 1)
	diff(t, "acme's ws after globex's replace", acme, mustGetBinding(t, s, acme.BindingRef))
	if err := s.DeleteBinding(ctx, acme.BindingRef, 1); err != nil {
		t.Fatalf("delete acme's ws: %v", err)
	}
	diff(t, "globex's ws after acme's delete", n, mustGetBinding(t, s, globex.BindingRef))
	diff(t, "globex's bindings", []*environment.Binding{n}, mustList(t, s, environment.BindingFilter{Company: "globex"}))
	mustPut(t, s, acme, 0)
	diff(t, "every ws, by company", []*environment.Binding{acme, n}, mustList(t, s, environment.BindingFilter{Kind: environment.BindingWorkspace}))
	mustPut(t, s, sampleBinding(environment.BindingInstanceDefault, "", "", "env-1"), 0)
	wantErr(t, "a second instance default", s.PutBinding(ctx, sampleBinding(environment.BindingInstanceDefault, "", "", "env-2"), 0), errcode.ErrConflict)
}

func testBindInvalid(t *testing.T, s environment.BindingStore) {
	bad := map[string]*environment.Binding{
		"unknown kind":                   sampleBinding("team", "t-1", "acme", "env-1"),
		"workspace without key":          sampleBinding(environment.BindingWorkspace, "", "acme", "env-1"),
		"workspace without company":      sampleBinding(environment.BindingWorkspace, "ws-1", "", "env-1"),
		"no environment":                 sampleBinding(environment.BindingAgent, "a-1", "acme", ""),
		"key with a control character":   sampleBinding(environment.BindingProject, "p\n1", "acme", "env-1"),
		"instance default with a key":    {BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault, Key: "x"}, EnvironmentID: "env-1", Revision: 1},
		"instance default with company":  {BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault, Company: "acme"}, EnvironmentID: "env-1", Revision: 1},
		"nil binding is refused as such": nil,
	}
	for name, b := range bad {
		wantErr(t, name, s.PutBinding(context.Background(), b, 0), errcode.ErrInvalid)
	}
	if list := mustList(t, s, environment.BindingFilter{}); len(list) != 0 {
		t.Errorf("invalid puts stored %v", refsOf(list))
	}
}

func testBindDuplicate(t *testing.T, s environment.BindingStore) {
	want := sampleBinding(environment.BindingAgent, "agent-1", "acme", "env-1")
	mustPut(t, s, want, 0)
	wantErr(t, "duplicate insert", s.PutBinding(context.Background(), sampleBinding(environment.BindingAgent, "agent-1", "acme", "env-2"), 0), errcode.ErrConflict)
	diff(t, "binding after a refused duplicate", want, mustGetBinding(t, s, want.BindingRef))
}

func testBindRevisionSequence(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingProject, "p-1", "acme", "env-1")
	b.Revision = 2
	wantErr(t, "insert at revision 2", s.PutBinding(context.Background(), b, 0), errcode.ErrConflict)
	b.Revision = 1
	mustPut(t, s, b, 0)
	n := nextBinding(b, "env-2")
	n.Revision = 3
	wantErr(t, "replace skipping a revision", s.PutBinding(context.Background(), n, 1), errcode.ErrConflict)
	diff(t, "binding after refused puts", b, mustGetBinding(t, s, b.BindingRef))
}

func testBindReplace(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingProject, "p-1", "acme", "env-1")
	mustPut(t, s, b, 0)
	n := nextBinding(b, "env-2")
	mustPut(t, s, n, 1)
	diff(t, "binding after replace", n, mustGetBinding(t, s, b.BindingRef))
	n3 := nextBinding(n, "env-3")
	mustPut(t, s, n3, 2)
	diff(t, "binding after a second replace", n3, mustGetBinding(t, s, b.BindingRef))
}

func testBindReplaceStale(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingProject, "p-1", "acme", "env-1")
	mustPut(t, s, b, 0)
	n := nextBinding(b, "env-2")
	mustPut(t, s, n, 1)
	stale := nextBinding(b, "env-3") // based on revision 1 again
	wantErr(t, "stale replace", s.PutBinding(context.Background(), stale, 1), errcode.ErrConflict)
	diff(t, "binding after a stale replace", n, mustGetBinding(t, s, b.BindingRef))
}

func testBindReplaceMissing(t *testing.T, s environment.BindingStore) {
	b := nextBinding(sampleBinding(environment.BindingAgent, "a-1", "acme", "env-1"), "env-2")
	wantErr(t, "replace of a missing binding", s.PutBinding(context.Background(), b, 1), errcode.ErrNotFound)
	if list := mustList(t, s, environment.BindingFilter{}); len(list) != 0 {
		t.Errorf("replace of a missing binding stored %v", refsOf(list))
	}
}

func countWins(t *testing.T, errs []error) int {
	t.Helper()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("writer %d: got %v, want success or a conflict", i, err)
		}
	}
	return wins
}

func testBindInsertConcurrent(t *testing.T, s environment.BindingStore) {
	errs := race(20, func(i int) error {
		return s.PutBinding(context.Background(), sampleBinding(environment.BindingWorkspace, "ws-1", "acme", fmt.Sprintf("env-%d", i)), 0)
	})
	if wins := countWins(t, errs); wins != 1 {
		t.Fatalf("%d inserts won, want exactly 1", wins)
	}
	got := mustGetBinding(t, s, ws("ws-1"))
	for i, err := range errs {
		if err == nil && got.EnvironmentID != fmt.Sprintf("env-%d", i) {
			t.Errorf("stored binding points at %q, but insert %d won", got.EnvironmentID, i)
		}
	}
}

func testBindReplaceConcurrent(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingWorkspace, "ws-1", "acme", "env-0")
	mustPut(t, s, b, 0)
	errs := race(20, func(i int) error {
		return s.PutBinding(context.Background(), nextBinding(b, fmt.Sprintf("env-%d", i+1)), 1)
	})
	if wins := countWins(t, errs); wins != 1 {
		t.Fatalf("%d replaces won, want exactly 1", wins)
	}
	got := mustGetBinding(t, s, ws("ws-1"))
	if got.Revision != 2 {
		t.Errorf("revision after the race = %d, want 2", got.Revision)
	}
	for i, err := range errs {
		if err == nil && got.EnvironmentID != fmt.Sprintf("env-%d", i+1) {
			t.Errorf("stored binding points at %q, but replace %d won", got.EnvironmentID, i)
		}
	}
}

func testBindDelete(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingAgent, "a-1", "acme", "env-1")
	mustPut(t, s, b, 0)
	mustPut(t, s, nextBinding(b, "env-2"), 1)
	ctx := context.Background()
	wantErr(t, "delete with a stale revision", s.DeleteBinding(ctx, b.BindingRef, 1), errcode.ErrConflict)
	mustGetBinding(t, s, b.BindingRef)
	if err := s.DeleteBinding(ctx, b.BindingRef, 2); err != nil {
		t.Fatalf("DeleteBinding at the stored revision: %v", err)
	}
	_, err := s.GetBinding(ctx, b.BindingRef)
	wantErr(t, "get after delete", err, errcode.ErrNotFound)
	wantErr(t, "delete again", s.DeleteBinding(ctx, b.BindingRef, 2), errcode.ErrNotFound)
}

func listFixture(t *testing.T, s environment.BindingStore) {
	t.Helper()
	for _, b := range []*environment.Binding{
		sampleBinding(environment.BindingWorkspace, "ws-b", "acme", "env-1"),
		sampleBinding(environment.BindingWorkspace, "ws-a", "globex", "env-2"),
		sampleBinding(environment.BindingWorkspace, "Ws-c", "acme", "env-1"),
		sampleBinding(environment.BindingProject, "p-1", "acme", "env-2"),
		sampleBinding(environment.BindingAgent, "a-1", "globex", "env-1"),
		sampleBinding(environment.BindingInstanceDefault, "", "", "env-1"),
	} {
		mustPut(t, s, b, 0)
	}
}

func testBindList(t *testing.T, s environment.BindingStore) {
	listFixture(t, s)
	tests := []struct {
		f    environment.BindingFilter
		want []string
	}{
		{environment.BindingFilter{}, []string{"agent:a-1", "instance_default", "project:p-1", "workspace:Ws-c", "workspace:ws-a", "workspace:ws-b"}},
		{environment.BindingFilter{EnvironmentID: "env-1"}, []string{"agent:a-1", "instance_default", "workspace:Ws-c", "workspace:ws-b"}},
		{environment.BindingFilter{Company: "acme"}, []string{"project:p-1", "workspace:Ws-c", "workspace:ws-b"}},
		{environment.BindingFilter{Kind: environment.BindingWorkspace, Company: "acme", EnvironmentID: "env-1"}, []string{"workspace:Ws-c", "workspace:ws-b"}},
		{environment.BindingFilter{EnvironmentID: "env-9"}, []string{}},
	}
	for _, tc := range tests {
		diff(t, fmt.Sprintf("ListBindings(%+v)", tc.f), tc.want, refsOf(mustList(t, s, tc.f)))
	}
}

// ASG-5: the clear behind Catalog.Delete.
func testBindDeleteEnvironment(t *testing.T, s environment.BindingStore) {
	listFixture(t, s)
	ctx := context.Background()
	n, err := s.DeleteEnvironmentBindings(ctx, "env-1")
	if err != nil {
		t.Fatalf("DeleteEnvironmentBindings: %v", err)
	}
	if n != 4 {
		t.Errorf("DeleteEnvironmentBindings removed %d, want 4", n)
	}
	diff(t, "bindings left", []string{"project:p-1", "workspace:ws-a"}, refsOf(mustList(t, s, environment.BindingFilter{})))
	n, err = s.DeleteEnvironmentBindings(ctx, "env-1")
	if err != nil || n != 0 {
		t.Errorf("second DeleteEnvironmentBindings = %d, %v; want 0, nil", n, err)
	}
}

func testBindCancelled(t *testing.T, s environment.BindingStore) {
	b := sampleBinding(environment.BindingWorkspace, "ws-1", "acme", "env-1")
	mustPut(t, s, b, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wantErr(t, "put", s.PutBinding(ctx, sampleBinding(environment.BindingWorkspace, "ws-2", "acme", "env-1"), 0), context.Canceled)
	_, err := s.GetBinding(ctx, b.BindingRef)
	wantErr(t, "get", err, context.Canceled)
	_, err = s.ListBindings(ctx, environment.BindingFilter{})
	wantErr(t, "list", err, context.Canceled)
	wantErr(t, "delete", s.DeleteBinding(ctx, b.BindingRef, 1), context.Canceled)
	_, err = s.DeleteEnvironmentBindings(ctx, "env-1")
	wantErr(t, "delete environment bindings", err, context.Canceled)
	diff(t, "bindings after cancelled calls", []string{"workspace:ws-1"}, refsOf(mustList(t, s, environment.BindingFilter{})))
}

// targetReader is the optional method of a value that is both the
// environment.Store and the environment.BindingStore (see
// environment.BindingStore).
type targetReader interface {
	GetEnvironmentBindings(ctx context.Context, id string) (*environment.Environment, []*environment.Binding, error)
}

// A store that is also the environment.Store and has
// GetEnvironmentBindings (the SQL stores) reads an environment and its
// bindings in one read; it must answer what the two reads answer.
func testBindTargetReader(t *testing.T, s environment.BindingStore) {
	tr, ok := s.(targetReader)
	envs, isStore := s.(environment.Store)
	if !ok || !isStore {
		t.Skip("the binding store is not also an environment.Store with GetEnvironmentBindings")
	}
	ctx := context.Background()
	for _, id := range []string{"env-1", "env-2", "env-3"} {
		mustCreate(t, envs, sampleEnv(id, "name-"+id, "ssh"), false)
	}
	listFixture(t, s) // bindings of env-1 and env-2; env-3 has none
	for _, id := range []string{"env-1", "env-2", "env-3"} {
		env, bs, err := tr.GetEnvironmentBindings(ctx, id)
		if err != nil {
			t.Fatalf("GetEnvironmentBindings(%q): %v", id, err)
		}
		diff(t, "GetEnvironmentBindings("+id+") environment", mustGet(t, envs, id), env)
		want := mustList(t, s, environment.BindingFilter{EnvironmentID: id})
		if len(want) == 0 && len(bs) == 0 {
			continue
		}
		diff(t, "GetEnvironmentBindings("+id+") bindings", want, bs)
	}
	if env, bs, err := tr.GetEnvironmentBindings(ctx, "env-9"); !errors.Is(err, errcode.ErrNotFound) || env != nil || len(bs) != 0 {
		t.Errorf("GetEnvironmentBindings of a missing environment = %v, %v, %v; want ErrNotFound and nothing", env, bs, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := tr.GetEnvironmentBindings(cctx, "env-1"); !errors.Is(err, context.Canceled) {
		t.Errorf("GetEnvironmentBindings with a cancelled context = %v, want context.Canceled", err)
	}
}

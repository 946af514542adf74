// Package workspacetest is the conformance suite of the workspace
// package's Store: the memory store and the SQL stores (SQLite,
// PostgreSQL) pass it.
//
//	workspacetest.RunStoreTests(t, func(t *testing.T) workspace.Store { return store.Memory().Workspaces })
//
// workspace.Store is sealed: the suite checks berth's own stores.
package workspacetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/workspace"
)

// records is the store inside a workspace.Store.
type records = workspacehook.Records[*workspace.Workspace]

// RunStoreTests runs the suite; newStore returns a fresh, empty store for
// each subtest.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) workspace.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s records)
	}{
		{"insert then get returns an equal deep copy", testRoundTrip},
		{"an insert is write-ahead: preparing at revision 1", testInsertWriteAhead},
		{"invalid records are refused and nothing is stored", testInvalid},
		{"a taken id is a conflict and changes nothing", testDuplicate},
		{"one live record per owner's key; ended ones stay as history", testOneLive},
		{"another company or project never finds the record by its key", testCrossOwner},
		{"list filters by owner, lease and state, by creation time", testList},
		{"update checks the revision, the owner and the state's order", testUpdate},
		{"an ended record is final", testEndedFinal},
		{"10 concurrent inserts of one key: exactly one wins", testInsertConcurrent},
		{"10 concurrent updates from one revision: exactly one wins", testUpdateConcurrent},
		{"a cancelled context is honoured", testCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, workspacehook.Unseal(newStore(t)).(records))
		})
	}
}

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 123456789, time.UTC)

// record returns a valid preparing record of company c, project p, key k.
func record(id, c, p, k string) *workspace.Workspace {
	return &workspace.Workspace{
		ID: id, Company: c, Project: p, Key: k,
		Source:    workspace.Source{Kind: workspace.SourceGit, Location: "https://git.example.com/acme/app.git", Ref: "main"},
		Lease:     "lease-" + id,
		Dir:       "/work/.berth/ws/" + k,
		State:     workspace.StatePreparing,
		CreatedAt: t0, UpdatedAt: t0, Revision: 1,
	}
}

// next returns a copy of w one revision on, in state s.
func next(w *workspace.Workspace, s workspace.State) *workspace.Workspace {
	c := *w
	c.Revision++
	c.State = s
	c.UpdatedAt = w.UpdatedAt.Add(time.Second)
	if s == workspace.StateReady && c.Checkpoint == (workspace.Checkpoint{}) {
		c.Checkpoint = workspace.Checkpoint{Commit: "0123456789abcdef0123456789abcdef01234567"}
	}
	if s == workspace.StateEnded {
		c.End = &workspace.End{Reason: workspace.EndReleased, Outcome: workspace.OutcomeClean, At: c.UpdatedAt}
	}
	return &c
}

func mustInsert(t *testing.T, s records, w *workspace.Workspace) {
	t.Helper()
	if err := s.InsertWorkspace(context.Background(), w); err != nil {
		t.Fatalf("InsertWorkspace(%s): %v", w.ID, err)
	}
}

func mustUpdate(t *testing.T, s records, w *workspace.Workspace) {
	t.Helper()
	if err := s.UpdateWorkspace(context.Background(), w); err != nil {
		t.Fatalf("UpdateWorkspace(%s, revision %d, %s): %v", w.ID, w.Revision, w.State, err)
	}
}

func mustGet(t *testing.T, s records, id string) *workspace.Workspace {
	t.Helper()
	w, err := s.GetWorkspace(context.Background(), id)
	if err != nil {
		t.Fatalf("GetWorkspace(%s): %v", id, err)
	}
	return w
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want an error wrapping %v", what, err, want)
	}
}

func ids(ws []*workspace.Workspace) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

func testRoundTrip(t *testing.T, s records) {
	w := record("w1", "acme", "app", "main-1")
	mustInsert(t, s, w)
	w.Key = "changed after insert"
	got := mustGet(t, s, "w1")
	want := record("w1", "acme", "app", "main-1")
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("GetWorkspace (-want +got):\n%s", d)
	}
	// Every field survives, the receipt included.
	r := next(got, workspace.StateReady)
	r.Checkpoint = workspace.Checkpoint{Commit: "0123456789abcdef0123456789abcdef01234567", Tree: "sha256:" + fmt.Sprintf("%064x", 7)}
	mustUpdate(t, s, r)
	e := next(r, workspace.StateEnded)
	e.End = &workspace.End{Reason: workspace.EndReprepared, Outcome: workspace.OutcomeIndeterminate, Detail: "the tree hash did not match", At: e.UpdatedAt}
	mustUpdate(t, s, e)
	got = mustGet(t, s, "w1")
	if d := cmp.Diff(e, got); d != "" {
		t.Fatalf("GetWorkspace after end (-want +got):\n%s", d)
	}
	got.End.Detail = "mutated"
	if again := mustGet(t, s, "w1"); again.End.Detail != e.End.Detail {
		t.Errorf("a returned record shares its receipt with the store: %q", again.End.Detail)
	}
}

func testInsertWriteAhead(t *testing.T, s records) {
	r := next(record("w1", "acme", "app", "k"), workspace.StateReady)
	r.Revision = 1
	wantErr(t, "insert of a ready record", s.InsertWorkspace(context.Background(), r), errcode.ErrInvalid)
	w := record("w2", "acme", "app", "k")
	w.Revision = 2
	wantErr(t, "insert at revision 2", s.InsertWorkspace(context.Background(), w), errcode.ErrInvalid)
	_, err := s.GetWorkspace(context.Background(), "w1")
	wantErr(t, "get after refused inserts", err, errcode.ErrNotFound)
}

func testInvalid(t *testing.T, s records) {
	for name, mutate := range map[string]func(w *workspace.Workspace){
		"no id":                 func(w *workspace.Workspace) { w.ID = "" },
		"no company":            func(w *workspace.Workspace) { w.Company = "" },
		"a key with a slash":    func(w *workspace.Workspace) { w.Key = "../etc" },
		"a key of dot-dot":      func(w *workspace.Workspace) { w.Key = ".." },
		"no lease":              func(w *workspace.Workspace) { w.Lease = "" },
		"a relative directory":  func(w *workspace.Workspace) { w.Dir = "ws/k" },
		"the root directory":    func(w *workspace.Workspace) { w.Dir = "/" },
		"an unclean directory":  func(w *workspace.Workspace) { w.Dir = "/work/../etc" },
		"an unknown source":     func(w *workspace.Workspace) { w.Source.Kind = "ftp" },
		"a password in the URL": func(w *workspace.Workspace) { w.Source.Location = "ssh://git:hunter2@git.example.com/app.git" },
		"a token in the URL":    func(w *workspace.Workspace) { w.Source.Location = "https://ghp_secret@github.com/acme/app.git" },
		"a ref on a directory": func(w *workspace.Workspace) {
			w.Source = workspace.Source{Kind: workspace.SourceDir, Location: "/src", Ref: "main"}
		},
		"a short commit":        func(w *workspace.Workspace) { w.Checkpoint.Commit = "abc123" },
		"a tree without sha256": func(w *workspace.Workspace) { w.Checkpoint.Tree = fmt.Sprintf("%064x", 1) },
		"a receipt while live": func(w *workspace.Workspace) {
			w.End = &workspace.End{Reason: workspace.EndSwept, Outcome: workspace.OutcomeClean}
		},
	} {
		w := record("w-"+name, "acme", "app", "k")
		mutate(w)
		wantErr(t, "insert with "+name, s.InsertWorkspace(context.Background(), w), errcode.ErrInvalid)
	}
	mustInsert(t, s, record("ok", "acme", "app", "k"))
	got := mustGet(t, s, "ok")
	for name, w := range map[string]*workspace.Workspace{
		"ready without a checkpoint": func() *workspace.Workspace {
			r := next(got, workspace.StateReady)
			r.Checkpoint = workspace.Checkpoint{}
			return r
		}(),
		"ended without a receipt": func() *workspace.Workspace { e := next(got, workspace.StateEnded); e.End = nil; return e }(),
		"an unknown end reason": func() *workspace.Workspace {
			e := next(got, workspace.StateEnded)
			e.End.Reason = "vanished"
			return e
		}(),
		"an unknown state": func() *workspace.Workspace { e := next(got, "paused"); return e }(),
	} {
		wantErr(t, "update to "+name, s.UpdateWorkspace(context.Background(), w), errcode.ErrInvalid)
	}
	if w := mustGet(t, s, "ok"); w.Revision != 1 || w.State != workspace.StatePreparing {
		t.Errorf("after refused updates: revision %d, state %s; want 1, preparing", w.Revision, w.State)
	}
	all, err := s.ListWorkspaces(context.Background(), workspacehook.Filter{})
	if err != nil || len(all) != 1 {
		t.Errorf("ListWorkspaces = %v, %v; want only the valid record", ids(all), err)
	}
}

func testDuplicate(t *testing.T, s records) {
	mustInsert(t, s, record("w1", "acme", "app", "k1"))
	dup := record("w1", "other", "x", "k2")
	wantErr(t, "insert of a taken id", s.InsertWorkspace(context.Background(), dup), errcode.ErrConflict)
	if got := mustGet(t, s, "w1"); got.Company != "acme" || got.Key != "k1" {
		t.Errorf("the taken id now holds %s/%s", got.Company, got.Key)
	}
}

func testOneLive(t *testing.T, s records) {
	ctx := context.Background()
	w := record("w1", "acme", "app", "k")
	mustInsert(t, s, w)
	wantErr(t, "a second live record of the key", s.InsertWorkspace(ctx, record("w2", "acme", "app", "k")), errcode.ErrConflict)
	r := next(w, workspace.StateReady)
	mustUpdate(t, s, r)
	wantErr(t, "a second record while the first is ready", s.InsertWorkspace(ctx, record("w2", "acme", "app", "k")), errcode.ErrConflict)
	e := next(r, workspace.StateEnded)
	e.End.Reason = workspace.EndReprepared
	mustUpdate(t, s, e)
	mustInsert(t, s, record("w2", "acme", "app", "k")) // re-prepared as a new record
	got, err := s.FindWorkspace(ctx, "acme", "app", "k")
	if err != nil || got.ID != "w2" {
		t.Fatalf("FindWorkspace after a re-prepare = %v, %v; want w2", got, err)
	}
	if old := mustGet(t, s, "w1"); old.State != workspace.StateEnded || old.End == nil || old.End.Reason != workspace.EndReprepared {
		t.Errorf("the ended record is %s with receipt %+v; want ended, reprepared", old.State, old.End)
	}
	all, err := s.ListWorkspaces(ctx, workspacehook.Filter{Company: "acme", Project: "app"})
	if err != nil || cmp.Diff([]string{"w1", "w2"}, ids(all)) != "" {
		t.Errorf("ListWorkspaces = %v, %v; want [w1 w2]", ids(all), err)
	}
}

func testCrossOwner(t *testing.T, s records) {
	ctx := context.Background()
	mustInsert(t, s, record("acme-app", "acme", "app", "k"))
	for _, o := range []struct{ company, project string }{
		{"globex", "app"}, // another company, same project name
		{"acme", "web"},   // another project of the company
		{"acme", ""},      // no project
		{"", "app"},       // no company
		{"ACME", "app"},   // names are exact
	} {
		if got, err := s.FindWorkspace(ctx, o.company, o.project, "k"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("FindWorkspace(%q, %q, k) = %v, %v; want not found (another owner's record)", o.company, o.project, got, err)
		}
		if got, err := s.ListWorkspaces(ctx, workspacehook.Filter{Company: o.company, Project: o.project}); err != nil || (o.company != "" && len(got) != 0) {
			t.Errorf("ListWorkspaces(%q, %q) = %v, %v; want none", o.company, o.project, ids(got), err)
		}
	}
	// The same key under other owners is their own, live beside it.
	mustInsert(t, s, record("globex-app", "globex", "app", "k"))
	mustInsert(t, s, record("acme-web", "acme", "web", "k"))
	mustInsert(t, s, record("acme-none", "acme", "", "k"))
	for _, o := range []struct{ company, project, want string }{
		{"acme", "app", "acme-app"}, {"globex", "app", "globex-app"}, {"acme", "web", "acme-web"}, {"acme", "", "acme-none"},
	} {
		got, err := s.FindWorkspace(ctx, o.company, o.project, "k")
		if err != nil || got.ID != o.want {
			t.Errorf("FindWorkspace(%q, %q, k) = %v, %v; want %s", o.company, o.project, got, err, o.want)
		}
		list, err := s.ListWorkspaces(ctx, workspacehook.Filter{Company: o.company, Project: o.project})
		if err != nil || cmp.Diff([]string{o.want}, ids(list)) != "" {
			t.Errorf("ListWorkspaces(%q, %q) = %v, %v; want [%s]", o.company, o.project, ids(list), err, o.want)
		}
	}
}

func testList(t *testing.T, s records) {
	ctx := context.Background()
	for i, w := range []*workspace.Workspace{
		record("c", "acme", "app", "k1"),
		record("a", "acme", "app", "k2"),
		record("b", "acme", "app", "k3"),
		record("d", "globex", "app", "k1"),
	} {
		w.CreatedAt = t0.Add(time.Duration(i%3) * time.Minute) // c and d first, by id
		w.UpdatedAt = w.CreatedAt
		mustInsert(t, s, w)
	}
	mustUpdate(t, s, next(mustGet(t, s, "a"), workspace.StateReady))
	b := mustGet(t, s, "b")
	b.Lease, b.Revision = "shared", 2
	mustUpdate(t, s, b)
	d := mustGet(t, s, "d")
	d.Lease, d.Revision = "shared", 2
	mustUpdate(t, s, d)
	for _, tc := range []struct {
		f    workspacehook.Filter
		want []string
	}{
		{workspacehook.Filter{}, []string{"c", "d", "a", "b"}},
		{workspacehook.Filter{Company: "acme", Project: "app"}, []string{"c", "a", "b"}},
		{workspacehook.Filter{Company: "acme"}, []string{}},
		{workspacehook.Filter{Lease: "shared"}, []string{"d", "b"}},
		{workspacehook.Filter{State: string(workspace.StatePreparing)}, []string{"c", "d", "b"}},
		{workspacehook.Filter{Company: "acme", Project: "app", State: string(workspace.StateReady)}, []string{"a"}},
		{workspacehook.Filter{Company: "globex", Project: "app", Lease: "shared"}, []string{"d"}},
	} {
		got, err := s.ListWorkspaces(ctx, tc.f)
		if err != nil {
			t.Fatalf("ListWorkspaces(%+v): %v", tc.f, err)
		}
		if d := cmp.Diff(tc.want, ids(got)); d != "" {
			t.Errorf("ListWorkspaces(%+v) (-want +got):\n%s", tc.f, d)
		}
	}
}

func testUpdate(t *testing.T, s records) {
	ctx := context.Background()
	w := record("w1", "acme", "app", "k")
	mustInsert(t, s, w)
	stale := next(w, workspace.StatePreparing)
	stale.Revision = 3
	wantErr(t, "an update skipping a revision", s.UpdateWorkspace(ctx, stale), errcode.ErrConflict)
	missing := next(record("nope", "acme", "app", "k2"), workspace.StateReady)
	wantErr(t, "an update of a missing record", s.UpdateWorkspace(ctx, missing), errcode.ErrNotFound)
	for name, mutate := range map[string]func(w *workspace.Workspace){
		"another company":       func(w *workspace.Workspace) { w.Company = "globex" },
		"another project":       func(w *workspace.Workspace) { w.Project = "web" },
		"another key":           func(w *workspace.Workspace) { w.Key = "k2" },
		"another creation time": func(w *workspace.Workspace) { w.CreatedAt = t0.Add(time.Hour) },
	} {
		u := next(w, workspace.StatePreparing)
		mutate(u)
		wantErr(t, "an update to "+name, s.UpdateWorkspace(ctx, u), errcode.ErrConflict)
	}
	p := next(w, workspace.StatePreparing) // preparing stays preparing (progress)
	p.Lease = "lease-2"
	mustUpdate(t, s, p)
	wantErr(t, "a second update from the same revision", s.UpdateWorkspace(ctx, next(w, workspace.StateReady)), errcode.ErrConflict)
	r := next(p, workspace.StateReady)
	mustUpdate(t, s, r)
	back := next(r, workspace.StatePreparing)
	back.Checkpoint = workspace.Checkpoint{}
	wantErr(t, "ready back to preparing", s.UpdateWorkspace(ctx, back), errcode.ErrConflict)
	r2 := next(r, workspace.StateReady) // ready stays ready (a new checkpoint)
	r2.Checkpoint = workspace.Checkpoint{Tree: "sha256:" + fmt.Sprintf("%064x", 9)}
	mustUpdate(t, s, r2)
	if got := mustGet(t, s, "w1"); got.Revision != 4 || got.Lease != "lease-2" || got.Checkpoint != r2.Checkpoint {
		t.Errorf("after updates: revision %d, lease %s, checkpoint %+v", got.Revision, got.Lease, got.Checkpoint)
	}
}

func testEndedFinal(t *testing.T, s records) {
	ctx := context.Background()
	w := record("w1", "acme", "app", "k")
	mustInsert(t, s, w)
	e := next(w, workspace.StateEnded) // a crash during prepare, swept
	e.End = &workspace.End{Reason: workspace.EndSwept, Outcome: workspace.OutcomeIndeterminate, Detail: "berth stopped while preparing it", At: e.UpdatedAt}
	mustUpdate(t, s, e)
	again := next(e, workspace.StateEnded)
	again.End.Reason = workspace.EndReleased
	wantErr(t, "an update of an ended record", s.UpdateWorkspace(ctx, again), errcode.ErrConflict)
	ready := next(e, workspace.StateReady)
	ready.End = nil
	wantErr(t, "an ended record made ready", s.UpdateWorkspace(ctx, ready), errcode.ErrConflict)
	if got := mustGet(t, s, "w1"); got.End == nil || got.End.Reason != workspace.EndSwept || got.Revision != 2 {
		t.Errorf("the ended record changed: %+v", got)
	}
	if _, err := s.FindWorkspace(ctx, "acme", "app", "k"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("FindWorkspace of an ended key: %v, want not found", err)
	}
}

func testInsertConcurrent(t *testing.T, s records) {
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.InsertWorkspace(context.Background(), record(fmt.Sprintf("w%d", i), "acme", "app", "k"))
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("a losing insert: %v, want a conflict", err)
		}
	}
	all, err := s.ListWorkspaces(context.Background(), workspacehook.Filter{Company: "acme", Project: "app"})
	if won != 1 || err != nil || len(all) != 1 {
		t.Errorf("%d inserts won, %d records stored (%v); want one", won, len(all), err)
	}
}

func testUpdateConcurrent(t *testing.T, s records) {
	const n = 10
	w := record("w1", "acme", "app", "k")
	mustInsert(t, s, w)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			u := next(w, workspace.StateReady)
			u.Lease = fmt.Sprintf("lease-%d", i)
			errs[i] = s.UpdateWorkspace(context.Background(), u)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("updates %d and %d both won", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, errcode.ErrConflict):
			t.Errorf("a losing update: %v, want a conflict", err)
		}
	}
	if won < 0 {
		t.Fatal("no update won")
	}
	if got := mustGet(t, s, "w1"); got.Revision != 2 || got.Lease != fmt.Sprintf("lease-%d", won) {
		t.Errorf("stored revision %d, lease %s; want 2, the winner's lease-%d", got.Revision, got.Lease, won)
	}
}

func testCancelled(t *testing.T, s records) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.InsertWorkspace(ctx, record("w1", "acme", "app", "k")); err == nil {
		t.Error("InsertWorkspace with a cancelled context succeeded")
	}
	if _, err := s.ListWorkspaces(ctx, workspacehook.Filter{}); err == nil {
		t.Error("ListWorkspaces with a cancelled context succeeded")
	}
}

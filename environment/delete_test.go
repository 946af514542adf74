package environment_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/google/go-cmp/cmp"
)

// usageTable is a UsageReporter over a fixed table, standing in for the
// lease and image-setup layers (which implement the interface in their own
// packages).
type usageTable struct {
	usage map[string]environment.Usage
	err   error
}

func (u *usageTable) EnvironmentUsage(_ context.Context, envID string) (environment.Usage, error) {
	return u.usage[envID], u.err
}

// bindingTable is a UsageReporter that owns references (bindings) and
// clears them, like the assignment layer.
type bindingTable struct {
	mu       sync.Mutex
	bindings map[string][]environment.Reference
	clearErr error
}

func (b *bindingTable) EnvironmentUsage(_ context.Context, envID string) (environment.Usage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return environment.Usage{Assignments: b.bindings[envID]}, nil
}

func (b *bindingTable) ClearEnvironment(_ context.Context, envID string) error {
	if b.clearErr != nil {
		return b.clearErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.bindings, envID)
	return nil
}

var _ environment.ReferenceClearer = (*bindingTable)(nil)

// TestDelete (CFG-7): the blast radius lists bindings and defaults, active,
// reusable and pending-cleanup leases and setup sessions; a delete is refused
// while a reusable lease is live, while cleanup is pending or for a protected
// environment; otherwise it deletes the record and its secrets and clears
// every binding.
func TestDelete(t *testing.T) {
	t.Parallel()
	ref := func(kind, id string) environment.Reference {
		return environment.Reference{Kind: kind, ID: id, Company: "acme"}
	}
	bindings := []environment.Reference{ref("binding", "workspace:ws_1"), ref("binding", "instance-default")}
	tests := []struct {
		name      string
		usage     environment.Usage
		protected string
		blockers  []string
	}{
		{"unused", environment.Usage{}, "", nil},
		{"active ephemeral lease and setup session do not block",
			environment.Usage{ActiveLeases: []environment.Reference{ref("lease", "lease_1")}, SetupSessions: []environment.Reference{ref("setup_session", "ss_1")}}, "", nil},
		{"reusable lease blocks",
			environment.Usage{ReusableLeases: []environment.Reference{ref("lease", "lease_r1"), ref("lease", "lease_r2")}}, "",
			[]string{"2 reusable lease(s) live: lease_r1, lease_r2"}},
		{"pending cleanup blocks",
			environment.Usage{PendingCleanupLeases: []environment.Reference{ref("lease", "lease_p")}}, "",
			[]string{"1 lease(s) pending cleanup: lease_p"}},
		{"protected", environment.Usage{}, "the managed local environment", []string{"protected: the managed local environment"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			leases := &usageTable{usage: map[string]environment.Usage{}}
			binds := &bindingTable{bindings: map[string][]environment.Reference{}}
			f := newFixture(t, func(o *environment.Options) {
				o.WireCatalog(nil, []environment.UsageReporter{binds, leases}, func(_ context.Context, env *environment.Environment) string {
					if env.Name == "build" {
						return tc.protected
					}
					return ""
				})
			})
			v := f.mustCreate(t, remoteRequest("build"))
			other := f.mustCreate(t, remoteRequest("other"))
			leases.usage[v.ID] = tc.usage
			binds.bindings[v.ID] = bindings
			binds.bindings[other.ID] = []environment.Reference{ref("binding", "project:p_9")}

			want := &environment.BlastRadius{EnvironmentID: v.ID, EnvironmentName: "build", Revision: 1,
				Usage: tc.usage, Protected: tc.protected, Blockers: tc.blockers}
			want.Assignments = bindings
			got, err := f.cat.BlastRadius(ctx, admin, v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("BlastRadius (-want +got):\n%s", diff)
			}

			got, err = f.cat.Delete(ctx, operator, v.ID, 1)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Delete's radius (-want +got):\n%s", diff)
			}
			if len(tc.blockers) > 0 {
				wantErr(t, err, errcode.ErrConflict)
				wantText(t, err, `environment "build" (env_001): delete refused`, tc.blockers[0])
				var refused *environment.Error
				if !errors.As(err, &refused) {
					t.Errorf("error %T is not a *DeleteRefusedError", err)
				}
				if _, err := f.store.GetEnvironment(ctx, v.ID); err != nil {
					t.Errorf("refused delete removed the record: %v", err)
				}
				if len(binds.bindings[v.ID]) != 2 || len(environment.ListSecrets(f.secrets)) != 2 {
					t.Errorf("refused delete cleared bindings %v or secrets %v", binds.bindings, environment.ListSecrets(f.secrets))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.store.GetEnvironment(ctx, v.ID); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("after Delete, Get = %v, want errcode.ErrNotFound", err)
			}
			if diff := cmp.Diff(map[string][]environment.Reference{other.ID: {ref("binding", "project:p_9")}}, binds.bindings); diff != "" {
				t.Errorf("bindings after delete (-want +got):\n%s", diff) // ASG-5
			}
			if s := environment.ListSecrets(f.secrets); len(s) != 1 || s[0].Owner != other.ID {
				t.Errorf("secrets after delete: %+v, want only the other environment's", s)
			}
			if len(f.logs.lines("environment deleted")) != 1 {
				t.Errorf("want one delete log line:\n%s", f.logs)
			}
		})
	}
}

// TestDeleteReporterFailures (CFG-7): an unknown blast radius is never
// guessed (a reporter error refuses the delete); a failed clear after the
// record is gone is reported.
func TestDeleteReporterFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("usage unknown", func(t *testing.T) {
		t.Parallel()
		leases := &usageTable{err: errors.New("lease store down")}
		f := newFixture(t, func(o *environment.Options) { o.WireCatalog(nil, []environment.UsageReporter{leases}, nil) })
		v := f.mustCreate(t, remoteRequest("build"))
		_, err := f.cat.Delete(ctx, admin, v.ID, 1)
		wantText(t, err, `environment "build" (env_001)`, "lease store down")
		if f.count(t) != 1 {
			t.Error("delete went ahead without a blast radius")
		}
	})
	t.Run("clear fails", func(t *testing.T) {
		t.Parallel()
		binds := &bindingTable{bindings: map[string][]environment.Reference{}, clearErr: errors.New("binding store down")}
		f := newFixture(t, func(o *environment.Options) { o.WireCatalog(nil, []environment.UsageReporter{binds}, nil) })
		v := f.mustCreate(t, remoteRequest("build"))
		_, err := f.cat.Delete(ctx, admin, v.ID, 1)
		wantText(t, err, "deleted, but clearing its references failed", "binding store down")
		if f.count(t) != 0 {
			t.Error("record not deleted")
		}
	})
}

// TestArchiveRestore: archive and restore bump the revision, are refused
// when already in the target status, and log one line each.
func TestArchiveRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	v := f.mustCreate(t, remoteRequest("build"))
	a, err := f.cat.Archive(ctx, admin, v.ID, 1)
	if err != nil || a.Status != environment.StatusArchived || a.Revision != 2 {
		t.Fatalf("Archive = %+v, %v", a, err)
	}
	_, err = f.cat.Archive(ctx, admin, v.ID, 2)
	wantErr(t, err, errcode.ErrConflict)
	wantText(t, err, "already archived")
	archived, err := f.cat.List(ctx, admin, environment.ListFilter{Status: environment.StatusArchived})
	if err != nil || len(archived) != 1 {
		t.Errorf("List(archived) = %v, %v", archived, err)
	}
	r, err := f.cat.Restore(ctx, operator, v.ID, 2)
	if err != nil || r.Status != environment.StatusActive || r.Revision != 3 || r.UpdatedBy != operator.ID {
		t.Fatalf("Restore = %+v, %v", r, err)
	}
	if len(f.logs.lines("environment archived")) != 1 || len(f.logs.lines("environment restored")) != 1 {
		t.Errorf("want one line per mutation:\n%s", f.logs)
	}
}

package environment_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// recordingAuthorizer records every decision it is asked for and denies
// those deny says.
type recordingAuthorizer struct {
	mu    sync.Mutex
	calls []string
	deny  func(authz.Action) error
}

func (r *recordingAuthorizer) Authorize(_ context.Context, p authz.Principal, a authz.Action, res authz.Resource) error {
	r.mu.Lock()
	r.calls = append(r.calls, p.ID+" "+string(a)+" "+res.Kind+":"+res.Name)
	r.mu.Unlock()
	if r.deny != nil {
		return r.deny(a)
	}
	return nil
}

// TestCatalogUsesHostAuthorizer (AUTH-1): the catalog decides through the
// host's Authorizer, and a host refusal that forgets ErrDenied is still
// reported as ErrDenied.
func TestCatalogUsesHostAuthorizer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recordingAuthorizer{}
	f := newFixture(t, func(o *environment.Options) { o.Authorizer = rec })
	// The host lets an "agent" create: the host's policy, not the default, decides.
	v, err := f.cat.Create(ctx, agent, remoteRequest("by-host-policy"))
	if err != nil {
		t.Fatalf("host policy allows, got %v", err)
	}
	if _, err := f.cat.Get(ctx, agent, v.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"agent_1 create environment:by-host-policy",
		"agent_1 read environment:by-host-policy",
		"agent_1 read_config environment:by-host-policy",
	}
	if diff := cmp.Diff(want, rec.calls); diff != "" {
		t.Errorf("authorizer calls (-want +got):\n%s", diff)
	}

	rec.deny = func(a authz.Action) error {
		if a == authz.ActionUpdate {
			return errors.New("host says no")
		}
		return nil
	}
	name := "renamed"
	_, err = f.cat.Update(ctx, admin, v.ID, environment.UpdateRequest{BaseRevision: 1, Name: &name})
	wantErr(t, err, errcode.ErrDenied)
	wantText(t, err, "host says no", "update")
	if got, _ := f.cat.Get(ctx, admin, v.ID); got.Name != "by-host-policy" || got.Revision != 1 {
		t.Errorf("denied update changed the record: %+v", got)
	}
}

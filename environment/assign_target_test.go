package environment_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
)

// oneStore is one value that is the Store, the BindingStore and a
// TargetReader, as a SQL store is, counting its reads.
type oneStore struct {
	environment.Store
	environment.BindingStore
	targetReads, envReads, bindingReads atomic.Int64
}

func (s *oneStore) GetEnvironment(ctx context.Context, id string) (*environment.Environment, error) {
	s.envReads.Add(1)
	return s.Store.GetEnvironment(ctx, id)
}

func (s *oneStore) ListBindings(ctx context.Context, f environment.BindingFilter) ([]*environment.Binding, error) {
	s.bindingReads.Add(1)
	return s.BindingStore.ListBindings(ctx, f)
}

func (s *oneStore) GetEnvironmentBindings(ctx context.Context, id string) (*environment.Environment, []*environment.Binding, error) {
	s.targetReads.Add(1)
	env, err := s.Store.GetEnvironment(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	bs, err := s.BindingStore.ListBindings(ctx, environment.BindingFilter{EnvironmentID: id})
	return env, bs, err
}

// issue 29: when the Store and the BindingStore are one TargetReader, a
// lease target by id is read with it, once (one round trip on the SQL
// stores), and its bindings still decide (ASG-3): an environment another
// company bound is refused; a missing one is not found.
func TestALeaseTargetByIDIsOneReadOfATargetReader(t *testing.T) {
	t.Parallel()
	s := &oneStore{Store: environment.NewMemoryStore(), BindingStore: environment.NewMemoryBindingStore()}
	f := newAsgFixtureOn(t, s, s, nil)
	ctx := context.Background()
	f.put(t, bind{environment.BindingWorkspace, "ws-1", "globex", "lean"})
	s.targetReads.Store(0)
	s.envReads.Store(0)
	s.bindingReads.Store(0)

	if _, err := f.asg.LeaseTarget(ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.ids["full"], Company: "acme"}); err != nil {
		t.Fatalf("LeaseTarget(full): %v", err)
	}
	if tr, e, b := s.targetReads.Load(), s.envReads.Load(), s.bindingReads.Load(); tr != 1 || e != 0 || b != 0 {
		t.Errorf("LeaseTarget read the target %d times, the environment %d and the bindings %d; want one read of the target", tr, e, b)
	}
	_, err := f.asg.LeaseTarget(ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.ids["lean"], Company: "acme"})
	if !errors.Is(err, authz.ErrDenied) {
		t.Errorf("LeaseTarget of an environment globex bound, for acme = %v, want ErrDenied (ASG-3)", err)
	}
	if _, err := f.asg.LeaseTarget(ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.ids["lean"], Company: "globex"}); err != nil {
		t.Errorf("LeaseTarget of an environment globex bound, for globex: %v", err)
	}
	_, err = f.asg.LeaseTarget(ctx, admin, environment.LeaseTargetRequest{EnvironmentID: "env_missing", Company: "acme"})
	if !errors.Is(err, environment.ErrNotFound) {
		t.Errorf("LeaseTarget of a missing environment = %v, want ErrNotFound", err)
	}

	// Two values are never taken for one: each store is read apart.
	apart := newAsgFixture(t, nil)
	if _, err := apart.asg.LeaseTarget(ctx, admin, environment.LeaseTargetRequest{EnvironmentID: apart.ids["full"], Company: "acme"}); err != nil {
		t.Fatalf("LeaseTarget over two stores: %v", err)
	}
}

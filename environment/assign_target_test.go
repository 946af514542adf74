package environment_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// oneStore is one value that is the Store, the BindingStore and a
// TargetReader, as a SQL store is, counting its reads.
type oneStore struct {
	environment.Store
	environment.BindingStore
	targetReads, envReads, bindingReads, bindingGets atomic.Int64
}

func (s *oneStore) GetBinding(ctx context.Context, ref environment.BindingRef) (*environment.Binding, error) {
	s.bindingGets.Add(1)
	return s.BindingStore.GetBinding(ctx, ref)
}

// reads returns the counts and zeroes them.
func (s *oneStore) reads() (target, env, bindingLists, bindingGets int64) {
	return s.targetReads.Swap(0), s.envReads.Swap(0), s.bindingReads.Swap(0), s.bindingGets.Swap(0)
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
// lease target's environment and its bindings are read with it, once (one
// round trip on the SQL stores), by id and through a scope's binding, and
// its bindings still decide (ASG-3): an environment another company bound
// is refused; a missing one is not found. Resolve, which needs no
// bindings, reads the environment alone.
func TestALeaseTargetIsOneReadOfATargetReader(t *testing.T) {
	t.Parallel()
	s := &oneStore{Store: environment.NewMemoryStore(), BindingStore: environment.NewMemoryBindingStore()}
	f := newAsgFixtureOn(t, s, s, nil)
	ctx := context.Background()
	f.put(t, bind{environment.BindingWorkspace, "ws-1", "globex", "lean"})
	f.put(t, bind{environment.BindingWorkspace, "ws-2", "acme", "full"})
	s.reads()

	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.ids["full"], Company: "acme"}); err != nil {
		t.Fatalf("LeaseTarget(full): %v", err)
	}
	if tr, e, b, g := s.reads(); tr != 1 || e != 0 || b != 0 || g != 0 {
		t.Errorf("LeaseTarget by id read the target %d times, the environment %d, lists of bindings %d, bindings %d; want one read of the target", tr, e, b, g)
	}
	sc := authz.Scope{Company: "acme", Workspace: "ws-2"}
	lt, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{Scope: &sc})
	if err != nil || lt.Environment.ID != f.ids["full"] {
		t.Fatalf("LeaseTarget(scope %s) = %+v, %v; want environment full", sc, lt, err)
	}
	if tr, e, b, g := s.reads(); tr != 1 || e != 0 || b != 0 || g != 1 {
		t.Errorf("LeaseTarget by scope read the target %d times, the environment %d, lists of bindings %d, bindings %d; want the workspace binding and one read of the target", tr, e, b, g)
	}
	if _, err := f.asg.Resolve(ctx, admin, sc, 0); err != nil {
		t.Fatalf("Resolve(%s): %v", sc, err)
	}
	if tr, e, b, g := s.reads(); tr != 0 || e != 1 || b != 0 || g != 1 {
		t.Errorf("Resolve read the target %d times, the environment %d, lists of bindings %d, bindings %d; want the binding and the environment", tr, e, b, g)
	}
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws-1"}})
	if !errors.Is(err, environment.ErrNoBinding) || strings.Contains(err.Error(), "globex") {
		t.Errorf("LeaseTarget of the workspace key globex bound, for acme = %v, want ErrNoBinding naming nothing of globex (binding keys are per company, ASG-3)", err)
	}
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.ids["lean"], Company: "acme"})
	if !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("LeaseTarget of an environment globex bound, for acme = %v, want ErrDenied (ASG-3)", err)
	}
	if _, err := environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: f.ids["lean"], Company: "globex"}); err != nil {
		t.Errorf("LeaseTarget of an environment globex bound, for globex: %v", err)
	}
	_, err = environment.LeaseTargetFor(f.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: "env_missing", Company: "acme"})
	if !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("LeaseTarget of a missing environment = %v, want errcode.ErrNotFound", err)
	}

	// Two values are never taken for one: each store is read apart.
	apart := newAsgFixture(t, nil)
	if _, err := environment.LeaseTargetFor(apart.asg, ctx, admin, environment.LeaseTargetRequest{EnvironmentID: apart.ids["full"], Company: "acme"}); err != nil {
		t.Fatalf("LeaseTarget over two stores: %v", err)
	}
}

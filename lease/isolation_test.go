package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// Issue 56: a target whose driver declares less isolation than the
// minimum in force (the instance's minimumIsolation, or the environment's
// requireIsolation) is refused for every principal and every way in (by
// id, the same run again, reusable, through a scope, a draft) with
// isolation_below_minimum naming the target, its level and the minimum,
// before anything is allocated: no lease record, no call of the driver.
// A target that meets the minimum is leased.
//
// Requirements: ISO-3.
func TestIsolationBelowMinimumAllocatesNothing(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	w := newWorld(t, worldOpts{fake: &fake.Options{Isolation: drivers.IsolationContainer}})
	svc := withSettings(w)
	if _, err := w.asg.Set(bg, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault}, EnvironmentID: w.env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	w.acquire(lease.Ephemeral, "run-1")
	setMinimum := func(l drivers.Isolation) {
		t.Helper()
		if _, err := svc.Update(bg, op, instance.AnyRevision, func(c *instance.Settings) error {
			c.MinimumIsolation = l
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	agent := authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	refused := func(by string) {
		t.Helper()
		before, err := w.store.ListLeases(bg, lease.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		calls := fakectl.Of(w.fk).TotalCalls()
		for _, tc := range []struct {
			name  string
			p     authz.Principal
			req   lease.AcquireRequest
			draft bool
		}{
			{"by id", op, w.req(lease.Ephemeral, "run-2"), false},
			{"the same run again", op, w.req(lease.Ephemeral, "run-1"), false},
			{"reusable by id", op, w.req(lease.ReuseByWorkspace, ""), false},
			{"through a scope", agent, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws"}}, false},
			{"a draft", op, lease.Draft(lease.AcquireRequest{}, w.fk.Name(), w.env.Config), true},
		} {
			if tc.draft && by != "minimumIsolation" {
				continue // a draft has no environment record to require anything
			}
			h, err := w.m.Acquire(bg, tc.p, tc.req)
			msg := errcode.MessageOf(err)
			if h != nil || errcode.ReasonOf(err) != "isolation_below_minimum" || errcode.Code(err) != errcode.Unavailable || !errors.Is(err, drivers.ErrUnavailable) {
				t.Errorf("Acquire %s (%s) = %v, reason %q; want isolation_below_minimum (unavailable)", tc.name, by, err, errcode.ReasonOf(err))
				continue
			}
			target := `"sandbox one"`
			if tc.draft {
				target = "driver fake"
			}
			for _, want := range []string{target, "isolation container", "minimum gvisor", by} {
				if !strings.Contains(msg, want) {
					t.Errorf("Acquire %s (%s): message %q does not say %q", tc.name, by, msg, want)
				}
			}
		}
		after, err := w.store.ListLeases(bg, lease.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) || fakectl.Of(w.fk).TotalCalls() != calls {
			t.Errorf("refused acquisitions (%s) left %d lease records (was %d) and called the driver %d times", by, len(after), len(before), fakectl.Of(w.fk).TotalCalls()-calls)
		}
	}

	setMinimum(drivers.IsolationGVisor)
	refused("minimumIsolation")
	setMinimum(drivers.IsolationNone)
	w.env.RequireIsolation = drivers.IsolationGVisor
	refused("requireIsolation")

	// Meeting the minimum: container required, container declared.
	w.env.RequireIsolation = drivers.IsolationContainer
	setMinimum(drivers.IsolationContainer)
	h := w.acquire(lease.Ephemeral, "run-3")
	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}

// Issue 56, item 4: managed-sandbox-only means a minimum of container for
// every principal: a sandbox driver that declares no isolation (the fake's
// default) is refused by id, through a scope and as a draft with
// isolation_below_minimum naming enableManagedSandboxOnly, before
// anything is allocated (no lease record, no call of the driver); once
// the setting is off it is leased.
//
// Requirements: ISO-3, CFG-9.
func TestManagedSandboxOnlyRefusesSandboxesBelowContainer(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	w := newWorld(t, worldOpts{}) // the fake declares isolation none
	svc := withSettings(w)
	if _, err := w.asg.Set(bg, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault}, EnvironmentID: w.env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	setSettings(t, svc, true, true)
	agent := authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	calls := fakectl.Of(w.fk).TotalCalls()
	for _, tc := range []struct {
		name string
		p    authz.Principal
		req  lease.AcquireRequest
	}{
		{"by id", op, w.req(lease.Ephemeral, "run-1")},
		{"reusable by id", op, w.req(lease.ReuseByWorkspace, "")},
		{"through a scope", agent, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws"}}},
		{"a draft", op, lease.Draft(lease.AcquireRequest{}, w.fk.Name(), w.env.Config)},
	} {
		h, err := w.m.Acquire(bg, tc.p, tc.req)
		if h != nil || errcode.ReasonOf(err) != "isolation_below_minimum" || errors.Is(err, instance.ErrManagedSandboxOnly) || !errors.Is(err, drivers.ErrUnavailable) {
			t.Errorf("Acquire %s = %v (reason %q), want isolation_below_minimum", tc.name, err, errcode.ReasonOf(err))
			continue
		}
		if msg := errcode.MessageOf(err); !strings.Contains(msg, "isolation none") || !strings.Contains(msg, "minimum container") || !strings.Contains(msg, "enableManagedSandboxOnly") {
			t.Errorf("Acquire %s: message %q does not name the level, the minimum and the setting", tc.name, msg)
		}
	}
	if ls, err := w.store.ListLeases(bg, lease.Filter{}); err != nil || len(ls) != 0 || fakectl.Of(w.fk).TotalCalls() != calls {
		t.Errorf("refused acquisitions left %d lease records (%v) and called the driver %d times", len(ls), err, fakectl.Of(w.fk).TotalCalls()-calls)
	}
	setSettings(t, svc, true, false)
	h := w.acquire(lease.Ephemeral, "run-1")
	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
}

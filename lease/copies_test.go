package lease_test

import (
	"maps"
	"reflect"
	"runtime"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/lease"
)

// TestReturnedLeasesAreTheCallers: what Handle.Lease, Handle.Release,
// Manager.Get, Manager.List and Manager.Release return is the caller's own
// deep copy, full or redacted: changing its maps and runner in place
// changes neither the store's record nor what any other call returns. (A
// Store may share a lease's maps with the manager, see lease.Store; the
// manager's exported methods never hand them out.)
func TestReturnedLeasesAreTheCallers(t *testing.T) {
	t.Parallel()
	w := authWorld(t)
	acquire := func(run string) *lease.Handle {
		t.Helper()
		h, err := w.m.Acquire(bg, op, lease.AcquireRequest{EnvironmentID: "unbound", Company: "acme", Run: run,
			Metadata: map[string]string{"ticket": "T-1"}, Runner: drivers.RunnerSetOf(runnerSpec(runtime.GOARCH, "ab"))})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b := acquire("a"), acquire("b")
	stored := map[string]*lease.Lease{a.ID(): lease.Clone(w.get(a.ID())), b.ID(): lease.Clone(w.get(b.ID()))}
	scribble := func(what string, l *lease.Lease) {
		t.Helper()
		if l == nil {
			t.Fatalf("%s returned no lease", what)
		}
		for _, m := range []map[string]string{l.Labels, l.Metadata} {
			if m != nil {
				m["scribbled"] = what
			}
		}
		if l.Config != nil {
			l.Config["scribbled"] = what
		}
		if l.Runner != nil {
			l.Runner.SHA256 = "scribbled by " + what
		}
	}
	check := func(after string) {
		t.Helper()
		for id, want := range stored {
			got := w.get(id)
			if !maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Metadata, want.Metadata) || !reflect.DeepEqual(got.Config, want.Config) || *got.Runner != *want.Runner {
				t.Fatalf("after %s, the store's record of %s changed: labels %v metadata %v config %v runner %+v", after, id, got.Labels, got.Metadata, got.Config, got.Runner)
			}
		}
	}
	scribble("Handle.Lease", a.Lease())
	check("Handle.Lease")
	for _, p := range roles {
		l, err := w.m.Get(bg, p, a.ID())
		if err != nil {
			continue // not every role reads it
		}
		scribble("Get as "+string(p.Role), l)
		check("Get as " + string(p.Role))
		ls, err := w.m.List(bg, p, lease.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			scribble("List as "+string(p.Role), l)
		}
		check("List as " + string(p.Role))
	}
	if l := a.Lease(); l.Metadata["scribbled"] != "" || l.Runner.SHA256 == "" || l.Config["scribbled"] != nil {
		t.Fatalf("Handle.Lease after the scribbles: %+v", l)
	}

	// The releases: a's through its handle, b's through the manager by a
	// principal who reads it redacted (its runner stays, without path).
	la, err := a.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatal(err)
	}
	stored[a.ID()] = lease.Clone(w.get(a.ID()))
	scribble("Handle.Release", la)
	check("Handle.Release")
	lb, err := w.m.Release(bg, roleAgent, b.ID(), lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatal(err)
	}
	if !lb.Redacted || lb.Runner == nil || lb.Runner.Binary != "" {
		t.Fatalf("Release as an agent: redacted %v runner %+v, want the redacted record with its runner's sum", lb.Redacted, lb.Runner)
	}
	stored[b.ID()] = lease.Clone(w.get(b.ID()))
	scribble("Release as agent", lb)
	check("Release as agent")
	if l, err := w.m.Get(bg, op, b.ID()); err != nil || l.Runner.Binary == "" || l.Runner.SHA256 != stored[b.ID()].Runner.SHA256 {
		t.Fatalf("Get after the scribbles: %+v, %v", l, err)
	}
}

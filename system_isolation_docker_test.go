package berth_test

import (
	"context"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/store"
)

// Issue 56 on the real Docker engine: the probe measures the isolation a
// task sees, against the engine's KernelVersion (docker info): container
// under the engine's default runtime (runc), gvisor under runsc, and each
// is recorded in the qualification, which under runsc is not the one
// under runc (the runtime is part of the qualification's identity).
//
// Requirements: ISO-1, ISO-2, ISO-3.
func TestIsolationOnDocker(t *testing.T) {
	ctx := context.Background()
	cli, img, run := dockerRig(t)
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.Runtimes["runsc"]; !ok {
		testenv.Missing(t, "gVisor's runsc runtime in the Docker engine", "make prereqs installs Debian's runsc and registers it (internal/cmd/dockerruntime)", nil)
	}
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, Stores: store.Memory()})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	create := func(name string, extra map[string]any) *environment.View {
		t.Helper()
		cfg := map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}
		for k, v := range extra {
			cfg[k] = v
		}
		v, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: name, Driver: "docker", Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	runc := create("iso-runc", nil)
	runsc := create("iso-runsc", map[string]any{"runtime": "runsc"})
	if runc.Isolation != drivers.IsolationContainer || runsc.Isolation != drivers.IsolationGVisor {
		t.Fatalf("declared: runc %s, runsc %s", runc.Isolation, runsc.Isolation)
	}
	for _, tc := range []struct {
		env  *environment.View
		want string
	}{{runc, "container"}, {runsc, "gvisor"}} {
		res, err := sys.Prober().Probe(ctx, ops, tc.env.ID, probe.Request{Company: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range res.Stages {
			if st.Name == "isolation" || st.Name == "detect" {
				t.Logf("%s: stage %s took %s", tc.env.Name, st.Name, st.Duration)
			}
		}
		t.Logf("%s: isolation %s: %s", tc.env.Name, res.Isolation, res.IsolationEvidence)
		if !res.OK || res.Isolation != tc.want || !res.PlatformQualificationRecorded {
			t.Fatalf("probe of %s: ok %v (%s), isolation %q (%s), recorded %v; want %s", tc.env.Name, res.OK, res.Summary, res.Isolation, res.IsolationEvidence, res.PlatformQualificationRecorded, tc.want)
		}
		q, err := sys.Prober().Qualification(ctx, ops, tc.env.ID, "acme")
		if err != nil || !q.Qualified || q.Isolation != tc.want {
			t.Errorf("qualification of %s: %+v, %v; want qualified at %s", tc.env.Name, q, err, tc.want)
		}
	}

	// A minimum of gvisor refuses the runc environment before anything is
	// allocated: no container is created on the engine.
	if _, err := sys.Settings().Update(ctx, ops, instance.AnyRevision, func(c *instance.Settings) error {
		c.MinimumIsolation = drivers.IsolationGVisor
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	containers := func() int {
		t.Helper()
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/run="+run))})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	before := containers()
	h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: runc.ID})
	if h != nil || errcode.ReasonOf(err) != "isolation_below_minimum" {
		t.Fatalf("Acquire of the runc environment under a gvisor minimum = %v (reason %q), want isolation_below_minimum", err, errcode.ReasonOf(err))
	}
	t.Logf("refused: %s", errcode.MessageOf(err))
	res, err := sys.Prober().Probe(ctx, ops, runc.ID, probe.Request{Company: "acme"})
	if err != nil || res.OK || res.Code != "isolation_below_minimum" {
		t.Fatalf("probe of the runc environment under a gvisor minimum: %+v, %v; want isolation_below_minimum", res, err)
	}
	if after := containers(); after != before {
		t.Errorf("%d containers of the run before the refused acquisition and probe, %d after", before, after)
	}
}

package berth_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/store"
)

// Issue 56 on the real Docker engine: the probe measures the isolation a
// task sees, against the engine's KernelVersion (docker info): container
// under the engine's default runtime (runc), gvisor under runsc, and each
// is recorded in the qualification, which under runsc is not the one
// under runc (the runtime is part of the qualification's identity).
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
		t.Logf("%s: isolation %s: %s", tc.env.Name, res.Isolation, res.IsolationEvidence)
		if !res.OK || res.Isolation != tc.want || !res.PlatformQualificationRecorded {
			t.Fatalf("probe of %s: ok %v (%s), isolation %q (%s), recorded %v; want %s", tc.env.Name, res.OK, res.Summary, res.Isolation, res.IsolationEvidence, res.PlatformQualificationRecorded, tc.want)
		}
		q, err := sys.Prober().Qualification(ctx, ops, tc.env.ID, "acme")
		if err != nil || !q.Qualified || q.Isolation != tc.want {
			t.Errorf("qualification of %s: %+v, %v; want qualified at %s", tc.env.Name, q, err, tc.want)
		}
	}
}

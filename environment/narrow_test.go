package environment_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
)

// CAP-2, CAP-4: a config narrows what its driver offers. A Docker
// environment on a tcp:// engine lacks runner_ingress (the engine does not
// share this host's filesystem) and is refused naming it; on a unix://
// engine it has it. The gate contacts no engine.
func TestGateHonoursConfigNarrowing(t *testing.T) {
	t.Parallel()
	d := docker.New(&docker.Options{Host: "unix:///var/run/docker.sock"})
	defer d.Close()
	g := environment.NewGate(drivers.NewRegistry(d), nil)
	ctx := context.Background()
	check := func(host string) (drivers.Set, error) {
		env := &environment.Environment{ID: "env_1", Name: "box", Driver: "docker", Status: environment.StatusActive,
			Config: config.Config{"host": host, "image": "busybox:1"}}
		_, eff, err := g.Check(ctx, env, drivers.NewSet(drivers.CapExec, drivers.CapRunnerIngress))
		return eff, err
	}
	if eff, err := check("unix:///var/run/docker.sock"); err != nil || !eff.Has(drivers.CapRunnerIngress) {
		t.Errorf("unix:// engine: effective %s, %v; want runner_ingress", eff, err)
	}
	_, err := check("tcp://127.0.0.1:2376")
	var ue *environment.Error
	if !errors.As(err, &ue) || !errors.Is(err, drivers.ErrUnsupported) || !slices.Equal(ue.Missing, []drivers.Capability{drivers.CapRunnerIngress}) {
		t.Errorf("tcp:// engine: %v, want an UnusableError missing runner_ingress", err)
	}
}

package docker_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// issue 25: the Docker driver reports the engine's architecture (its
// /info, normalized) without creating a container, so that a lease picks
// the runner binary of a set for it before allocating.
func TestRunnerArchIsTheEnginesArchitecture(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ar, err := drivers.DriverAs[drivers.ArchReporter](e.drv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config(e.img.Ref, nil)
	arch, err := ar.RunnerArch(ctx, cfg)
	if err != nil || arch != runtime.GOARCH {
		t.Errorf("RunnerArch = %q, %v; want %s (the engine runs on this host)", arch, err, runtime.GOARCH)
	}
	if got, err := e.drv.List(ctx, cfg, map[string]string{runLabel: e.run}); err != nil || len(got) != 0 {
		t.Errorf("containers after RunnerArch: %+v, %v; want none", got, err)
	}
}

package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
)

// warmRecorder is the fake driver recording, by sandbox id, whether its
// Acquire asked for a warm sandbox (drivers.AcquireRequest.Warm).
type warmRecorder struct {
	*fake.Driver
	mu   sync.Mutex
	warm map[string]bool
}

func (d *warmRecorder) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	sb, err := d.Driver.Acquire(ctx, cfg, req)
	if err == nil {
		d.mu.Lock()
		d.warm[sb.ID()] = req.Warm
		d.mu.Unlock()
	}
	return sb, err
}

func (d *warmRecorder) wasWarm(id string) (warm, seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	warm, seen = d.warm[id]
	return warm, seen
}

// A pool refill acquires its members warm (the driver may prime their
// first command); an ordinary acquisition does not, nor does a runner
// pool's refill (its first command is a runner task).
func TestPoolMembersAreAcquiredWarm(t *testing.T) {
	t.Parallel()
	for _, runner := range []bool{false, true} {
		rec := &warmRecorder{warm: map[string]bool{}}
		var w *world
		spec := drivers.RunnerSpec{Binary: "/cache/berth-runner", SHA256: strings.Repeat("ef", 32)}
		opts := func(o *mopts) {
			o.ManualPoolRefill = true
			o.SweepEnvironments = func(ctx context.Context) ([]*environment.Environment, error) {
				return w.envs.ListEnvironments(ctx, environment.ListFilter{})
			}
			if runner {
				o.PoolRunners = func() (*drivers.RunnerSet, error) {
					return &drivers.RunnerSet{Build: func(context.Context, string) (drivers.RunnerSpec, error) { return spec, nil }}, nil
				}
			}
		}
		w = newWorld(t, worldOpts{
			wrap:    func(fk *fake.Driver, _ lease.Store) drivers.Driver { rec.Driver = fk; return rec },
			options: opts,
		})
		if runner {
			w.tasks = &poolRunnerHook{}
			w.m = w.newManager(opts)
		}
		w.env.Pool = &environment.Pool{Size: 1, Runner: runner}
		w.save(w.env)
		t.Cleanup(func() { lease.Close(w.m) })
		w.maintain(w.m)
		members := w.pooled()
		if len(members) != 1 {
			t.Fatalf("runner pool %v: members %v, want 1", runner, members)
		}
		pid := w.get(members[0]).ProviderLeaseID
		if warm, seen := rec.wasWarm(pid); !seen || warm == runner {
			t.Errorf("runner pool %v: the member's sandbox was acquired warm %v (seen %v), want %v", runner, warm, seen, !runner)
		}
		if runner {
			continue
		}
		if h := w.acquire(lease.Ephemeral, "run-1"); h.SandboxID() != pid {
			t.Fatalf("the acquisition got sandbox %s, want the member's %s", h.SandboxID(), pid)
		}
		h := w.acquire(lease.Ephemeral, "run-2") // the pool is empty: a sandbox of its own
		if warm, seen := rec.wasWarm(h.SandboxID()); !seen || warm {
			t.Errorf("an ordinary acquisition's sandbox was acquired warm %v (seen %v), want not", warm, seen)
		}
	}
}

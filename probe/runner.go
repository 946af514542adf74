package probe

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
)

// runnerProbe configures runner-based probes (Request.Runner, PRP-8).
type runnerProbe struct {
	// controller attaches the runner (controller.Controller.Attach) and
	// serves it for the probe's lease. Required.
	controller *controller.Controller
	// runners returns the runner binaries on this host, one per
	// architecture (for example controller.RunnerSetFromFiles of paths);
	// the lease picks the one of the target's architecture. Required.
	runners func() (*drivers.RunnerSet, error)
}

// runnerSet returns the runner binaries of a runner-based probe, or an
// error wrapping drivers.ErrUnsupported when the Prober has none.
func (p *Prober) runnerSet() (*drivers.RunnerSet, error) {
	if p.o.runner == nil || p.o.runner.controller == nil || p.o.runner.runners == nil {
		return nil, fmt.Errorf("probe: a runner-based probe needs a runner controller and a runner binary: %w", drivers.ErrUnsupported)
	}
	set, err := p.o.runner.runners()
	if err != nil {
		return nil, fmt.Errorf("probe: runner binary: %w", err)
	}
	return set, nil
}

// measureByRunner runs the runner stage (in place of detect) and the image
// stage: it attaches the runner under a probe identity and takes its
// hello's platform and version as the evidence. The probe identity runs no
// task (the controller refuses to dispatch one, and the runner refuses any
// it gets); its token lives at most two minutes (a probe token's limit) and the release
// that follows ends the lease (the lease hook finds no task to stop and
// closes the ingress).
func (p *Prober) measureByRunner(ctx context.Context, pr authz.Principal, r *run, drv drivers.Driver, cfg config.Config, h *lease.Handle) {
	ok := r.stage(ctx, stageRunner, func(ctx context.Context) (string, string, error) {
		att, err := p.o.runner.controller.Attach(ctx, pr, h, controller.AttachRequest{Scope: prp.ScopeProbe})
		if err != nil {
			return "", "", err
		}
		hello := att.Hello()
		r.res.RunnerVersion, r.res.RunnerSHA256 = hello.RunnerVersion, hello.BinarySHA256
		if hello.Platform.OS == "" || hello.Platform.Arch == "" {
			return "", reason.PlatformUnknown, fmt.Errorf("runner %s in lease %s: its hello reports no platform: %w", hello.RunnerVersion, h.ID(), qualify.ErrDetection)
		}
		r.res.Platform = hello.Platform
		return fmt.Sprintf("runner %s (sha256 %s) under a probe identity: %s", hello.RunnerVersion, short(hello.BinarySHA256), hello.Platform), "", nil
	})
	if !ok {
		return
	}
	p.measureIsolation(ctx, r, drv, cfg, h)
	p.measureImage(ctx, r, drv, h)
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

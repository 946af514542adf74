package probe

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
	"github.com/berthdev/berth/internal/isolation"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
)

// engineKernel is what a sandbox offers for the isolation measurement: the
// kernel release of the machine it runs on (the Docker engine's
// KernelVersion, which may be remote; the fake's platform). A sandbox
// without it is measured without a host kernel to compare with.
type engineKernel interface {
	EngineKernel(ctx context.Context) (string, error)
}

// measureIsolation runs the isolation stage on a sandbox target: the level
// a task inside it shows (internal/isolation.Measure, the conformance
// suite's own measurement), with its evidence, into the Result. It fails
// with isolation_mismatch when the level measured is below the one the
// driver declares for cfg (drivers.IsolationOf). A sandbox that does not
// report the kernel of the machine it runs on (engineKernel: Daytona's)
// is measured only when its kernel names gVisor; otherwise the result says
// the isolation was not measured, and nothing is refused (a qualification
// then records no level). A host target measures none without a stage.
func (p *Prober) measureIsolation(ctx context.Context, r *run, drv drivers.Driver, cfg config.Config, h *lease.Handle) bool {
	if drv.Capabilities().Kind != drivers.KindSandbox {
		_, ev, _ := isolation.Measure(ctx, true, "", nil)
		r.res.Isolation, r.res.IsolationEvidence = drivers.IsolationNone.String(), ev.String()
		return true
	}
	declared := drivers.IsolationOf(drv, cfg)
	return r.stage(ctx, stageIsolation, func(ctx context.Context) (string, string, error) {
		var kernel string
		if err := h.Raw(func(sb any) error {
			ek, ok := sb.(engineKernel)
			if !ok {
				return nil
			}
			var err error
			kernel, err = ek.EngineKernel(ctx)
			return err
		}); err != nil {
			return "", "", err
		}
		measured, ev, err := isolation.Measure(ctx, false, kernel, func(ctx context.Context, c drivers.Command) (*drivers.Result, error) {
			return h.Exec(ctx, lease.Command{Argv: c.Argv, OutputLimit: int64(c.OutputLimit)})
		})
		if err != nil {
			return "", "", err
		}
		evidence := r.scrub.scrub(ev.String())
		if kernel == "" && measured == drivers.IsolationNone {
			// Without the host's kernel release only a kernel naming
			// gVisor proves a level: nothing measured, nothing refused.
			r.res.IsolationEvidence = fmt.Sprintf("not measured: driver %s does not report the kernel release of the machine its sandboxes run on (%s)", drv.Name(), evidence)
			return r.res.IsolationEvidence, "", nil
		}
		r.res.Isolation, r.res.IsolationEvidence = measured.String(), evidence
		if measured < declared {
			return "", reason.IsolationMismatch, &errcode.Error{Code: errcode.Conflict, Reason: reason.IsolationMismatch,
				Message: errmsg.Sentence(fmt.Sprintf("%s declares isolation %s, but its sandbox measures %s: check the driver's runtime setting and the engine", r.res.Target, declared, measured)),
				Err:     fmt.Errorf("driver %s declares isolation %s for the config, but the sandbox of lease %s measures %s (%s)", drv.Name(), declared, h.ID(), measured, evidence)}
		}
		return fmt.Sprintf("isolation %s measured (declared %s): %s", measured, declared, evidence), "", nil
	})
}

package docker

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/drivers"
)

// EngineKernel returns the kernel release of the engine the sandbox's
// container runs on (docker info's KernelVersion): the probe compares the
// release a task sees with it to measure the isolation
// (internal/isolation), with the engine's and not berth's own uname, since
// the engine may be remote. An engine that cannot be reached is an error
// wrapping drivers.ErrUnavailable.
func (s *sandbox) EngineKernel(ctx context.Context) (string, error) {
	info, err := s.cli.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("docker %s: info: %v: %w", s.cfg.host, err, drivers.ErrUnavailable)
	}
	return info.KernelVersion, nil
}

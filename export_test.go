package berth

import (
	"time"

	"github.com/berthdev/berth/internal/controller"
)

// AfterSecretCheck makes f run once, after the next successful check of a
// task's secrets at dispatch and before its delivery (tests only).
func AfterSecretCheck(s *System, f func()) {
	s.taskSecrets.mu.Lock()
	s.taskSecrets.afterCheck = f
	s.taskSecrets.mu.Unlock()
}

// Runners returns the System's runner controller, which no host reaches
// (tests only: they attach runners and mint tickets themselves).
func Runners(s *System) *controller.Controller { return s.runners }

// WithRunnerPoll sets how often the runner controller's waiters re-read
// the store (tests only) and returns o.
func WithRunnerPoll(o *Options, d time.Duration) *Options {
	o.runnerPoll = d
	return o
}

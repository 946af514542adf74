package berth

import (
	"context"
	"sync"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
)

// The hooks one service gives another are values their constructors
// return, wired here by New and reachable from no exported method
// (CONVENTIONS 24): the catalog (envhook.NewCatalog) takes the Assignments
// whose bindings it shows, clears and protects; the lease manager's
// constructor (internal/leasehook.New) returns the catalog's lease counts
// (an envhook.UsageReporter) and takes the controller's
// leasehook.TaskStopper, which controller.New returns; and
// controller.New takes the controller.SecretResolver that handover.New
// returns. Each answers for no principal: the service that calls it
// authorized the principal first.

// taskSecrets is the runner controller's SecretResolver as New wires it:
// the resolver handover.New returned, and, for tests only
// (export_test.go), a function run once after a successful Check, between
// a dispatch and its delivery.
type taskSecrets struct {
	controller.SecretResolver

	mu         sync.Mutex
	afterCheck func()
}

// Check implements controller.SecretResolver.
func (t *taskSecrets) Check(ctx context.Context, p authz.Principal, target controller.SecretTarget, uses []prp.SecretUse) error {
	err := t.SecretResolver.Check(ctx, p, target, uses)
	t.mu.Lock()
	after := t.afterCheck
	if err == nil {
		t.afterCheck = nil
	}
	t.mu.Unlock()
	if err == nil && after != nil {
		after()
	}
	return err
}

package docker

import (
	"context"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// Names the external tests (package docker_test) use; unexported in the
// package.
const (
	DefaultPidsLimit    = defaultPidsLimit
	FieldCPUs           = fieldCPUs
	FieldCaptureRepo    = fieldCaptureRepo
	FieldMemory         = fieldMemory
	FieldPidsLimit      = fieldPidsLimit
	FieldPorts          = fieldPorts
	FieldPullPolicy     = fieldPullPolicy
	FieldReadonlyRootfs = fieldReadonlyRootfs
	FieldStartupTimeout = fieldStartupTimeout
	FieldUser           = fieldUser
	FieldWorkdir        = fieldWorkdir
	LabelLease          = labelLease
	LabelManaged        = labelManaged
	LabelTemplate       = labelTemplate
	LocalRegistry       = localRegistry
	PullAlways          = pullAlways
	PullNever           = pullNever
	RunnerBinaryPath    = runnerBinaryPath
	RunnerSocketDir     = runnerSocketDir
	RunnerSocketName    = runnerSocketName
	RunnerStateDir      = runnerStateDir
)

// Concrete is the driver's own type, whose optional methods (List, Resume,
// Destroy, ...) the external tests call directly.
type Concrete = *driver

// NewConcrete returns the driver New returns, as its own type.
func NewConcrete(opts *Options) Concrete { return newDriver(opts) }

// WarmDriver is the driver with every acquisition warm
// (drivers.AcquireRequest.Warm, as a pool refill asks): the first command
// of each of its sandboxes runs through the exec that Acquire primed. Its
// optional methods are the driver's own.
type WarmDriver struct{ *driver }

// NewWarm returns a WarmDriver.
func NewWarm(opts *Options) WarmDriver { return WarmDriver{newDriver(opts)} }

// Acquire acquires with req.Warm set.
func (w WarmDriver) Acquire(ctx context.Context, raw config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	req.Warm = true
	return w.driver.Acquire(ctx, raw, req)
}

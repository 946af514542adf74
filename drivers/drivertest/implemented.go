package drivertest

import "github.com/berthdev/berth/drivers"

// The suite's own reading of what a driver implements (CAP-2): each
// capability beyond exec with the optional interface it needs, asserted
// on the driver (driver level) or on a live sandbox (sandbox level),
// independently of package drivers' resolution, which it checks. CapReuse
// is not here: it is a promise about Resumer on top of CapReattach (a
// stopped sandbox starts again), which "stop then resume" checks, and a
// driver that declares it must declare CapReattach.
var (
	driverLevel = map[drivers.Capability]func(drivers.Driver) bool{
		drivers.CapReattach:       func(d drivers.Driver) bool { _, ok := d.(drivers.Resumer); return ok },
		drivers.CapList:           func(d drivers.Driver) bool { _, ok := d.(drivers.Lister); return ok },
		drivers.CapDestroyByID:    func(d drivers.Driver) bool { _, ok := d.(drivers.Destroyer); return ok },
		drivers.CapTemplateDelete: func(d drivers.Driver) bool { _, ok := d.(drivers.TemplateDeleter); return ok },
	}
	sandboxLevel = map[drivers.Capability]func(drivers.Sandbox) bool{
		drivers.CapStreamExec:      func(sb drivers.Sandbox) bool { _, ok := sb.(drivers.StreamExecer); return ok },
		drivers.CapImageIdentity:   func(sb drivers.Sandbox) bool { _, ok := sb.(drivers.ImageReporter); return ok },
		drivers.CapTerminal:        func(sb drivers.Sandbox) bool { _, ok := sb.(drivers.Terminal); return ok },
		drivers.CapTemplateCapture: func(sb drivers.Sandbox) bool { _, ok := sb.(drivers.Capturer); return ok },
		drivers.CapRunnerIngress:   func(sb drivers.Sandbox) bool { _, ok := sb.(drivers.RunnerHost); return ok },
		drivers.CapFiles:           func(sb drivers.Sandbox) bool { _, ok := sb.(drivers.Files); return ok },
	}
)

// implemented returns, of the capabilities of levels, those v implements
// (by type assertion), and the set of every capability of levels (the
// scope to compare a declaration in).
func implemented[V any](v V, levels map[drivers.Capability]func(V) bool) (impl, scope drivers.Set) {
	for c, has := range levels {
		scope |= drivers.NewSet(c)
		if has(v) {
			impl |= drivers.NewSet(c)
		}
	}
	return impl, scope
}

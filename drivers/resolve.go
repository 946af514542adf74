package drivers

import (
	"fmt"
	"io"
)

// This file holds every type assertion on the optional interfaces, so that
// capability resolution (CAP-2) has one home. Driver-level capabilities come
// from assertions on the driver, sandbox-level ones from assertions on the
// live sandbox (the database/sql way); the declared set (Capabilities) is
// what discovery reads without allocating anything (CAP-1), and the
// conformance suite proves declared == implemented for every driver.

// driverLevel are the capabilities whose interface a Driver implements;
// sandboxLevel those whose interface a Sandbox implements.
var (
	driverLevel  = NewSet(CapReuse, CapList, CapDestroyByID, CapTemplateDelete)
	sandboxLevel = NewSet(CapStreamExec, CapImageIdentity, CapTerminal, CapTemplateCapture, CapRunnerIngress)
)

// DriverLevel returns the capabilities tied to an optional interface of a
// Driver (Resumer, Lister, Destroyer, TemplateDeleter).
func DriverLevel() Set { return driverLevel }

// SandboxLevel returns the capabilities tied to an optional interface of a
// Sandbox (StreamExecer, ImageReporter, Terminal, Capturer, RunnerHost).
// Only a live sandbox can show that they are implemented.
func SandboxLevel() Set { return sandboxLevel }

// Implemented returns CapExec plus the driver-level capabilities d really
// provides, by type assertion on d. It never calls a method of d.
// Sandbox-level capabilities are read from a live sandbox with
// SandboxImplemented.
func Implemented(d Driver) Set {
	s := NewSet(CapExec)
	if _, ok := d.(Resumer); ok {
		s = s.With(CapReuse)
	}
	if _, ok := d.(Lister); ok {
		s = s.With(CapList)
	}
	if _, ok := d.(Destroyer); ok {
		s = s.With(CapDestroyByID)
	}
	if _, ok := d.(TemplateDeleter); ok {
		s = s.With(CapTemplateDelete)
	}
	return s
}

// SandboxImplemented returns CapExec plus the sandbox-level capabilities the
// live sandbox sb really provides, by type assertion on sb. It never calls a
// method of sb. A wrapper type that hides an interface hides the capability.
func SandboxImplemented(sb Sandbox) Set {
	s := NewSet(CapExec)
	if _, ok := sb.(StreamExecer); ok {
		s = s.With(CapStreamExec)
	}
	if _, ok := sb.(ImageReporter); ok {
		s = s.With(CapImageIdentity)
	}
	if _, ok := sb.(Terminal); ok {
		s = s.With(CapTerminal)
	}
	if _, ok := sb.(Capturer); ok {
		s = s.With(CapTemplateCapture)
	}
	if _, ok := sb.(RunnerHost); ok {
		s = s.With(CapRunnerIngress)
	}
	return s
}

// CloseDriver closes d when it implements io.Closer and returns its error
// wrapped with the driver's name; otherwise it does nothing and returns
// nil. io.Closer is an optional interface that may be implemented by a
// Driver: Close releases what the driver holds for its whole life (engine
// clients, pooled connections); sandboxes obtained before must not be used
// afterwards. A Driver that does not implement it holds nothing that needs
// closing.
func CloseDriver(d Driver) error {
	c, ok := d.(io.Closer)
	if !ok {
		return nil
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("driver %q: close: %w", d.Name(), err)
	}
	return nil
}

// Effective returns the capabilities of d that a caller may plan with,
// without allocating anything (CAP-1): declared AND implemented AND NOT
// narrowed (CAP-2). Driver-level capabilities must be implemented by d;
// sandbox-level ones can only be checked on a live sandbox, so Effective
// takes the declaration for them (the conformance suite proves it equals
// what a live sandbox implements), and the As* helpers for sandbox
// interfaces check the live sandbox again. Narrowing (by config, lease
// policy or an unavailable provider) only removes; nothing adds a
// capability the driver does not declare. An unavailable driver (see
// Available) has no effective capabilities. Effective does no I/O.
func Effective(d Driver, narrowed Set) Set {
	if Available(d) != nil {
		return 0
	}
	return d.Capabilities().Declared.Intersect(Implemented(d) | sandboxLevel).Without(narrowed)
}

// Narrowing returns the narrowing to pass to the As* helpers for the live
// sandboxes of d: every capability that is not effective for d under
// narrowed (undeclared, not implemented by the driver, narrowed, or all of
// them when d is unavailable). It does no I/O.
func Narrowing(d Driver, narrowed Set) Set {
	return NewSet(AllCapabilities()...).Without(Effective(d, narrowed))
}

// ConfigNarrowing returns the capabilities that cfg narrows away for d
// (ConfigNarrower), or the empty set when d does not implement it; pass it
// to Effective and Narrowing to plan with a config. It does no I/O.
func ConfigNarrowing(d Driver, cfg Config) Set {
	if cn, ok := d.(ConfigNarrower); ok {
		return cn.NarrowedBy(cfg)
	}
	return 0
}

// Available returns nil when d can be used, else an error wrapping
// ErrUnavailable with the driver's reason. It does no I/O.
func Available(d Driver) error {
	if ar, ok := d.(AvailabilityReporter); ok {
		if err := ar.Availability(); err != nil {
			return fmt.Errorf("driver %q: %w: %v", d.Name(), ErrUnavailable, err)
		}
	}
	return nil
}

func driverAs[T any](d Driver, c Capability) (T, error) {
	var zero T
	v, ok := d.(T)
	if !ok || !Effective(d, 0).Has(c) {
		return zero, fmt.Errorf("driver %q: capability %s: %w", d.Name(), c, ErrUnsupported)
	}
	return v, nil
}

func sandboxAs[T any](sb Sandbox, narrowed Set, c Capability) (T, error) {
	var zero T
	if narrowed.Has(c) {
		return zero, fmt.Errorf("sandbox %q: capability %s is narrowed away: %w", sb.ID(), c, ErrUnsupported)
	}
	v, ok := sb.(T)
	if !ok {
		return zero, fmt.Errorf("sandbox %q: capability %s: %w", sb.ID(), c, ErrUnsupported)
	}
	return v, nil
}

// AsResumer returns d as a Resumer when d implements it and CapReuse is
// effective (declared, and d available), else an error wrapping
// ErrUnsupported that names the driver and capability.
func AsResumer(d Driver) (Resumer, error) { return driverAs[Resumer](d, CapReuse) }

// AsLister returns d as a Lister when d implements it and CapList is
// effective, else an error wrapping ErrUnsupported.
func AsLister(d Driver) (Lister, error) { return driverAs[Lister](d, CapList) }

// AsDestroyer returns d as a Destroyer when d implements it and
// CapDestroyByID is effective, else an error wrapping ErrUnsupported.
func AsDestroyer(d Driver) (Destroyer, error) { return driverAs[Destroyer](d, CapDestroyByID) }

// AsTemplateDeleter returns d as a TemplateDeleter when d implements it and
// CapTemplateDelete is effective, else an error wrapping ErrUnsupported.
func AsTemplateDeleter(d Driver) (TemplateDeleter, error) {
	return driverAs[TemplateDeleter](d, CapTemplateDelete)
}

// AsStreamExecer returns the live sandbox sb as a StreamExecer when sb
// implements it and narrowed does not hold CapStreamExec, else an error
// wrapping ErrUnsupported that names the sandbox and capability. Pass
// Narrowing(driver, policy) as narrowed to honour the driver's declaration.
func AsStreamExecer(sb Sandbox, narrowed Set) (StreamExecer, error) {
	return sandboxAs[StreamExecer](sb, narrowed, CapStreamExec)
}

// AsImageReporter returns the live sandbox sb as an ImageReporter when sb
// implements it and narrowed does not hold CapImageIdentity, else an error
// wrapping ErrUnsupported.
func AsImageReporter(sb Sandbox, narrowed Set) (ImageReporter, error) {
	return sandboxAs[ImageReporter](sb, narrowed, CapImageIdentity)
}

// AsTerminal returns the live sandbox sb as a Terminal when sb implements it
// and narrowed does not hold CapTerminal, else an error wrapping
// ErrUnsupported.
func AsTerminal(sb Sandbox, narrowed Set) (Terminal, error) {
	return sandboxAs[Terminal](sb, narrowed, CapTerminal)
}

// AsCapturer returns the live sandbox sb as a Capturer when sb implements it
// and narrowed does not hold CapTemplateCapture, else an error wrapping
// ErrUnsupported.
func AsCapturer(sb Sandbox, narrowed Set) (Capturer, error) {
	return sandboxAs[Capturer](sb, narrowed, CapTemplateCapture)
}

// AsRunnerHost returns the live sandbox sb as a RunnerHost when sb
// implements it and narrowed does not hold CapRunnerIngress, else an error
// wrapping ErrUnsupported.
func AsRunnerHost(sb Sandbox, narrowed Set) (RunnerHost, error) {
	return sandboxAs[RunnerHost](sb, narrowed, CapRunnerIngress)
}

// AsArchReporter returns d as an ArchReporter when d implements it, else
// an error wrapping ErrUnsupported that names the driver: it cannot say
// its sandboxes' architecture before allocating one. Like health, this is
// no capability: it reads neither the declaration nor Available.
func AsArchReporter(d Driver) (ArchReporter, error) {
	ar, ok := d.(ArchReporter)
	if !ok {
		return nil, fmt.Errorf("driver %q: reports no architecture before allocation: %w", d.Name(), ErrUnsupported)
	}
	return ar, nil
}

// AsHealthChecker returns d as a HealthChecker when d implements it, else
// an error wrapping ErrUnsupported that names the driver: its provider has
// no health of its own (see HealthChecker). Health is no capability, so
// unlike the other As* helpers it reads neither the declaration nor
// Available.
func AsHealthChecker(d Driver) (HealthChecker, error) {
	hc, ok := d.(HealthChecker)
	if !ok {
		return nil, fmt.Errorf("driver %q: no provider health of its own: %w", d.Name(), ErrUnsupported)
	}
	return hc, nil
}

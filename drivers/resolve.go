package drivers

import (
	"fmt"
	"io"
)

// This file holds every type assertion on the optional interfaces, so that
// capability resolution (CAP-2) has one home.

// Implemented returns the capabilities d really provides: CapExec always,
// driver-level capabilities when d implements their interface, and
// sandbox-level capabilities when d.Prototype() does. It never calls a
// method that does I/O.
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
	sb := d.Prototype()
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
	if _, ok := sb.(RunnerIngress); ok {
		s = s.With(CapRunnerIngress)
	}
	return s
}

// CloseDriver closes d when it implements io.Closer (see Closer) and
// returns its error wrapped with the driver's name; otherwise it does
// nothing and returns nil.
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

// Effective returns the capabilities of d that a caller may use: declared
// AND implemented AND NOT narrowed (CAP-2). Narrowing (by config, lease
// policy or an unavailable provider) only removes; nothing can add a
// capability the driver does not both declare and implement. An unavailable
// driver (see Available) has no effective capabilities. Effective does no I/O.
func Effective(d Driver, narrowed Set) Set {
	if Available(d) != nil {
		return 0
	}
	return d.Capabilities().Declared.Intersect(Implemented(d)).Without(narrowed)
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

func unsupported(d Driver, c Capability) error {
	return fmt.Errorf("driver %q: capability %s: %w", d.Name(), c, ErrUnsupported)
}

func driverAs[T any](d Driver, c Capability) (T, error) {
	var zero T
	if !Effective(d, 0).Has(c) {
		return zero, unsupported(d, c)
	}
	v, ok := d.(T)
	if !ok {
		return zero, unsupported(d, c)
	}
	return v, nil
}

func sandboxAs[T any](d Driver, sb Sandbox, c Capability) (T, error) {
	var zero T
	if !Effective(d, 0).Has(c) {
		return zero, unsupported(d, c)
	}
	v, ok := sb.(T)
	if !ok {
		return zero, unsupported(d, c)
	}
	return v, nil
}

// AsResumer returns d as a Resumer when CapReuse is effective, else an error
// wrapping ErrUnsupported that names the driver and capability.
func AsResumer(d Driver) (Resumer, error) { return driverAs[Resumer](d, CapReuse) }

// AsLister returns d as a Lister when CapList is effective, else ErrUnsupported.
func AsLister(d Driver) (Lister, error) { return driverAs[Lister](d, CapList) }

// AsDestroyer returns d as a Destroyer when CapDestroyByID is effective, else ErrUnsupported.
func AsDestroyer(d Driver) (Destroyer, error) { return driverAs[Destroyer](d, CapDestroyByID) }

// AsTemplateDeleter returns d as a TemplateDeleter when CapTemplateDelete is
// effective, else ErrUnsupported.
func AsTemplateDeleter(d Driver) (TemplateDeleter, error) {
	return driverAs[TemplateDeleter](d, CapTemplateDelete)
}

// AsStreamExecer returns sb (a sandbox of d) as a StreamExecer when
// CapStreamExec is effective for d, else ErrUnsupported.
func AsStreamExecer(d Driver, sb Sandbox) (StreamExecer, error) {
	return sandboxAs[StreamExecer](d, sb, CapStreamExec)
}

// AsImageReporter returns sb as an ImageReporter when CapImageIdentity is
// effective for d, else ErrUnsupported.
func AsImageReporter(d Driver, sb Sandbox) (ImageReporter, error) {
	return sandboxAs[ImageReporter](d, sb, CapImageIdentity)
}

// AsTerminal returns sb as a Terminal when CapTerminal is effective for d,
// else ErrUnsupported.
func AsTerminal(d Driver, sb Sandbox) (Terminal, error) {
	return sandboxAs[Terminal](d, sb, CapTerminal)
}

// AsCapturer returns sb as a Capturer when CapTemplateCapture is effective
// for d, else ErrUnsupported.
func AsCapturer(d Driver, sb Sandbox) (Capturer, error) {
	return sandboxAs[Capturer](d, sb, CapTemplateCapture)
}

// AsRunnerIngress returns sb as a RunnerIngress when CapRunnerIngress is
// effective for d, else ErrUnsupported.
func AsRunnerIngress(d Driver, sb Sandbox) (RunnerIngress, error) {
	return sandboxAs[RunnerIngress](d, sb, CapRunnerIngress)
}

package drivers

import (
	"github.com/berthdev/berth/drivers/config"

	"fmt"
	"io"
	"strings"
)

// This file holds every type assertion on the optional interfaces, so that
// capability resolution (CAP-2) has one home. Driver-level capabilities come
// from assertions on the driver, sandbox-level ones from assertions on the
// live sandbox (the database/sql way); the declared set (Capabilities) is
// what discovery reads without allocating anything (CAP-1), and the
// conformance suite proves declared == implemented for every driver.

// implemented returns CapExec plus the driver-level capabilities d really
// provides, by type assertion on d. It never calls a method of d.
// Sandbox-level capabilities are read from a live sandbox (SandboxAs).
func implemented(d Driver) Set {
	s := NewSet(CapExec)
	if _, ok := d.(Resumer); ok {
		s |= NewSet(CapReattach, CapReuse)
	}
	if _, ok := d.(Lister); ok {
		s |= NewSet(CapList)
	}
	if _, ok := d.(Destroyer); ok {
		s |= NewSet(CapDestroyByID)
	}
	if _, ok := d.(TemplateDeleter); ok {
		s |= NewSet(CapTemplateDelete)
	}
	return s
}

// closeDriver closes d when it implements io.Closer and returns its error
// wrapped with the driver's name; otherwise it does nothing and returns
// nil. io.Closer is an optional interface that may be implemented by a
// Driver: Close releases what the driver holds for its whole life (engine
// clients, pooled connections); sandboxes obtained before must not be used
// afterwards. A Driver that does not implement it holds nothing that needs
// closing.
func closeDriver(d Driver) error {
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
// what a live sandbox implements), and SandboxAs for sandbox
// interfaces check the live sandbox again. Narrowing (by config, lease
// policy or an unavailable provider) only removes; nothing adds a
// capability the driver does not declare. An unavailable driver (see
// Available) has no effective capabilities. Effective does no I/O.
func Effective(d Driver, narrowed Set) Set {
	if Available(d) != nil {
		return 0
	}
	eff := d.Capabilities().Declared & (implemented(d) | sandboxLevel) &^ narrowed
	if !eff.Has(CapReattach) {
		eff &^= NewSet(CapReuse) // reuse resumes through reattach's Resumer
	}
	return eff
}

// Narrowing returns the narrowing to pass to SandboxAs for the live
// sandboxes of d: every capability that is not effective for d under
// narrowed (undeclared, not implemented by the driver, narrowed, or all of
// them when d is unavailable). It does no I/O.
func Narrowing(d Driver, narrowed Set) Set {
	return allCapabilities &^ Effective(d, narrowed)
}

// ConfigNarrowing returns the capabilities that cfg narrows away for d
// (ConfigNarrower), or the empty set when d does not implement it; pass it
// to Effective and Narrowing to plan with a config. It does no I/O.
func ConfigNarrowing(d Driver, cfg config.Config) Set {
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

// DriverAs returns d as T, one of the driver-level optional interfaces
// (Resumer, Lister, Destroyer, TemplateDeleter, HealthChecker,
// ArchReporter), when d implements it and, where T is the interface of a
// capability (Resumer: CapReattach, Lister: CapList, Destroyer:
// CapDestroyByID, TemplateDeleter: CapTemplateDelete), that capability is
// effective (declared, and d available); else an error wrapping
// ErrUnsupported that names the driver and the capability or interface.
// HealthChecker and ArchReporter are no capabilities: for them DriverAs
// reads neither the declaration nor Available (a provider without health
// of its own, a driver that cannot say its sandboxes' architecture before
// allocating one).
//
//	r, err := drivers.DriverAs[drivers.Resumer](d)
func DriverAs[T any](d Driver) (T, error) {
	var zero T
	v, ok := d.(T)
	c, isCap := capabilityOf[T]()
	switch {
	case isCap && (!ok || !Effective(d, 0).Has(c)):
		return zero, fmt.Errorf("driver %q: capability %s: %w", d.Name(), c, ErrUnsupported)
	case !ok:
		return zero, fmt.Errorf("driver %q: %s: %w", d.Name(), missingText[T](), ErrUnsupported)
	}
	return v, nil
}

// SandboxAs returns the live sandbox sb as T, one of the sandbox-level
// optional interfaces (StreamExecer: CapStreamExec, ImageReporter:
// CapImageIdentity, Terminal: CapTerminal, Capturer: CapTemplateCapture,
// RunnerHost: CapRunnerIngress, Files: CapFiles), when sb implements it and narrowed does
// not hold its capability, else an error wrapping ErrUnsupported that names
// the sandbox and capability. Pass Narrowing(driver, policy) as narrowed
// to honour the driver's declaration.
//
//	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, drivers.Narrowing(d, 0))
func SandboxAs[T any](sb Sandbox, narrowed Set) (T, error) {
	var zero T
	c, isCap := capabilityOf[T]()
	if isCap && narrowed.Has(c) {
		return zero, fmt.Errorf("sandbox %q: capability %s is narrowed away: %w", sb.ID(), c, ErrUnsupported)
	}
	v, ok := sb.(T)
	switch {
	case !ok && isCap:
		return zero, fmt.Errorf("sandbox %q: capability %s: %w", sb.ID(), c, ErrUnsupported)
	case !ok:
		return zero, fmt.Errorf("sandbox %q: %s: %w", sb.ID(), missingText[T](), ErrUnsupported)
	}
	return v, nil
}

// capabilityOf returns the capability whose optional interface T is, and
// false for any other type.
func capabilityOf[T any]() (Capability, bool) {
	switch any((*T)(nil)).(type) {
	case *Resumer:
		return CapReattach, true
	case *Lister:
		return CapList, true
	case *Destroyer:
		return CapDestroyByID, true
	case *TemplateDeleter:
		return CapTemplateDelete, true
	case *StreamExecer:
		return CapStreamExec, true
	case *ImageReporter:
		return CapImageIdentity, true
	case *Terminal:
		return CapTerminal, true
	case *Capturer:
		return CapTemplateCapture, true
	case *RunnerHost:
		return CapRunnerIngress, true
	case *Files:
		return CapFiles, true
	}
	return 0, false
}

// missingText says what a value lacks that does not implement T, an
// interface of no capability.
func missingText[T any]() string {
	switch any((*T)(nil)).(type) {
	case *HealthChecker:
		return "no provider health of its own"
	case *ArchReporter:
		return "reports no architecture before allocation"
	case *ImageLister:
		return "lists no provider images to pick from"
	}
	return "does not implement " + strings.TrimPrefix(fmt.Sprintf("%T", (*T)(nil)), "*")
}

package drivers_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
)

// countingDriver counts every call of a method that would do I/O.
type countingDriver struct {
	name     string
	declared drivers.Set
	unavail  error
	ioCalls  *atomic.Int64
}

func (d *countingDriver) Name() string { return d.name }
func (d *countingDriver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindSandbox, Declared: d.declared}
}
func (d *countingDriver) Schema() *config.Schema { return &config.Schema{Driver: d.name} }
func (d *countingDriver) Acquire(context.Context, config.Config, drivers.AcquireRequest) (drivers.Sandbox, error) {
	d.ioCalls.Add(1)
	return nil, errors.New("counting driver: acquire")
}

// resumingDriver implements Resumer and Lister.
type resumingDriver struct{ countingDriver }

func (d *resumingDriver) Resume(context.Context, config.Config, string) (drivers.Sandbox, error) {
	d.ioCalls.Add(1)
	return nil, errors.New("resume")
}
func (d *resumingDriver) List(context.Context, config.Config, map[string]string) ([]drivers.SandboxInfo, error) {
	d.ioCalls.Add(1)
	return nil, nil
}

// unavailableDriver reports itself unavailable.
type unavailableDriver struct{ resumingDriver }

func (d *unavailableDriver) Availability() error { return d.unavail }

type plainSandbox struct{}

func (*plainSandbox) ID() string { return "plain" }
func (*plainSandbox) Exec(context.Context, drivers.Command) (*drivers.Result, error) {
	panic("Exec called during capability resolution")
}
func (*plainSandbox) Release(context.Context, drivers.Disposition) (drivers.Receipt, error) {
	panic("Release called during capability resolution")
}

type streamSandbox struct{ plainSandbox }

func (*streamSandbox) Start(context.Context, drivers.Command, io.Writer, io.Writer) (drivers.Process, error) {
	panic("Start called during capability resolution")
}

// imageSandbox implements ImageReporter.
type imageSandbox struct{ plainSandbox }

func (*imageSandbox) ImageIdentity(context.Context) (images.Identity, error) {
	panic("ImageIdentity called during capability resolution")
}

// all is every capability.
func all() drivers.Set {
	var s drivers.Set
	for c := drivers.CapExec; c <= drivers.CapReattach; c++ {
		s |= drivers.NewSet(c)
	}
	return s
}

// CAP-2: effective = declared AND implemented AND not narrowed.
func TestEffective(t *testing.T) {
	t.Parallel()
	calls := &atomic.Int64{}
	base := countingDriver{name: "d", ioCalls: calls}
	withDecl := func(s drivers.Set) countingDriver { b := base; b.declared = s; return b }
	sb := drivers.NewSet(drivers.CapStreamExec, drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapTemplateCapture, drivers.CapRunnerIngress, drivers.CapFiles) // taken from the declaration: only a live sandbox shows it
	for _, tc := range []struct {
		name     string
		d        drivers.Driver
		narrowed drivers.Set
		want     drivers.Set
	}{
		{"declares everything, implements nothing at driver level", &countingDriver{name: "d", declared: all(), ioCalls: calls}, 0, drivers.NewSet(drivers.CapExec) | sb},
		{"implements reuse and list without declaring", &resumingDriver{withDecl(drivers.NewSet(drivers.CapExec))}, 0, drivers.NewSet(drivers.CapExec)},
		{"declares and implements", &resumingDriver{withDecl(all())}, 0, drivers.NewSet(drivers.CapExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList) | sb},
		{"narrowing removes", &resumingDriver{withDecl(all())}, drivers.NewSet(drivers.CapList, drivers.CapStreamExec), drivers.NewSet(drivers.CapExec, drivers.CapReattach, drivers.CapReuse) | sb&^drivers.NewSet(drivers.CapStreamExec)},
		{"reattach only, reuse undeclared", &resumingDriver{withDecl(drivers.NewSet(drivers.CapExec, drivers.CapReattach))}, 0, drivers.NewSet(drivers.CapExec, drivers.CapReattach)},
		{"reuse without reattach is not effective", &resumingDriver{withDecl(drivers.NewSet(drivers.CapExec, drivers.CapReuse))}, 0, drivers.NewSet(drivers.CapExec)},
		{"narrowing reattach takes reuse too", &resumingDriver{withDecl(all())}, drivers.NewSet(drivers.CapReattach), drivers.NewSet(drivers.CapExec, drivers.CapList) | sb},
		{"narrowing what is absent adds nothing", &resumingDriver{withDecl(drivers.NewSet(drivers.CapExec))}, drivers.NewSet(drivers.CapTerminal), drivers.NewSet(drivers.CapExec)},
		{"sandbox capability undeclared is not effective", &countingDriver{name: "d", declared: drivers.NewSet(drivers.CapExec, drivers.CapImageIdentity), ioCalls: calls}, 0, drivers.NewSet(drivers.CapExec, drivers.CapImageIdentity)},
		{"unavailable driver has none", &unavailableDriver{resumingDriver{countingDriver{name: "u", declared: all(), unavail: errors.New("no key"), ioCalls: calls}}}, 0, 0},
		{"available reporter with nil error", &unavailableDriver{resumingDriver{withDecl(all())}}, 0, drivers.NewSet(drivers.CapExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList) | sb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := drivers.Effective(tc.d, tc.narrowed); got != tc.want {
				t.Errorf("Effective = %s, want %s", got, tc.want)
			}
		})
	}
	t.Cleanup(func() {
		if n := calls.Load(); n != 0 { // CAP-1
			t.Errorf("resolution called I/O methods %d times", n)
		}
	})
}

func TestNarrowingOnlyRemoves(t *testing.T) {
	t.Parallel()
	d := &resumingDriver{countingDriver{name: "d", declared: all(), ioCalls: &atomic.Int64{}}}
	full := drivers.Effective(d, 0)
	for _, c := range all().List() {
		narrowed := drivers.Effective(d, drivers.NewSet(c))
		if narrowed.Has(c) || narrowed&^full != 0 {
			t.Errorf("narrowing %s gives %s from %s", c, narrowed, full)
		}
	}
}

// CAP-1: listing drivers and resolving helpers never allocate.
func TestResolvingAndListingCallNothing(t *testing.T) {
	t.Parallel()
	calls := &atomic.Int64{}
	r := &resumingDriver{countingDriver{name: "a", declared: all(), ioCalls: calls}}
	u := &unavailableDriver{resumingDriver{countingDriver{name: "b", declared: all(), unavail: errors.New("engine down"), ioCalls: calls}}}
	reg := drivers.NewRegistry(r, u)
	infos := reg.List()
	if len(infos) != 2 || !infos[0].Available || infos[1].Available || infos[1].Effective != 0 || infos[1].Reason == "" {
		t.Errorf("List = %+v", infos)
	}
	if _, err := drivers.DriverAs[drivers.Resumer](r); err != nil {
		t.Errorf("AsResumer(a): %v", err)
	}
	if _, err := drivers.DriverAs[drivers.Resumer](u); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("AsResumer(unavailable): %v, want ErrUnsupported", err)
	}
	if _, err := drivers.DriverAs[drivers.Destroyer](r); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("AsDestroyer(not implemented): %v, want ErrUnsupported", err)
	}
	if _, err := reg.Lookup("missing"); !errors.Is(err, drivers.ErrUnavailable) {
		t.Errorf("Lookup(missing): %v, want ErrUnavailable", err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("listing called I/O methods %d times", n)
	}
}

func TestRegistryPanics(t *testing.T) {
	t.Parallel()
	calls := &atomic.Int64{}
	for _, tc := range []struct {
		name string
		ds   []drivers.Driver
	}{
		{"duplicate", []drivers.Driver{&countingDriver{name: "x", ioCalls: calls}, &countingDriver{name: "x", ioCalls: calls}}},
		{"empty name", []drivers.Driver{&countingDriver{name: "", ioCalls: calls}}},
		{"spaces", []drivers.Driver{&countingDriver{name: " x", ioCalls: calls}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if recover() == nil {
					t.Errorf("NewRegistry did not panic")
				}
			}()
			drivers.NewRegistry(tc.ds...)
		})
	}
	if got := drivers.NewRegistry(&countingDriver{name: "b", ioCalls: calls}, &countingDriver{name: "a", ioCalls: calls}).List(); got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("List = %+v, want sorted by name", got)
	}
}

// hidingWrapper wraps a sandbox without forwarding its optional interfaces.
type hidingWrapper struct{ drivers.Sandbox }

// CONVENTIONS 17: sandbox capabilities come from the live sandbox: what it
// implements, minus the caller's narrowing; a wrapper that hides an
// interface hides the capability.
func TestSandboxCapabilitiesComeFromTheLiveSandbox(t *testing.T) {
	t.Parallel()
	exec := drivers.NewSet(drivers.CapExec)
	for _, tc := range []struct {
		name string
		sb   drivers.Sandbox
		want drivers.Set
	}{
		{"plain", &plainSandbox{}, exec},
		{"streaming", &streamSandbox{}, exec | drivers.NewSet(drivers.CapStreamExec)},
		{"image reporter", &imageSandbox{}, exec | drivers.NewSet(drivers.CapImageIdentity)},
		{"wrapper hides the interface", hidingWrapper{&imageSandbox{}}, exec},
	} {
		got := exec
		if _, err := drivers.SandboxAs[drivers.StreamExecer](tc.sb, 0); err == nil {
			got |= drivers.NewSet(drivers.CapStreamExec)
		}
		if _, err := drivers.SandboxAs[drivers.ImageReporter](tc.sb, 0); err == nil {
			got |= drivers.NewSet(drivers.CapImageIdentity)
		}
		if got != tc.want {
			t.Errorf("%s: implements %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := drivers.SandboxAs[drivers.StreamExecer](&streamSandbox{}, 0); err != nil {
		t.Errorf("AsStreamExecer of a streaming sandbox: %v", err)
	}
	_, err := drivers.SandboxAs[drivers.StreamExecer](&streamSandbox{}, drivers.NewSet(drivers.CapStreamExec))
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), `"plain"`) {
		t.Errorf("AsStreamExecer narrowed away: %v, want ErrUnsupported naming the sandbox", err)
	}
	if _, err := drivers.SandboxAs[drivers.ImageReporter](&streamSandbox{}, 0); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("AsImageReporter of a sandbox without it: %v, want ErrUnsupported", err)
	}
	// Narrowing(d) withholds what d does not declare or cannot use.
	calls := &atomic.Int64{}
	d := &countingDriver{name: "d", declared: drivers.NewSet(drivers.CapExec, drivers.CapImageIdentity), ioCalls: calls}
	if _, err := drivers.SandboxAs[drivers.ImageReporter](&imageSandbox{}, drivers.Narrowing(d, 0)); err != nil {
		t.Errorf("AsImageReporter with the driver's narrowing: %v", err)
	}
	if _, err := drivers.SandboxAs[drivers.StreamExecer](&streamSandbox{}, drivers.Narrowing(d, 0)); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("AsStreamExecer of an undeclared capability: %v, want ErrUnsupported", err)
	}
	down := &unavailableDriver{resumingDriver{countingDriver{name: "u", declared: all(), unavail: errors.New("engine down"), ioCalls: calls}}}
	if got := drivers.Narrowing(down, 0); got != all() {
		t.Errorf("Narrowing of an unavailable driver = %s, want every capability", got)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("resolution called I/O methods %d times", n)
	}
}

type healthDriver struct{ countingDriver }

func (d *healthDriver) Endpoint(config.Config) string                    { return "engine" }
func (d *healthDriver) CheckHealth(context.Context, config.Config) error { return nil }

// AsHealthChecker has the shape of the other As* helpers: the interface or
// an error wrapping ErrUnsupported that names the driver.
func TestAsHealthChecker(t *testing.T) {
	hd := &healthDriver{countingDriver{name: "healthy"}}
	if hc, err := drivers.DriverAs[drivers.HealthChecker](hd); err != nil || hc.Endpoint(nil) != "engine" {
		t.Errorf("AsHealthChecker(health driver) = %v, %v; want the driver", hc, err)
	}
	hc, err := drivers.DriverAs[drivers.HealthChecker](&countingDriver{name: "plain"})
	if !errors.Is(err, drivers.ErrUnsupported) || hc != nil || !strings.Contains(err.Error(), `"plain"`) {
		t.Errorf("AsHealthChecker(plain driver) = %v, %v; want nil and an ErrUnsupported naming the driver", hc, err)
	}
}

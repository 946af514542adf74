package drivertest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
)

type harness struct{ d drivers.Driver }

func (h harness) Driver() drivers.Driver { return h.d }
func (h harness) Config() drivers.Config { return drivers.Config{} }
func (h harness) Close()                 {}

// execOnly is an honest driver with no optional interface: it forwards the
// required methods to a fake and hides every optional one, on the driver
// and on its sandboxes, and declares only exec.
type execOnly struct{ f *fake.Driver }

func (d execOnly) Name() string { return d.f.Name() }
func (d execOnly) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindSandbox, Declared: drivers.NewSet(drivers.CapExec)}
}
func (d execOnly) Schema() *drivers.ConfigSchema { return d.f.Schema() }
func (d execOnly) Acquire(ctx context.Context, cfg drivers.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	sb, err := d.f.Acquire(ctx, cfg, req)
	if err != nil {
		return nil, err
	}
	return plainSandbox{sb}, nil
}

// plainSandbox hides every optional interface of the sandbox it wraps.
type plainSandbox struct{ sb drivers.Sandbox }

func (s plainSandbox) ID() string { return s.sb.ID() }
func (s plainSandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	return s.sb.Exec(ctx, cmd)
}
func (s plainSandbox) Release(ctx context.Context, d drivers.Disposition) (drivers.Receipt, error) {
	return s.sb.Release(ctx, d)
}

// The suite's gating: a driver that declares and implements only exec
// passes the core contract and skips every optional subtest.
func TestSuiteGatesOnDeclaredCapabilities(t *testing.T) {
	drivertest.RunConformanceTests(t, func(context.Context, *testing.T) (drivertest.Harness, error) {
		return harness{execOnly{fake.New(&fake.Options{Name: "fake-minimal"})}}, nil
	})
}

// wrongDriverEnv selects, in a child test process, the deliberately wrong
// driver that TestSuiteOnWrongDriver runs the suite on.
const wrongDriverEnv = "BERTH_DRIVERTEST_WRONG_DRIVER"

// wrongDrivers are fakes that implement an optional interface they do not
// declare (fake.Options.Undeclared): one at sandbox level, one at driver
// level.
var wrongDrivers = map[string]struct {
	undeclared drivers.Capability
	want       string // in the suite's failure
}{
	"terminal": {drivers.CapTerminal, `does not declare terminal although its live sandbox implements it`},
	"reuse":    {drivers.CapReuse, `does not declare reuse although its driver implements it`},
}

// TestSuiteOnWrongDriver is the child half of
// TestSuiteFailsADriverThatImplementsWhatItDoesNotDeclare; run directly it
// does nothing.
func TestSuiteOnWrongDriver(t *testing.T) {
	name := os.Getenv(wrongDriverEnv)
	if name == "" {
		t.Skip("runs only as the child of TestSuiteFailsADriverThatImplementsWhatItDoesNotDeclare")
	}
	w := wrongDrivers[name]
	drivertest.RunConformanceTests(t, func(context.Context, *testing.T) (drivertest.Harness, error) {
		return harness{fake.New(&fake.Options{Name: "fake-wrong", Undeclared: drivers.NewSet(w.undeclared)})}, nil
	})
}

// CAP-2, CONVENTIONS 17: the suite asserts declared == implemented, so a
// driver that implements an optional interface without declaring it fails
// the suite, naming the capability.
func TestSuiteFailsADriverThatImplementsWhatItDoesNotDeclare(t *testing.T) {
	t.Parallel()
	for name, w := range wrongDrivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteOnWrongDriver$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), wrongDriverEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if _, failed := err.(*exec.ExitError); !failed {
				t.Fatalf("the suite on a driver that does not declare %s: err = %v, want a failing test run; output:\n%s", w.undeclared, err, out)
			}
			if !strings.Contains(string(out), w.want) {
				t.Errorf("the suite's failure does not say %q; output:\n%s", w.want, out)
			}
		})
	}
}

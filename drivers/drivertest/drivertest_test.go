package drivertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/fakectl"
)

type harness struct{ d drivers.Driver }

func (h harness) Driver() drivers.Driver { return h.d }
func (h harness) Config() config.Config  { return config.Config{} }
func (h harness) Close()                 {}

// execOnly is an honest driver with no optional interface: it forwards the
// required methods to a fake and hides every optional one, on the driver
// and on its sandboxes, and declares only exec. It refuses a Runner, as a
// driver without runner ingress must (unless acceptsRunner: a wrong one).
type execOnly struct {
	f             *fake.Driver
	acceptsRunner bool
}

func (d execOnly) Name() string { return d.f.Name() }
func (d execOnly) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindSandbox, Declared: drivers.NewSet(drivers.CapExec)}
}
func (d execOnly) Schema() *config.Schema { return d.f.Schema() }
func (d execOnly) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if req.Runner != nil && !d.acceptsRunner {
		return nil, fmt.Errorf("%s: capability %s: %w", d.Name(), drivers.CapRunnerIngress, drivers.ErrUnsupported)
	}
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

// suiteScripts are the conformance suite's sh -c scripts of more than one
// command (drivertest.ScriptHandlers), as fake handlers: the fake's
// built-in sh -c runs one command.
var suiteScripts = func() map[string]fake.HandlerFunc {
	hs := map[string]fake.HandlerFunc{}
	for script, h := range drivertest.ScriptHandlers() {
		hs[script] = func(ctx context.Context, inv fake.Invocation) (int, error) {
			return h(ctx, inv.Stdin, inv.Stdout, inv.Stderr)
		}
	}
	return hs
}()

// The suite's gating: a driver that declares and implements only exec
// passes the core contract and skips every optional subtest.
func TestSuiteGatesOnDeclaredCapabilities(t *testing.T) {
	drivertest.RunConformanceTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) {
		return harness{execOnly{f: fake.New(&fake.Options{Name: "fake-minimal", Handlers: suiteScripts})}}, nil
	})
}

// wrongDriverEnv selects, in a child test process, the deliberately wrong
// driver that TestSuiteOnWrongDriver runs the suite on.
const wrongDriverEnv = "BERTH_DRIVERTEST_WRONG_DRIVER"

// wrongDrivers are deliberately wrong drivers, each with the failure the
// suite must report: fakes that implement an optional interface they do not
// declare (fake.Options.Undeclared), one at sandbox level, one at driver
// level; a driver without runner ingress that accepts a Runner; a wrapper
// that loses the sentinel of an unknown image; a fake that reports its dead
// control plane as an unreachable host; and four template deletes that
// break the in-use contract (inuse_test.go).
var wrongDrivers = map[string]struct {
	harness drivertest.Harness
	want    string // in the suite's failure
}{
	"terminal": {
		harness{fake.New(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts, Undeclared: drivers.NewSet(drivers.CapTerminal)})},
		`does not declare terminal although its live sandbox implements it`,
	},
	"reattach": {
		harness{fake.New(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts, Undeclared: drivers.NewSet(drivers.CapReattach)})},
		`does not declare reattach although its driver implements it`,
	},
	"reuse without reattach": {
		harness{fake.New(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts, Undeclared: drivers.NewSet(drivers.CapReattach)})},
		`declares reuse without reattach`,
	},
	"plain image error": {
		brokenHarness{harness{plainErrors{fake.New(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts})}}, drivertest.FailUnknownImage},
		`unknown image: driver "fake-wrong": err = fake: image "registry.example/none:1": no such tag: image not found; want it to wrap image not found (errors.Is)`,
	},
	"runner accepted without ingress": {
		harness{execOnly{f: fake.New(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts}), acceptsRunner: true}},
		`driver "fake-wrong" does not offer runner_ingress, yet Acquire with a Runner succeeded`,
	},
	"dead control plane as unreachable": {
		brokenHarness{harness{fake.New(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts})}, drivertest.FailUnreachable},
		`unreachable: driver "fake-wrong": err = fake: create (call 1): connection refused: target unreachable; want it to wrap provider unavailable (errors.Is)`,
	},
	"in use with a confirmed receipt": {wrongInUse(inUseConfirmed), "DeleteTemplate refused with ErrInUse returned a confirmed receipt"},
	"in use yet removed":              {wrongInUse(inUseRemoved), "Acquire of the template after DeleteTemplate refused it as in use"},
	"in use forever":                  {wrongInUse(inUseForever), "DeleteTemplate #1: fake: delete template"},
	"in use unclassified":             {wrongInUse(inUseUnclassified), "want success or ErrInUse"},
}

// plainErrors is a wrong driver: when the fake's Acquire fails with
// drivers.ErrImageNotFound, it returns a plain error with the same message,
// so the sentinel is lost.
type plainErrors struct{ *fake.Driver }

func (d plainErrors) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	sb, err := d.Driver.Acquire(ctx, cfg, req)
	if errors.Is(err, drivers.ErrImageNotFound) {
		return nil, errors.New(err.Error())
	}
	return sb, err
}

// brokenHarness adds drivertest.FailureHarness to a harness, for one
// failure: an unknown image, or a control plane said to be dead (Layer
// ErrUnavailable) whose fake answers with drivers.ErrUnreachable instead.
type brokenHarness struct {
	harness
	only drivertest.Failure
}

func (h brokenHarness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	if f != h.only {
		return drivertest.Broken{}, false
	}
	switch f {
	case drivertest.FailUnknownImage:
		return drivertest.Broken{Config: map[string]any{"image": "registry.example/none:1"}}, true
	case drivertest.FailUnreachable:
		wrong := fmt.Errorf("connection refused: %w", drivers.ErrUnreachable)
		d := fake.New(&fake.Options{Name: "fake-wrong"})
		fakectl.Of(d).Inject(fakectl.Fault{Op: "create", Err: wrong})
		return drivertest.Broken{Driver: d, Config: map[string]any{}, Layer: drivers.ErrUnavailable}, true
	}
	return drivertest.Broken{}, false
}

// TestSuiteOnWrongDriver is the child half of TestSuiteFailsAWrongDriver;
// run directly it
// does nothing.
func TestSuiteOnWrongDriver(t *testing.T) {
	name := os.Getenv(wrongDriverEnv)
	if name == "" {
		t.Skip("runs only as the child of TestSuiteFailsAWrongDriver")
	}
	w := wrongDrivers[name]
	drivertest.RunConformanceTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) {
		return w.harness, nil
	})
}

// CAP-2, CONVENTIONS 17, PRB-5: the suite asserts declared == implemented
// and the error table, so a driver that implements an optional interface
// without declaring it, or answers a broken config without the table's
// sentinel, fails the suite, naming what is wrong.
func TestSuiteFailsAWrongDriver(t *testing.T) {
	t.Parallel()
	for name, w := range wrongDrivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteOnWrongDriver$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), wrongDriverEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if _, failed := err.(*exec.ExitError); !failed {
				t.Fatalf("the suite on wrong driver %q: err = %v, want a failing test run; output:\n%s", name, err, out)
			}
			if !strings.Contains(string(out), w.want) {
				t.Errorf("the suite's failure does not say %q; output:\n%s", w.want, out)
			}
		})
	}
}

// badLayer says a dead control plane answers with a sentinel that is not a
// layer of the error table.
type badLayer struct{ harness }

func (h badLayer) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	return drivertest.Broken{Config: map[string]any{}, Layer: drivers.ErrAuth}, f == drivertest.FailUnreachable
}

// CheckFailure skips what does not apply and refuses, before anything is
// acquired, a harness whose unreachable layer is neither ErrUnavailable nor
// ErrUnreachable, or whose broken config comes with another driver.
func TestCheckFailureApplicability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := fake.New(nil)
	if applies, err := drivertest.CheckFailure(ctx, harness{d}, drivertest.FailUnknownImage); applies || err != nil {
		t.Errorf("a harness without FailureHarness: applies %v err %v, want false nil", applies, err)
	}
	if applies, err := drivertest.CheckFailure(ctx, badLayer{harness{d}}, drivertest.FailBadCredentials); applies || err != nil {
		t.Errorf("a failure the harness says does not apply: applies %v err %v, want false nil", applies, err)
	}
	applies, err := drivertest.CheckFailure(ctx, badLayer{harness{d}}, drivertest.FailUnreachable)
	if !applies || err == nil || !strings.Contains(err.Error(), "Layer") {
		t.Errorf("a harness with layer ErrAuth: applies %v err %v, want true and an error about Layer", applies, err)
	}
	other := brokenHarness{harness{fake.New(&fake.Options{Name: "fake-other"})}, drivertest.FailUnreachable}
	applies, err = drivertest.CheckFailure(ctx, other, drivertest.FailUnreachable)
	if !applies || err == nil || !strings.Contains(err.Error(), "not the driver under test") {
		t.Errorf("a harness whose broken driver is another one: applies %v err %v, want true and an error naming it", applies, err)
	}
	if n := fakectl.Of(d).Calls("create"); n != 0 {
		t.Errorf("%d creates, want none", n)
	}
}

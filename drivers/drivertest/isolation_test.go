package drivertest_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
)

// fakeKernel is the kernel release the fake's sandboxes report (uname -r).
const fakeKernel = "6.1.0-18-amd64"

// isoHarness adds drivertest.IsolationHarness to a harness: kernel is the
// release it says the sandboxes' host runs.
type isoHarness struct {
	harness
	kernel string
}

func (h isoHarness) HostKernel(context.Context) (string, error) { return h.kernel, nil }

// isoDriver is an exec-only driver (execOnly) that declares level and
// kind, its sandboxes answering the suite's scripts and, for each key of
// extra, that command.
type isoDriver struct {
	execOnly
	level drivers.Isolation
	kind  drivers.Kind
}

func (d isoDriver) Capabilities() drivers.Capabilities {
	c := d.execOnly.Capabilities()
	c.Kind = d.kind
	return c
}

func (d isoDriver) Isolation(config.Config) drivers.Isolation { return d.level }

func isoFake(level drivers.Isolation, extra map[string]fake.HandlerFunc) isoDriver {
	hs := maps.Clone(suiteScripts)
	maps.Copy(hs, extra)
	return isoDriver{execOnly{f: fake.New(&fake.Options{Name: "fake-wrong", Handlers: hs})}, level, drivers.KindSandbox}
}

// say is a handler that prints out and exits 0.
func say(out string) fake.HandlerFunc {
	return func(_ context.Context, inv fake.Invocation) (int, error) {
		_, err := fmt.Fprintln(inv.Stdout, out)
		return 0, err
	}
}

// gvisorLog is the first line of gVisor's kernel log.
const gvisorLog = "[   0.000000] Starting gVisor..."

// The isolation check's wrong drivers (TestSuiteFailsAWrongDriver): each
// declares more isolation than its sandbox shows.
func init() {
	type wrong = struct {
		harness drivertest.Harness
		want    string
	}
	wrongDrivers["isolation gvisor on the host's kernel"] = wrong{
		isoHarness{harness{isoFake(drivers.IsolationGVisor, nil)}, fakeKernel},
		`driver "fake-wrong" declares isolation gvisor but its sandbox measures container`,
	}
	wrongDrivers["isolation microvm under gVisor"] = wrong{
		isoHarness{harness{isoFake(drivers.IsolationMicroVM, map[string]fake.HandlerFunc{"dmesg": say(gvisorLog)})}, "6.12.0-host"},
		`driver "fake-wrong" declares isolation microvm but its sandbox measures gvisor`,
	}
	wrongDrivers["isolation microvm without evidence"] = wrong{
		isoHarness{harness{isoFake(drivers.IsolationMicroVM, nil)}, "6.12.0-host"},
		`driver "fake-wrong" declares isolation microvm but its sandbox measures gvisor`,
	}
	wrongDrivers["isolation container on a host target"] = wrong{
		harness{func() isoDriver { d := isoFake(drivers.IsolationContainer, nil); d.kind = drivers.KindHost; return d }()},
		`driver "fake-wrong" declares isolation container but its sandbox measures none`,
	}
	wrongDrivers["isolation container without the host's kernel"] = wrong{
		harness{isoFake(drivers.IsolationContainer, nil)},
		`the harness does not implement drivertest.IsolationHarness`,
	}
}

// Honest declarations pass the suite: a container on the host's kernel,
// gVisor whose log names it, a microVM whose /proc/version names its own
// kernel.
func TestSuitePassesHonestIsolation(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]isoHarness{
		"container": {harness{isoFake(drivers.IsolationContainer, nil)}, fakeKernel},
		"gvisor":    {harness{isoFake(drivers.IsolationGVisor, map[string]fake.HandlerFunc{"dmesg": say(gvisorLog)})}, "6.12.0-host"},
		"microvm": {harness{isoFake(drivers.IsolationMicroVM, map[string]fake.HandlerFunc{
			"cat /proc/version": say("Linux version 6.1.0-18-amd64 (firecracker guest)")})}, "6.12.0-host"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drivertest.RunConformanceTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) { return h, nil })
		})
	}
}

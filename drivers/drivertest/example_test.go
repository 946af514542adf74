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

// acmeHarness is what a third-party driver's test file writes: a Harness
// for its driver (here the fake under the name "acme", built to require an
// API key) that also implements FailureHarness, so that the suite checks
// the error table.
type acmeHarness struct {
	d   *fake.Driver
	raw map[string]any
}

const acmeKey = "acme-test-key"

func newAcmeHarness(_ context.Context, _ testing.TB) (drivertest.Harness, error) {
	return &acmeHarness{
		d:   fake.New(&fake.Options{Name: "acme", APIKey: acmeKey}),
		raw: map[string]any{"image": fake.DefaultImage, "api_key": acmeKey},
	}, nil
}

func (h *acmeHarness) Driver() drivers.Driver { return h.d }
func (h *acmeHarness) Close()                 {}

func (h *acmeHarness) Config() config.Config {
	cfg, err := h.d.Schema().Normalize(maps.Clone(h.raw))
	if err != nil {
		panic(err) // the harness's own config is known good
	}
	return cfg
}

// Broken returns the harness's config broken in way f; this driver has no
// remote endpoint and no host keys, so those failures do not apply.
func (h *acmeHarness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := maps.Clone(h.raw)
	switch f {
	case drivertest.FailBadCredentials:
		raw["api_key"] = "wrong-key"
	case drivertest.FailMissingCredentials:
		delete(raw, "api_key")
	case drivertest.FailUnknownImage:
		raw["image"] = "registry.example/acme/none:1"
	default:
		return drivertest.Broken{}, false
	}
	return drivertest.Broken{Config: raw}, true
}

// A third-party driver's test file passes its HarnessMaker to the suite
// and to the benchmarks:
//
//	func TestConformance(t *testing.T) { drivertest.RunConformanceTests(t, newAcmeHarness) }
//	func BenchmarkDriver(b *testing.B) { drivertest.RunBenchmarks(b, newAcmeHarness) }
//
// Here the harness is tried by hand: its config runs a POSIX sh script,
// and it says which failures of the error table apply to its driver (the
// suite checks each of those against its sentinel).
func Example_thirdPartyHarness() {
	ctx := context.Background()
	h, err := newAcmeHarness(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer h.Close()
	sb, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{})
	if err != nil {
		panic(err)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "echo hello from $0"}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: %s", h.Driver().Name(), res.Stdout)
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		panic(err)
	}
	fh := h.(drivertest.FailureHarness)
	for _, f := range []drivertest.Failure{drivertest.FailUnreachable, drivertest.FailBadCredentials,
		drivertest.FailMissingCredentials, drivertest.FailUnknownImage, drivertest.FailHostKeyMismatch} {
		if _, applies := fh.Broken(f); applies {
			fmt.Printf("%s: checked\n", f)
		} else {
			fmt.Printf("%s: does not apply\n", f)
		}
	}
	// Output:
	// acme: hello from sh
	// unreachable: does not apply
	// bad credentials: checked
	// missing credentials: checked
	// unknown image: checked
	// host key mismatch: does not apply
}

// The example's harness passes every failure of the error table that
// applies to it, as the suite checks it.
func TestAcmeHarnessFailures(t *testing.T) {
	ctx := context.Background()
	h, err := newAcmeHarness(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, f := range drivertest.Failures() {
		applies, err := drivertest.CheckFailure(ctx, h, f)
		want := f != drivertest.FailUnreachable && f != drivertest.FailHostKeyMismatch
		if applies != want || err != nil {
			t.Errorf("%s: applies %v (want %v), err %v", f, applies, want, err)
		}
	}
}

package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// RunConformanceTests runs the driver conformance suite: every driver's test
// file calls it with a HarnessMaker. Each subtest makes a fresh Harness
// and closes it at its end. Expectations on optional interfaces are gated on
// the driver's effective capabilities (drivers.Effective); a subtest for a
// capability the driver does not declare is skipped, and a driver without
// runner ingress (undeclared, or narrowed away by the harness's config) is
// checked to refuse an Acquire with a Runner before allocating anything. Errors are checked with
// errors.Is against the drivers sentinels, never by message text.
//
// The target needs a POSIX sh: commands used are echo, cat, pwd, sleep,
// exit, ln -s and sh -c, which exist in busybox (an in-process driver such as the
// fake registers the scripts of several commands). The error-table subtests (one per Failure) run when the
// harness implements FailureHarness; the parallel subtest's width is
// 32 workers unless the harness implements ParallelHarness.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	subtest(t, "capabilities are static and cheap", newHarness, testCapabilities)
	subtest(t, "declared capabilities equal those of a live sandbox", newHarness, testLiveCapabilities)
	subtest(t, "acquire exec release", newHarness, testAcquireExecRelease)
	subtest(t, "allocated callback", newHarness, testAllocated)
	subtest(t, "acquire honours a cancelled context", newHarness, testAcquireCancelled)
	subtest(t, "stdout and stderr are kept apart", newHarness, testStreamsApart)
	subtest(t, "exit codes", newHarness, testExitCodes)
	subtest(t, "env and dir are honoured", newHarness, testEnvDir)
	subtest(t, "stdin", newHarness, testStdin)
	subtest(t, "output limit truncates", newHarness, testOutputLimit)
	subtest(t, "exec after release", newHarness, testExecAfterRelease)
	subtest(t, "cancellation stops a running command promptly", newHarness, testCancel)
	subtest(t, "parallel acquire exec release", newHarness, testParallel)
	subtest(t, "declared isolation is measured", newHarness, testIsolation)
	for _, f := range failures() {
		subtest(t, "error table: "+f.String(), newHarness, testFailure(f))
	}
	gated(t, "resume of an unknown id is not found", drivers.CapReattach, newHarness, testResumeUnknown)
	gated(t, "keep then resume", drivers.CapReattach, newHarness, testKeepResume)
	gated(t, "stop then resume", drivers.CapReuse, newHarness, testStopResume)
	gated(t, "list by labels", drivers.CapList, newHarness, testList)
	gated(t, "destroy by id is idempotent", drivers.CapDestroyByID, newHarness, testDestroyByID)
	gated(t, "image identity", drivers.CapImageIdentity, newHarness, testImageIdentity)
	gated(t, "stream exec", drivers.CapStreamExec, newHarness, testStreamExec)
	gated(t, "stream exec signal kill", drivers.CapStreamExec, newHarness, testStreamKill)
	gated(t, "stream exec signals are the shared set", drivers.CapStreamExec, newHarness, testStreamSignals)
	gated(t, "stream exec cancellation", drivers.CapStreamExec, newHarness, testStreamCancel)
	gated(t, "stream exec Wait honours its context", drivers.CapStreamExec, newHarness, testStreamWaitContext)
	gated(t, "stream exec stdin copy ends with the process", drivers.CapStreamExec, newHarness, testStdinCopyEndsWithProcess)
	gated(t, "terminal", drivers.CapTerminal, newHarness, testTerminal)
	gated(t, "capture and delete template", drivers.CapTemplateCapture, newHarness, testCapture)
	gated(t, "runner ingress", drivers.CapRunnerIngress, newHarness, testRunnerIngress)
	gated(t, "a launched runner is one host process that Release ends", drivers.CapRunnerIngress, newHarness, testRunnerProcess)
	ungated(t, "acquire with a runner is refused without runner ingress", drivers.CapRunnerIngress, newHarness, testRunnerRefused)
	RunFileTests(t, newHarness)
}

// CAP-1, CAP-2: the declaration is static, cheap, and equal to what the
// driver implements at driver level.
func testCapabilities(t *testing.T, _ context.Context, h Harness) {
	d := h.Driver()
	c1, c2 := d.Capabilities(), d.Capabilities()
	if diff := cmp.Diff(c1, c2); diff != "" {
		t.Errorf("Capabilities changed between calls (-first +second):\n%s", diff)
	}
	impl, scope := implemented(d, driverLevel)
	for _, msg := range declaredMismatch(d.Name(), "driver", c1.Declared, impl, scope) {
		t.Error(msg)
	}
	if !c1.Declared.Has(drivers.CapExec) {
		t.Errorf("driver %q does not declare exec", d.Name())
	}
	if c1.Declared.Has(drivers.CapReuse) && !c1.Declared.Has(drivers.CapReattach) {
		t.Errorf("driver %q declares reuse without reattach: a stopped sandbox is resumed by id, through Resumer", d.Name())
	}
	if c1.Kind != drivers.KindSandbox && c1.Kind != drivers.KindHost {
		t.Errorf("Kind = %v, want sandbox or host", c1.Kind)
	}
	if c1.StartupBudget < 0 {
		t.Errorf("StartupBudget = %s, want >= 0", c1.StartupBudget)
	}
	if d.Name() == "" {
		t.Errorf("Name() is empty")
	}
	s := d.Schema()
	if s == nil {
		t.Fatalf("Schema() is nil")
	}
	if s2 := d.Schema(); s2 != s {
		t.Errorf("Schema() returned a different pointer on the second call")
	}
	if s.Driver != d.Name() {
		t.Errorf("Schema().Driver = %q, want %q", s.Driver, d.Name())
	}
	if s.ImageField != "" {
		f, ok := s.Field(s.ImageField)
		if !ok || f.Kind != config.KindIdentity {
			t.Errorf("Schema().ImageField %q is not an identity field", s.ImageField)
		}
	}
	if s.AccountField != "" {
		f, ok := s.Field(s.AccountField)
		if !ok || f.Kind != config.KindSecret {
			t.Errorf("Schema().AccountField %q is not a secret field", s.AccountField)
		}
	}
	for _, f := range s.Fields {
		if f.Kind == config.KindSecret && f.Default != nil {
			t.Errorf("secret field %q has a default", f.Name)
		}
	}
	// Listing through a registry reads only static data.
	info := drivers.NewRegistry(d).List()[0]
	if info.Effective&^c1.Declared != 0 {
		t.Errorf("effective %s exceeds declared %s", info.Effective, c1.Declared)
	}
	// The harness config normalizes to itself (it is already normalized).
	if _, err := s.Normalize(map[string]any(h.Config())); err != nil {
		t.Errorf("harness config does not normalize: %v", err)
	}
}

// CAP-2, CONVENTIONS 17: a live sandbox implements exactly the declared
// sandbox-level capabilities: one that implements an optional interface
// without declaring it fails, as does one that declares what it lacks.
func testLiveCapabilities(t *testing.T, ctx context.Context, h Harness) {
	d := h.Driver()
	sb := acquire(t, ctx, h, drivers.AcquireRequest{LeaseID: "conformance-" + uniqueSuffix()})
	impl, scope := implemented(sb, sandboxLevel)
	for _, msg := range declaredMismatch(d.Name(), "live sandbox", d.Capabilities().Declared, impl, scope) {
		t.Error(msg)
	}
}

// declaredMismatch compares declared and implemented within scope and
// describes each difference; nil when they agree.
func declaredMismatch(driver, what string, declared, implemented, scope drivers.Set) []string {
	declared, implemented = declared&scope, implemented&scope
	var out []string
	if extra := declared &^ implemented; extra != 0 {
		out = append(out, fmt.Sprintf("driver %q declares %s but its %s does not implement it (CAP-2)", driver, extra, what))
	}
	if missing := implemented &^ declared; missing != 0 {
		out = append(out, fmt.Sprintf("driver %q does not declare %s although its %s implements it (CAP-2)", driver, missing, what))
	}
	return out
}

func testAcquireExecRelease(t *testing.T, ctx context.Context, h Harness) {
	// The config a driver is given is read-only (drivers.Driver): the
	// lease manager hands a driver the lease record's own.
	cfg := h.Config()
	before := cfg.Clone()
	sb, err := h.Driver().Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "conformance-" + uniqueSuffix()})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { cleanup(t, h, sb) })
	defer func() {
		if diff := cmp.Diff(before, cfg); diff != "" {
			t.Errorf("Acquire, Exec or Release changed the config it was given (-before +after):\n%s", diff)
		}
	}()
	res := execOK(t, ctx, sb, drivers.Command{Argv: []string{"echo", "hello"}})
	if got := string(res.Stdout); got != "hello\n" {
		t.Errorf("echo hello: stdout = %q, want %q", got, "hello\n")
	}
	if len(res.Stderr) != 0 || res.ExitCode != 0 || res.Truncated {
		t.Errorf("echo hello: stderr %q exit %d truncated %v, want empty, 0, false", res.Stderr, res.ExitCode, res.Truncated)
	}
	r, err := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		t.Fatalf("Release(destroy): %v", err)
	}
	if r.ProviderLeaseID != sb.ID() {
		t.Errorf("receipt ProviderLeaseID = %q, want %q", r.ProviderLeaseID, sb.ID())
	}
	if !r.Proves(sb.ID(), drivers.Destroy) { // LEASE-7
		t.Errorf("receipt %+v does not prove destroy of %q", r, sb.ID())
	}
	if r.ConfirmedAt.IsZero() {
		t.Errorf("receipt has no ConfirmedAt")
	}
}

// allocatedKey marks the context given to Acquire, so that the suite sees
// that Allocated receives Acquire's context.
type allocatedKey struct{}

// LEASE-2: the provider lease id is handed out before Acquire waits, with
// Acquire's context (the callback writes to a store and may block), and
// before Acquire returns (the lease layer writes the record it is handed
// over in place while Acquire runs).
func testAllocated(t *testing.T, ctx context.Context, h Harness) {
	var mu sync.Mutex
	var ids []string
	returned := false
	actx := context.WithValue(ctx, allocatedKey{}, "acquire")
	sb := acquire(t, actx, h, drivers.AcquireRequest{Allocated: func(cbctx context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, id)
		if cbctx.Value(allocatedKey{}) != "acquire" {
			t.Errorf("Allocated(%q) got a context that is not derived from Acquire's", id)
		}
		if returned {
			t.Errorf("Allocated(%q) was called after Acquire returned", id)
		}
		return nil
	}})
	mu.Lock()
	defer mu.Unlock()
	returned = true
	if diff := cmp.Diff([]string{sb.ID()}, ids); diff != "" {
		t.Errorf("Allocated calls (-want +got):\n%s", diff)
	}

	refuse := errors.New("conformance: refused by the lease store")
	_, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{Allocated: func(context.Context, string) error { return refuse }})
	if !errors.Is(err, refuse) {
		t.Errorf("Acquire with a failing Allocated: err = %v, want it to wrap the callback's error", err)
	}
}

func testAcquireCancelled(t *testing.T, ctx context.Context, h Harness) {
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	var sb drivers.Sandbox
	var err error
	within(t, promptBound, "Acquire with a cancelled context", func() {
		sb, err = h.Driver().Acquire(cctx, h.Config(), drivers.AcquireRequest{})
	})
	if err == nil {
		cleanup(t, h, sb)
		t.Fatalf("Acquire with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a cancelled context: err = %v, want it to wrap context.Canceled", err)
	}
}

func testStreamsApart(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	res := execOK(t, ctx, sb, sh(scriptOutErr))
	got := [2]string{string(res.Stdout), string(res.Stderr)}
	if diff := cmp.Diff([2]string{"out\n", "err\n"}, got); diff != "" {
		t.Errorf("stdout/stderr (-want +got):\n%s", diff)
	}
}

func testExitCodes(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"exit 42", 42},
		{scriptPartial, 1},
	} {
		res := execOK(t, ctx, sb, sh(tc.script))
		if res.ExitCode != tc.want {
			t.Errorf("sh -c %q: exit %d, want %d", tc.script, res.ExitCode, tc.want)
		}
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"berth-conformance-no-such-command"}})
	if err == nil && res.ExitCode == 0 {
		t.Errorf("an unknown command exited 0")
	}
}

func testEnvDir(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	cmd := sh(`echo "$BERTH_CONFORMANCE_VAR"`)
	cmd.Env = map[string]string{"BERTH_CONFORMANCE_VAR": "one two"}
	if got := string(execOK(t, ctx, sb, cmd).Stdout); got != "one two\n" {
		t.Errorf("env: stdout %q, want %q", got, "one two\n")
	}
	cmd = drivers.Command{Argv: []string{"pwd"}, Dir: "/"}
	if got := string(execOK(t, ctx, sb, cmd).Stdout); got != "/\n" {
		t.Errorf("dir /: pwd printed %q, want %q", got, "/\n")
	}
}

func testStdin(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	const in = "line one\nline two\n"
	res := execOK(t, ctx, sb, drivers.Command{Argv: []string{"cat"}, Stdin: strings.NewReader(in)})
	if got := string(res.Stdout); got != in {
		t.Errorf("cat: stdout %q, want %q", got, in)
	}
}

func testOutputLimit(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	res := execOK(t, ctx, sb, drivers.Command{Argv: []string{"echo", "hello world"}, OutputLimit: 4})
	if got := string(res.Stdout); got != "hell" || !res.Truncated {
		t.Errorf("limit 4: stdout %q truncated %v, want %q true", got, res.Truncated, "hell")
	}
	if res.ExitCode != 0 {
		t.Errorf("limit 4: exit %d, want 0", res.ExitCode)
	}
}

func testExecAfterRelease(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "x"}}); !errors.Is(err, drivers.ErrReleased) {
		t.Errorf("Exec after Release: err = %v, want ErrReleased", err)
	}
}

func testCancel(t *testing.T, ctx context.Context, h Harness) {
	sb := acquire(t, ctx, h, drivers.AcquireRequest{})
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var err error
	within(t, promptBound, "a cancelled sleep 300", func() {
		_, err = sb.Exec(cctx, drivers.Command{Argv: []string{"sleep", "300"}})
	})
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled Exec: err = %v, want it to wrap the context's error", err)
	}
	// The sandbox still serves commands afterwards.
	if got := string(execOK(t, ctx, sb, drivers.Command{Argv: []string{"echo", "after"}}).Stdout); got != "after\n" {
		t.Errorf("echo after a cancelled command: %q", got)
	}
}

// testParallel runs parallelWidth(h) acquire-exec-release workers at once.
func testParallel(t *testing.T, ctx context.Context, h Harness) {
	n := parallelWidth(h)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- acquireExecRelease(ctx, h, i)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func acquireExecRelease(ctx context.Context, h Harness, i int) error {
	sb, err := h.Driver().Acquire(ctx, h.Config(), drivers.AcquireRequest{LeaseID: fmt.Sprintf("parallel-%d", i)})
	if err != nil {
		return fmt.Errorf("worker %d: Acquire: %w", i, err)
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"echo", fmt.Sprint(i)}})
	if err == nil && string(res.Stdout) != fmt.Sprintf("%d\n", i) {
		err = fmt.Errorf("stdout %q", res.Stdout)
	}
	r, rerr := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		return fmt.Errorf("worker %d: Exec: %w", i, err)
	}
	if rerr != nil {
		return fmt.Errorf("worker %d: Release: %w", i, rerr)
	}
	if !r.Proves(sb.ID(), drivers.Destroy) {
		return fmt.Errorf("worker %d: receipt %+v does not prove destroy of %q", i, r, sb.ID())
	}
	return nil
}

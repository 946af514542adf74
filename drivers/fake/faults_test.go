package fake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/reason"
)

var bg = context.Background()

func mustAcquire(t *testing.T, d *fake.Driver, req drivers.AcquireRequest) drivers.Sandbox {
	t.Helper()
	sb, err := d.Acquire(bg, config.Config{}, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return sb
}

func state(t *testing.T, d *fake.Driver, id string) drivers.State {
	t.Helper()
	st, ok := fakectl.Of(d).State(id)
	if !ok {
		return "lost"
	}
	return st
}

// CAP-1: reading capabilities, schemas and listings calls no provider operation.
func TestReadingCapabilitiesCallsNothing(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	_ = d.Capabilities()
	_ = d.Schema()
	_ = drivers.Effective(d, 0)
	_ = drivers.NewRegistry(d).List()
	if _, err := drivers.DriverAs[drivers.Lister](d); err != nil {
		t.Fatal(err)
	}
	if n := fakectl.Of(d).TotalCalls(); n != 0 || len(fakectl.Of(d).Sandboxes()) != 0 {
		t.Errorf("TotalCalls = %d, sandboxes %v; want none", n, fakectl.Of(d).Sandboxes())
	}
}

func TestDeclarationOptions(t *testing.T) {
	t.Parallel()
	all := drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReuse, drivers.CapList,
		drivers.CapDestroyByID, drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapTemplateCapture,
		drivers.CapTemplateDelete, drivers.CapRunnerIngress, drivers.CapFiles, drivers.CapReattach)
	if got := drivers.Effective(fake.New(nil), 0); got != all {
		t.Errorf("default Effective = %s, want all", got)
	}
	d := fake.New(&fake.Options{Name: "fake-narrow", Undeclared: drivers.NewSet(drivers.CapReattach, drivers.CapTerminal)})
	if got := drivers.Effective(d, 0); got != all&^drivers.NewSet(drivers.CapReattach, drivers.CapReuse, drivers.CapTerminal) {
		t.Errorf("Effective = %s", got)
	}
	if _, err := drivers.DriverAs[drivers.Resumer](d); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("AsResumer of an undeclaring fake: %v, want ErrUnsupported", err)
	}
	// Its live sandbox implements Terminal; the driver's narrowing withholds it.
	sb, err := d.Acquire(context.Background(), config.Config{}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drivers.SandboxAs[drivers.Terminal](sb, drivers.Narrowing(d, 0)); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("AsTerminal with the undeclaring fake's narrowing: %v, want ErrUnsupported", err)
	}
	if _, err := drivers.SandboxAs[drivers.Terminal](sb, 0); err != nil {
		t.Errorf("AsTerminal of the live sandbox without narrowing: %v", err)
	}
	down := fake.New(&fake.Options{Unavailable: errors.New("disabled by test")})
	if got := drivers.Effective(down, 0); got != 0 { // CAP-3
		t.Errorf("unavailable fake Effective = %s, want none", got)
	}
	if info := drivers.NewRegistry(down).List()[0]; info.Available || info.Reason == "" {
		t.Errorf("Describe(unavailable) = %+v", info)
	}
	budgeted := fake.New(nil)
	fakectl.Of(budgeted).SetStartupBudget(time.Minute)
	if b := budgeted.Capabilities().StartupBudget; b != time.Minute {
		t.Errorf("StartupBudget = %s", b)
	}
}

func TestFailNth(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	d := fake.New(nil)
	fakectl.Of(d).FailNth("create", 2, boom)
	mustAcquire(t, d, drivers.AcquireRequest{})
	if _, err := d.Acquire(bg, config.Config{}, drivers.AcquireRequest{}); !errors.Is(err, boom) {
		t.Errorf("2nd Acquire: err = %v, want boom", err)
	}
	sb := mustAcquire(t, d, drivers.AcquireRequest{})
	if got := fakectl.Of(d).Calls("create"); got != 3 {
		t.Errorf("Calls(create) = %d, want 3", got)
	}
	if got := len(fakectl.Of(d).Sandboxes()); got != 2 {
		t.Errorf("%d sandboxes, want 2: a failed create allocates nothing", got)
	}
	fakectl.Of(d).FailNth("exec", 2, nil) // nil: transient
	run(t, sb, drivers.Command{Argv: []string{"true"}})
	if _, err := sb.Exec(bg, drivers.Command{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrTransient) || reason.Of(err) != reason.Transient {
		t.Errorf("2nd exec: err = %v, want ErrTransient", err)
	}
	run(t, sb, drivers.Command{Argv: []string{"true"}})
	fakectl.Of(d).Inject(fakectl.Fault{Op: "list", Err: drivers.ErrUnreachable}) // every call
	for range 2 {
		if _, err := d.List(bg, config.Config{}, nil); !errors.Is(err, drivers.ErrUnreachable) {
			t.Errorf("List: err = %v, want ErrUnreachable", err)
		}
	}
	fakectl.Of(d).ClearFaults()
	if _, err := d.List(bg, config.Config{}, nil); err != nil {
		t.Errorf("List after ClearFaults: %v", err)
	}
	if got := fakectl.Of(d).Calls("list"); got != 3 {
		t.Errorf("Calls(list) = %d, want 3", got)
	}
}

// LEASE-2: a failed start leaves an allocated sandbox that Allocated named.
func TestFailedStartLeavesAllocatedSandbox(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	fakectl.Of(d).FailNth("start", 1, nil)
	var allocated string
	_, err := d.Acquire(bg, config.Config{}, drivers.AcquireRequest{Allocated: func(_ context.Context, id string) error { allocated = id; return nil }})
	if !errors.Is(err, drivers.ErrTransient) {
		t.Fatalf("Acquire: err = %v, want ErrTransient", err)
	}
	if allocated == "" || state(t, d, allocated) != drivers.StateError {
		t.Errorf("allocated %q in state %q, want a sandbox in state error", allocated, state(t, d, allocated))
	}
	if r, err := d.Destroy(bg, config.Config{}, allocated); err != nil || !r.Proves(allocated, drivers.Destroy) {
		t.Errorf("Destroy of the failed sandbox: %+v, %v", r, err)
	}
}

// LEASE-4: a start slower than the budget still finishes, and a later
// Resume finds the sandbox running.
func TestSlowStartOutlivesCancelledAcquire(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := fake.New(nil)
	fakectl.Of(d).SetClock(clk)
	fakectl.Of(d).SetStartDelay(2 * time.Minute)
	ctx, cancel := context.WithCancel(bg)
	allocated := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := d.Acquire(ctx, config.Config{}, drivers.AcquireRequest{Allocated: func(_ context.Context, id string) error { allocated <- id; return nil }})
		done <- err
	}()
	id := <-allocated // called before Acquire waits
	if !clk.WaitForWaiters(1, nil) {
		t.Fatal("Acquire never waited on the clock")
	}
	if st := state(t, d, id); st != drivers.StateStarting {
		t.Errorf("state while starting = %q", st)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: err = %v, want context.Canceled", err)
	}
	clk.Advance(time.Minute)
	if st := state(t, d, id); st != drivers.StateStarting {
		t.Errorf("state after 1m = %q, want starting", st)
	}
	clk.Advance(time.Minute)
	if st := state(t, d, id); st != drivers.StateRunning {
		t.Errorf("state after 2m = %q, want running", st)
	}
	sb, err := d.Resume(bg, config.Config{}, id)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got := run(t, sb, drivers.Command{Argv: []string{"echo", "up"}}); got.Stdout != "up\n" {
		t.Errorf("exec after resume: %+v", got)
	}
	if fakectl.Of(d).Calls("create") != 1 || len(fakectl.Of(d).Sandboxes()) != 1 {
		t.Errorf("creates %d, sandboxes %d; want 1 and 1", fakectl.Of(d).Calls("create"), len(fakectl.Of(d).Sandboxes()))
	}
}

func TestSlowStartCompletesWhenClockPasses(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := fake.New(nil)
	fakectl.Of(d).SetClock(clk)
	fakectl.Of(d).SetStartDelay(30 * time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := d.Acquire(bg, config.Config{}, drivers.AcquireRequest{})
		done <- err
	}()
	clk.WaitForWaiters(1, nil)
	clk.Advance(30 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Acquire: %v", err)
	}
}

func TestSleepWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := fake.New(nil)
	fakectl.Of(d).SetClock(clk)
	sb := mustAcquire(t, d, drivers.AcquireRequest{})
	done := make(chan out, 1)
	go func() { done <- run(t, sb, drivers.Command{Argv: []string{"sh", "-c", "sleep 90"}}) }()
	clk.WaitForWaiters(1, nil)
	clk.Advance(89 * time.Second)
	select {
	case got := <-done:
		t.Fatalf("sleep 90 ended after 89s: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}
	clk.Advance(time.Second)
	if got := <-done; got.Exit != 0 {
		t.Errorf("after sleep: %+v", got)
	}
}

func TestLoseSandbox(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	sb := mustAcquire(t, d, drivers.AcquireRequest{Labels: map[string]string{"k": "v"}})
	if err := fakectl.Of(d).Lose(sb.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(bg, drivers.Command{Argv: []string{"true"}}); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Exec in a lost sandbox: err = %v, want ErrNotFound", err)
	}
	if _, err := d.Resume(bg, config.Config{}, sb.ID()); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Resume of a lost sandbox: err = %v, want ErrNotFound", err)
	}
	if l, _ := d.List(bg, config.Config{}, map[string]string{"k": "v"}); len(l) != 0 {
		t.Errorf("List reports a lost sandbox: %v", l)
	}
	if _, err := sb.Release(bg, drivers.Keep); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Release(keep) of a lost sandbox: err = %v, want ErrNotFound", err)
	}
	r, err := sb.Release(bg, drivers.Destroy)
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Errorf("Release(destroy) of a lost sandbox: %+v, %v; want a confirmed not-found receipt", r, err)
	}
	if err := fakectl.Of(d).Lose("fake-99"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Lose(unknown): %v", err)
	}
}

// LEASE-6, LEASE-7: a refused stop changes nothing and can be retried.
func TestRefuseStop(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	sb := mustAcquire(t, d, drivers.AcquireRequest{})
	other := mustAcquire(t, d, drivers.AcquireRequest{})
	fakectl.Of(d).RefuseStop(sb.ID(), drivers.ErrUnreachable)
	for _, disp := range []drivers.Disposition{drivers.Stop, drivers.Destroy} {
		if _, err := sb.Release(bg, disp); !errors.Is(err, drivers.ErrUnreachable) {
			t.Errorf("Release(%s): err = %v, want ErrUnreachable", disp, err)
		}
	}
	if _, err := d.Destroy(bg, config.Config{}, sb.ID()); !errors.Is(err, drivers.ErrUnreachable) {
		t.Errorf("Destroy: err = %v, want ErrUnreachable", err)
	}
	if st := state(t, d, sb.ID()); st != drivers.StateRunning {
		t.Errorf("state after refused stops = %q, want running", st)
	}
	run(t, sb, drivers.Command{Argv: []string{"true"}}) // the handle still works
	if r, err := other.Release(bg, drivers.Destroy); err != nil || !r.Proves(other.ID(), drivers.Destroy) {
		t.Errorf("other sandbox: %+v, %v", r, err)
	}
	fakectl.Of(d).ClearFaults()
	if r, err := sb.Release(bg, drivers.Stop); err != nil || !r.Proves(sb.ID(), drivers.Stop) {
		t.Errorf("retried stop: %+v, %v", r, err)
	}
}

// LEASE-7: "stop accepted" and a receipt for another sandbox are not proof.
func TestFakeStop(t *testing.T) {
	t.Parallel()
	for _, lie := range []string{"unconfirmed", "foreign_id"} {
		d := fake.New(nil)
		sb := mustAcquire(t, d, drivers.AcquireRequest{})
		fakectl.Of(d).FakeStop(sb.ID(), lie)
		r, err := sb.Release(bg, drivers.Stop)
		if err != nil {
			t.Fatalf("lie %s: Release: %v", lie, err)
		}
		if r.Proves(sb.ID(), drivers.Stop) {
			t.Errorf("lie %s: receipt %+v proves a stop that did not happen", lie, r)
		}
		if st := state(t, d, sb.ID()); st != drivers.StateRunning {
			t.Errorf("lie %s: state = %q, want still running", lie, st)
		}
		if r, err := d.Destroy(bg, config.Config{}, sb.ID()); err != nil || r.Proves(sb.ID(), drivers.Destroy) {
			t.Errorf("lie %s: Destroy = %+v, %v; want no proof", lie, r, err)
		}
	}
}

func TestReleaseDispositions(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	for _, tc := range []struct {
		disp drivers.Disposition
		want drivers.State
	}{
		{drivers.Keep, drivers.StateRunning},
		{drivers.Stop, drivers.StateStopped},
		{drivers.Destroy, drivers.StateDestroyed},
	} {
		sb := mustAcquire(t, d, drivers.AcquireRequest{})
		r, err := sb.Release(bg, tc.disp)
		if err != nil {
			t.Fatalf("Release(%s): %v", tc.disp, err)
		}
		if r.State != tc.want || !r.Confirmed || !r.Proves(sb.ID(), tc.disp) || state(t, d, sb.ID()) != tc.want {
			t.Errorf("Release(%s) = %+v, provider state %q; want %q", tc.disp, r, state(t, d, sb.ID()), tc.want)
		}
		if _, err := sb.Exec(bg, drivers.Command{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrReleased) {
			t.Errorf("Exec after Release(%s): %v, want ErrReleased", tc.disp, err)
		}
		if _, err := sb.Release(bg, tc.disp); !errors.Is(err, drivers.ErrReleased) {
			t.Errorf("second Release(%s): %v, want ErrReleased", tc.disp, err)
		}
	}
	var got []drivers.State
	for _, s := range fakectl.Of(d).Sandboxes() {
		got = append(got, s.State)
	}
	if diff := cmp.Diff([]drivers.State{drivers.StateRunning, drivers.StateStopped, drivers.StateDestroyed}, got); diff != "" {
		t.Errorf("Sandboxes states (-want +got):\n%s", diff)
	}
}

// A stop during a running command ends it as killed.
func TestStopKillsRunningCommand(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	d2 := fake.New(&fake.Options{Handlers: map[string]fake.HandlerFunc{"block": func(ctx context.Context, _ fake.Invocation) (int, error) {
		close(started)
		<-ctx.Done()
		return 0, nil
	}}})
	sb := mustAcquire(t, d2, drivers.AcquireRequest{})
	done := make(chan *drivers.Result, 1)
	go func() {
		res, err := sb.Exec(bg, drivers.Command{Argv: []string{"block"}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-started
	if _, err := d2.Destroy(bg, config.Config{}, sb.ID()); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res == nil || res.ExitCode != -1 || res.Signal != "KILL" {
		t.Errorf("command in a destroyed sandbox ended as %+v, want killed", res)
	}
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	const key = "canary-key-5f3a"
	d := fake.New(&fake.Options{APIKey: key})
	if f, _ := d.Schema().Field("api_key"); !f.Required || f.Kind != config.KindSecret {
		t.Errorf("api_key field = %+v, want a required secret", f)
	}
	_, err := d.Schema().Normalize(map[string]any{})
	if !errors.Is(err, config.ErrCredentialsMissing) {
		t.Errorf("Normalize without key: %v, want ErrCredentialsMissing", err)
	}
	for _, tc := range []struct {
		cfg  config.Config
		want error
	}{
		{config.Config{}, config.ErrCredentialsMissing},
		{config.Config{"api_key": "wrong"}, drivers.ErrAuth},
		{config.Config{"api_key": key}, nil},
	} {
		_, err := d.Acquire(bg, tc.cfg, drivers.AcquireRequest{})
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Acquire(%v): err = %v, want %v", tc.cfg["api_key"] != nil, err, tc.want)
		}
	}
}

func TestWrongImage(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	sb := mustAcquire(t, d, drivers.AcquireRequest{})
	ir := sb.(drivers.ImageReporter)
	real, err := ir.ImageIdentity(bg)
	if err != nil || real != d.DefaultImageIdentity() {
		t.Fatalf("ImageIdentity = %v, %v; want %v", real, err, d.DefaultImageIdentity())
	}
	fakectl.Of(d).ReportWrongImage(sb.ID())
	wrong, err := ir.ImageIdentity(bg)
	if err != nil || wrong == real || wrong.IsZero() || wrong.Repository() != real.Repository() {
		t.Errorf("wrong ImageIdentity = %v, %v; want another digest of %s", wrong, err, real.Repository())
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	_, sb := newSandbox(t, nil)
	ts, err := sb.(drivers.Terminal).OpenTerminal(bg, drivers.TerminalRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if err := ts.Resize(bg, 40, 120); err != nil {
		t.Fatal(err)
	}
	if err := ts.Resize(bg, 0, 1); err == nil {
		t.Errorf("Resize(0, 1) succeeded")
	}
	ts.Write([]byte("echo $TERM\rexit 3\n"))
	res, _ := ts.Wait(context.Background())
	b := make([]byte, 4096)
	var all []byte
	for {
		n, err := ts.Read(b)
		all = append(all, b[:n]...)
		if err != nil {
			break
		}
	}
	want := "$ echo $TERM\r\nexit 3\r\nxterm-256color\r\n$ "
	if string(all) != want || res.ExitCode != 3 {
		t.Errorf("terminal output %q exit %d, want %q 3", all, res.ExitCode, want)
	}
}

// The labels a sandbox was acquired with, as List filters and reports them
// and Sandboxes reports them, for as long as the driver lives: nil stays
// nil, empty stays empty, and a returned map is the caller's.
func TestLabels(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	given := map[string]string{"a": "1", "b": "2"}
	both := mustAcquire(t, d, drivers.AcquireRequest{Labels: given})
	given["a"] = "changed by the caller after Acquire"
	none := mustAcquire(t, d, drivers.AcquireRequest{})
	empty := mustAcquire(t, d, drivers.AcquireRequest{Labels: map[string]string{}})
	gone := mustAcquire(t, d, drivers.AcquireRequest{Labels: map[string]string{"a": "1"}})
	if _, err := gone.Release(bg, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	ids := func(l []drivers.SandboxInfo) []string {
		var out []string
		for _, s := range l {
			out = append(out, s.ProviderLeaseID)
		}
		return out
	}
	for _, tc := range []struct {
		filter map[string]string
		want   []string
	}{
		{nil, []string{both.ID(), none.ID(), empty.ID()}},
		{map[string]string{}, []string{both.ID(), none.ID(), empty.ID()}},
		{map[string]string{"a": "1"}, []string{both.ID()}},
		{map[string]string{"a": "1", "b": "2"}, []string{both.ID()}},
		{map[string]string{"a": "2"}, nil},
		{map[string]string{"a": "1", "c": ""}, nil},
	} {
		l, err := d.List(bg, config.Config{}, tc.filter)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, ids(l)); diff != "" {
			t.Errorf("List(%v) (-want +got):\n%s", tc.filter, diff)
		}
		for _, s := range l {
			if s.ProviderLeaseID == both.ID() {
				s.Labels["a"] = "changed by the caller after List"
			}
		}
	}
	want := map[string]map[string]string{both.ID(): {"a": "1", "b": "2"}, none.ID(): nil, empty.ID(): {}, gone.ID(): {"a": "1"}}
	for _, s := range fakectl.Of(d).Sandboxes() {
		if diff := cmp.Diff(want[s.ID], s.Labels); diff != "" || (s.Labels == nil) != (want[s.ID] == nil) {
			t.Errorf("Sandboxes: labels of %s (%s) (-want +got):\n%s", s.ID, s.State, diff)
		}
	}
}

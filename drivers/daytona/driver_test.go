package daytona_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/reason"
)

// allocations records Allocated calls.
type allocations struct {
	mu  sync.Mutex
	ids []string
}

func (a *allocations) record(_ context.Context, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ids = append(a.ids, id)
	return nil
}

func (a *allocations) get() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ids)
}

// LEASE-4: a start longer than the lease budget fails the acquire with the
// deadline, but the sandbox is preserved and the next attempt resumes the
// same sandbox by id once it has started.
func TestSlowStartIsResumedByID(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, envOptions{clk: clk, knobs: daytonafake.Knobs{StartDelay: 2 * time.Minute}})
	cfg := e.config(t, e.snap.ID)

	var alloc allocations
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-1", Allocated: alloc.record})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a slow start: err = %v, want context.DeadlineExceeded", err)
	}
	ids := alloc.get()
	if len(ids) != 1 {
		t.Fatalf("Allocated calls = %v, want exactly one", ids)
	}
	view, ok := e.srv.Sandbox(ids[0])
	if !ok || view.State != "creating" || view.DesiredState != "started" {
		t.Fatalf("after the budget ran out the sandbox is %+v (found %v), want creating towards started", view, ok)
	}

	e.srv.Advance(2 * time.Minute) // the start finishes after the budget
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	r, err := drivers.DriverAs[drivers.Resumer](e.drv)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := r.Resume(rctx, cfg, ids[0])
	if err != nil {
		t.Fatalf("Resume(%s): %v", ids[0], err)
	}
	if sb.ID() != ids[0] {
		t.Errorf("resumed %q, want %q", sb.ID(), ids[0])
	}
	res, err := sb.Exec(rctx, drivers.Command{Argv: []string{"echo", "resumed"}})
	if err != nil || string(res.Stdout) != "resumed\n" {
		t.Fatalf("Exec in the resumed sandbox: %v, %+v", err, res)
	}
	if n := len(e.srv.Sandboxes()); n != 1 {
		t.Errorf("%d sandboxes exist, want 1: no replacement is made", n)
	}
	if got := e.srv.Calls(daytonafake.RouteCreateSandbox); got != 1 {
		t.Errorf("%d creates, want 1", got)
	}
}

// QUAL-6: the driver creates by the snapshot's id; a deleted id fails with
// ErrImageNotFound even though a snapshot of the same name exists, and no
// sandbox is created.
func TestDeletedSnapshotIDIsNotResolvedByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := e.srv.CreateSnapshot("berth-tools:2.1", "debian:12.8")
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t, old.ID)

	// While it exists, the live identity is the id, and the sandbox reports
	// the snapshot the driver created it from.
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	ir, err := drivers.SandboxAs[drivers.ImageReporter](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ir.ImageIdentity(ctx)
	if want := images.MustParseIdentity("snapshot:daytona/" + old.ID); err != nil || id != want {
		t.Fatalf("ImageIdentity = %v, %v; want %v", id, err, want)
	}
	if v, _ := e.srv.Sandbox(sb.ID()); v.Snapshot != old.Name {
		t.Errorf("the sandbox reports snapshot %q, want %q", v.Snapshot, old.Name)
	}

	if err := e.srv.DeleteSnapshot(old.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.CreateSnapshot(old.Name, "debian:12.9"); err != nil {
		t.Fatalf("a new snapshot with the old name: %v", err)
	}
	if _, err := ir.ImageIdentity(ctx); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("ImageIdentity after the snapshot's deletion: err = %v, want ErrImageNotFound", err)
	}
	if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
		t.Fatal(err)
	}
	creates := e.srv.Calls(daytonafake.RouteCreateSandbox)
	_, err = e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrImageNotFound) {
		t.Fatalf("Acquire of a deleted snapshot id: err = %v, want ErrImageNotFound", err)
	}
	if got := reason.Of(err); got != reason.ImageNotFound {
		t.Errorf("CodeOf = %s, want %s", got, reason.ImageNotFound)
	}
	if !strings.Contains(err.Error(), old.ID) {
		t.Errorf("error %q does not name the snapshot id", err)
	}
	if got := e.srv.Calls(daytonafake.RouteCreateSandbox); got != creates {
		t.Errorf("creates went from %d to %d: a sandbox was requested for a deleted snapshot", creates, got)
	}
	if n := len(e.srv.Sandboxes()); n != 0 {
		t.Errorf("%d sandboxes exist, want 0", n)
	}

	// A snapshot name in place of the id is refused by the schema (QUAL-5).
	_, err = e.drv.Schema().Normalize(map[string]any{
		"api_url": e.srv.URL(), "api_key": "k", "snapshot_id": old.Name,
	})
	if !errors.Is(err, config.ErrInvalid) {
		t.Errorf("Normalize with a snapshot name: err = %v, want config.ErrInvalid", err)
	}
}

// LEASE-3: 409 (state change in progress) and 429 answers are retried
// inside the deadline; a retry that could not finish before the deadline
// is not started.
func TestTransientAnswersAreRetriedWithinTheDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		fault     daytonafake.Fault
		deadline  time.Duration
		wantErr   error // nil: success
		wantCalls int   // calls of fault.Route
		onRelease bool  // the deadline bounds Release(stop) rather than Acquire
	}{
		{
			name:      "409 on stop twice, then stopped",
			fault:     daytonafake.Fault{Route: daytonafake.RouteStopSandbox, Count: 2, Status: 409, Message: "Sandbox state change in progress"},
			deadline:  20 * time.Second,
			wantCalls: 3,
		},
		{
			name:      "429 on create twice, then created once",
			fault:     daytonafake.Fault{Route: daytonafake.RouteCreateSandbox, Count: 2, Status: 429},
			deadline:  20 * time.Second,
			wantCalls: 3,
		},
		{
			name:      "429 with a Retry-After beyond the deadline is not retried",
			fault:     daytonafake.Fault{Route: daytonafake.RouteGetSnapshot, Count: -1, Status: 429, RetryAfter: "3600"},
			deadline:  5 * time.Second,
			wantErr:   drivers.ErrTransient,
			wantCalls: 1,
		},
		{
			name:      "409 forever on stop ends at the deadline",
			fault:     daytonafake.Fault{Route: daytonafake.RouteStopSandbox, Count: -1, Status: 409, Message: "Sandbox state change in progress"},
			deadline:  time.Second,
			wantErr:   drivers.ErrTransient,
			wantCalls: -1, // several
			onRelease: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{knobs: daytonafake.Knobs{StartPolls: 1}})
			cfg := e.config(t, e.snap.ID)
			e.srv.InjectFault(tc.fault)
			// The deadline under test is the call's: for a release it
			// starts once the acquisition is done (under a loaded machine
			// the acquisition alone can take the whole of it).
			var (
				sb  drivers.Sandbox
				err error
				dl  time.Time
			)
			if tc.onRelease {
				long, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer lcancel()
				sb, err = e.drv.Acquire(long, cfg, drivers.AcquireRequest{})
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			dl, _ = ctx.Deadline()
			switch {
			case !tc.onRelease:
				sb, err = e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
				if err == nil {
					_, err = sb.Release(ctx, drivers.Stop)
				}
			case err == nil:
				_, err = sb.Release(ctx, drivers.Stop)
			}
			if late := time.Since(dl); late > 2*time.Second {
				t.Errorf("returned %s after the deadline", late)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("err = %v, want success", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			calls := e.srv.Calls(tc.fault.Route)
			if tc.wantCalls >= 0 && calls != tc.wantCalls {
				t.Errorf("%s called %d times, want %d", tc.fault.Route, calls, tc.wantCalls)
			}
			if tc.wantCalls < 0 && calls < 2 {
				t.Errorf("%s called %d times, want retries", tc.fault.Route, calls)
			}
			if tc.fault.Route == daytonafake.RouteCreateSandbox {
				if n := len(e.srv.Sandboxes()); n != 1 {
					t.Errorf("%d sandboxes exist, want 1", n)
				}
			}
		})
	}
}

// A lost create answer is not a second sandbox: the retry meets the API's
// name conflict (409) and reads the sandbox back by its unique name.
func TestRetriedCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cfg := e.config(t, e.snap.ID)
	e.srv.InjectFault(daytonafake.Fault{Route: daytonafake.RouteCreateSandbox, Status: 502, Lose: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var alloc allocations
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{Allocated: alloc.record})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(ctx, drivers.Destroy)
	if got := e.srv.Calls(daytonafake.RouteCreateSandbox); got != 2 {
		t.Errorf("%d creates, want 2 (the lost one and the retry)", got)
	}
	if n := len(e.srv.Sandboxes()); n != 1 {
		t.Errorf("%d sandboxes, want 1", n)
	}
	if diff := cmp.Diff([]string{sb.ID()}, alloc.get()); diff != "" {
		t.Errorf("Allocated (-want +got):\n%s", diff)
	}
}

// A command that outlives the toolbox's own time limit fails with
// drivers.ErrTimeout (408), distinct from the caller's deadline.
func TestExecTimeoutIsErrTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cfg := e.config(t, e.snap.ID)
	cfg[daytona.FieldExecTimeout] = "1s"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(ctx, drivers.Destroy)
	_, err = sb.Exec(ctx, drivers.Command{Argv: []string{"sleep", "30"}})
	if !errors.Is(err, drivers.ErrTimeout) || ctx.Err() != nil {
		t.Fatalf("Exec past the toolbox timeout: err = %v (ctx %v), want ErrTimeout", err, ctx.Err())
	}
	if got := reason.Of(err); got != reason.Timeout {
		t.Errorf("CodeOf = %s, want %s", got, reason.Timeout)
	}
	if !strings.Contains(err.Error(), sb.ID()) {
		t.Errorf("error %q does not name the sandbox", err)
	}
}

// A sandbox that errors while starting ends the wait with the provider's
// reason; one that errors within the API's own wait (create answers 400)
// is found by its name and handed to Allocated, or deleted when nobody
// records it.
func TestFailedStartReportsTheProvidersReason(t *testing.T) {
	t.Parallel()
	for _, polls := range []int{0, 2} {
		for _, record := range []bool{true, false} {
			e := newEnv(t, envOptions{knobs: daytonafake.Knobs{FailStart: "no capacity in region us", StartPolls: polls}})
			cfg := e.config(t, e.snap.ID)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			var alloc allocations
			req := drivers.AcquireRequest{}
			if record {
				req.Allocated = alloc.record
			}
			_, err := e.drv.Acquire(ctx, cfg, req)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "no capacity in region us") {
				t.Fatalf("polls %d: err = %v, want the provider's reason", polls, err)
			}
			left := len(e.srv.Sandboxes())
			switch {
			case record && (len(alloc.get()) != 1 || left != 1):
				t.Errorf("polls %d: Allocated %v with %d sandboxes left, want one recorded sandbox", polls, alloc.get(), left)
			case !record && left != 0:
				t.Errorf("polls %d: %d sandboxes left with nobody recording them, want 0", polls, left)
			}
		}
	}
}

// A sandbox stuck in creating fails the acquire at the deadline, naming the
// state.
func TestStuckCreatingEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{StuckCreating: true}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{Allocated: func(context.Context, string) error { return nil }})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "creating") {
		t.Fatalf("err = %v, want the deadline and the state creating", err)
	}
}

// LEASE-7: a stop is confirmed by reading the sandbox back; with
// autoDeleteInterval 0 the API deletes on stop and the receipt says
// destroyed. Deleting a sandbox whose start is pending retries the 409
// until the start finished.
func TestReleaseReceipts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		autoDelete any
		disp       drivers.Disposition
		want       drivers.State
	}{
		{"stop", nil, drivers.Stop, drivers.StateStopped},
		{"stop of an ephemeral sandbox deletes", int64(0), drivers.Stop, drivers.StateDestroyed},
		{"destroy", int64(-1), drivers.Destroy, drivers.StateDestroyed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{knobs: daytonafake.Knobs{StartPolls: 1}})
			cfg := e.config(t, e.snap.ID)
			if tc.autoDelete != nil {
				cfg[daytona.FieldAutoDeleteInterval] = tc.autoDelete
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
			if err != nil {
				t.Fatal(err)
			}
			rc, err := sb.Release(ctx, tc.disp)
			if err != nil {
				t.Fatal(err)
			}
			if rc.State != tc.want || !rc.Proves(sb.ID(), tc.disp) || !strings.Contains(rc.Evidence, sb.ID()) {
				t.Errorf("receipt %+v, want confirmed %s naming %s", rc, tc.want, sb.ID())
			}
			v, ok := e.srv.Sandbox(sb.ID())
			if gone := v.State == "destroyed"; !ok || gone != (tc.want == drivers.StateDestroyed) {
				t.Errorf("provider state %q, receipt %s", v.State, rc.State)
			}
		})
	}

	t.Run("destroy while a start is pending retries the 409", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		var srv *daytonafake.Server
		var conflicts atomic.Int32
		srv, err := daytonafake.New(&daytonafake.Options{
			Clock: clk, Knobs: daytonafake.Knobs{StartDelay: time.Minute},
			AfterCall: func(route string, status int) {
				if route == daytonafake.RouteDeleteSandbox && status == 409 && conflicts.Add(1) == 1 {
					srv.Advance(time.Minute) // the start finishes after the first refusal
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		snap, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOptions{})
		e.srv = srv
		cfg := e.config(t, snap.ID)
		var alloc allocations
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		defer acancel()
		if _, err := e.drv.Acquire(actx, cfg, drivers.AcquireRequest{Allocated: alloc.record}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire: err = %v, want the deadline", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ds, _ := drivers.DriverAs[drivers.Destroyer](e.drv)
		id := alloc.get()[0]
		rc, err := ds.Destroy(ctx, cfg, id)
		if err != nil || !rc.Proves(id, drivers.Destroy) {
			t.Fatalf("Destroy = %+v, %v; want a confirmed destroy", rc, err)
		}
		if conflicts.Load() < 1 {
			t.Errorf("the delete never met a 409; the test did not test the retry")
		}
	})
}

// LEASE-9: List walks every cursor page.
func TestListWalksCursorPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{PageSize: 2}})
	cfg := e.config(t, e.snap.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var want []string
	for i := range 5 {
		labels := map[string]string{"berth.test/run": "pages"}
		if i == 4 {
			labels = map[string]string{"berth.test/run": "other"}
		}
		sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		if i < 4 {
			want = append(want, sb.ID())
		}
	}
	l, _ := drivers.DriverAs[drivers.Lister](e.drv)
	infos, err := l.List(ctx, cfg, map[string]string{"berth.test/run": "pages"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range infos {
		got = append(got, i.ProviderLeaseID)
		if i.State != drivers.StateRunning || i.Labels["test/suite"] != "daytona" {
			t.Errorf("info %+v: want running, a creation time and the config's labels", i)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if calls := e.srv.Calls(daytonafake.RouteListSandboxes); calls != 2 {
		t.Errorf("%d list pages read, want 2 (4 matching sandboxes, 2 per page)", calls)
	}
}

// An API that cannot be reached is the provider's control plane down:
// drivers.ErrUnavailable (provider_unavailable, PRB-5), naming the host;
// the health check says the same.
func TestUnreachableAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cfg := e.config(t, e.snap.ID)
	e.srv.Close() // nothing listens on its port any more
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrUnavailable) || reason.Of(err) != reason.ProviderUnavailable {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	host := strings.TrimPrefix(strings.TrimSuffix(e.srv.URL(), "/api"), "http://")
	if !strings.Contains(err.Error(), host) {
		t.Errorf("error %q does not name the host %s", err, host)
	}
	if err := e.drv.CheckHealth(ctx, cfg); !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), host) {
		t.Errorf("CheckHealth of a dead API = %v, want ErrUnavailable naming %s", err, host)
	}
}

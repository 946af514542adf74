package daytona_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/daytonafake"
)

// post sends an empty-bodied or JSON POST to the fake's API as the
// driver's key would, and returns the status.
func (e *env) post(t *testing.T, path, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL()+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.srv.APIKey())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// capture acquires a sandbox of the env's snapshot and captures it as name.
func (e *env) capture(t *testing.T, ctx context.Context, name string) (drivers.Sandbox, images.Identity) {
	t.Helper()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sb.Release(context.Background(), drivers.Destroy) })
	c, err := drivers.SandboxAs[drivers.Capturer](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Capture(ctx, drivers.CaptureRequest{Name: name})
	if err != nil {
		t.Fatalf("Capture(%q): %v", name, err)
	}
	return sb, id
}

// IMG-4: a capture requested while the sandbox is snapshotting for another
// capture (the API answers 400: not started or stopped) waits until the
// sandbox rests and is then made; both snapshots exist, active.
func TestCaptureWaitsThroughAnotherCapture(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{StopDelay: 100 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	if st := e.post(t, "/sandbox/"+sb.ID()+"/snapshot", `{"name":"first"}`); st != http.StatusOK {
		t.Fatalf("the first snapshot request: %d", st)
	}
	if v, _ := e.srv.Sandbox(sb.ID()); v.State != "snapshotting" {
		t.Fatalf("the sandbox is %s, want snapshotting", v.State)
	}
	requests := e.srv.Calls(daytonafake.RouteSnapshotSandbox)
	c, _ := drivers.SandboxAs[drivers.Capturer](sb, 0)
	id, err := c.Capture(ctx, drivers.CaptureRequest{Name: "second"})
	if err != nil {
		t.Fatalf("Capture while snapshotting: %v", err)
	}
	if n := e.srv.Calls(daytonafake.RouteSnapshotSandbox) - requests; n < 2 {
		t.Errorf("Capture asked %d times; want a refusal while snapshotting, then the request", n)
	}
	if s, ok := e.srv.LookupSnapshot(id.SnapshotID()); !ok || s.State != "active" || !strings.HasPrefix(s.Name, "second-") {
		t.Errorf("the capture's snapshot: %+v (found %v), want active, named second-*", s, ok)
	}
}

// IMG-4: a capture of a sandbox that rests in a state the API does not
// snapshot (a paused VM sandbox) fails at once with the state, not at the
// deadline.
func TestCaptureOfAPausedSandboxFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{SandboxClass: "linux-vm"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	if err := e.srv.Pause(sb.ID()); err != nil {
		t.Fatal(err)
	}
	c, _ := drivers.SandboxAs[drivers.Capturer](sb, 0)
	_, err = c.Capture(ctx, drivers.CaptureRequest{Name: "tpl"})
	if err == nil || !strings.Contains(err.Error(), "the sandbox is paused") || ctx.Err() != nil {
		t.Fatalf("Capture of a paused sandbox: %v; want the error state, before the deadline", err)
	}
}

// IMG-4: whatever the template's name, the snapshot's name passes both of
// the API's name rules (CreateSandboxSnapshotDto's IsSafeDisplayString and
// validateSnapshotName's format), so the capture is never refused for it.
func TestCaptureNamesAreValidSnapshotNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	format := regexp.MustCompile(`^[a-z0-9._-]+$`)
	for _, name := range []string{"<b>https://evil.example/</b>", "bell\x07 and\ttab", "", "ÜBER ünïcode", strings.Repeat("x", 300)} {
		_, id := e.capture(t, ctx, name)
		s, ok := e.srv.LookupSnapshot(id.SnapshotID())
		if !ok || !format.MatchString(s.Name) || len(s.Name) > 64 {
			t.Errorf("capture named %q: snapshot %+v (found %v), want a short [a-z0-9._-] name", name, s, ok)
		}
		if strings.Contains(s.Name, "http") && strings.Contains(s.Name, "//") {
			t.Errorf("capture named %q kept a URL in %q", name, s.Name)
		}
	}
}

// IMG-8: Daytona deletes a snapshot that sandboxes use (v0.190.0
// snapshot.service.ts removeSnapshot checks nothing), so DeleteTemplate of
// a template a live sandbox runs succeeds, confirmed once the API answers
// 404, after waiting through removing; the sandbox runs on, a new sandbox
// of it is ErrImageNotFound, and it is never ErrInUse. The server runs on
// a fake clock, so the snapshot stays removing until the test advances it.
func TestDeleteTemplateInUseWaitsThroughRemoving(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, envOptions{clk: clk, knobs: daytonafake.Knobs{StopDelay: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, e.config(t, e.snap.ID), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	c, _ := drivers.SandboxAs[drivers.Capturer](sb, 0)
	capturing := make(chan error, 1)
	var id images.Identity
	go func() {
		var err error
		id, err = c.Capture(ctx, drivers.CaptureRequest{Name: "tpl"})
		capturing <- err
	}()
	for v, _ := e.srv.Sandbox(sb.ID()); v.State != "snapshotting"; v, _ = e.srv.Sandbox(sb.ID()) {
		if ctx.Err() != nil {
			t.Fatal("the capture never started")
		}
		time.Sleep(time.Millisecond)
	}
	e.srv.Advance(time.Minute) // the snapshotting ends, the snapshot is saved
	if err := <-capturing; err != nil {
		t.Fatalf("Capture: %v", err)
	}
	from, err := e.drv.Acquire(ctx, e.config(t, id.SnapshotID()), drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer from.Release(context.Background(), drivers.Destroy)
	// Runs first: the releases above must not wait for the fake clock.
	defer e.srv.SetKnobs(func(k *daytonafake.Knobs) { k.StopDelay = 0 })
	td, _ := drivers.DriverAs[drivers.TemplateDeleter](e.drv)

	// The delete is accepted; the read-back sees removing and waits. A
	// cancelled wait is unconfirmed and says so.
	short, cancelShort := context.WithCancel(ctx)
	type result struct {
		rc  drivers.Receipt
		err error
	}
	done := make(chan result, 1)
	gets := e.srv.Calls(daytonafake.RouteGetSnapshot)
	go func() {
		rc, err := td.DeleteTemplate(short, e.config(t, e.snap.ID), id)
		done <- result{rc, err}
	}()
	for e.srv.Calls(daytonafake.RouteGetSnapshot) < gets+2 {
		if ctx.Err() != nil {
			t.Fatal("DeleteTemplate never read the snapshot back twice")
		}
		time.Sleep(time.Millisecond)
	}
	cancelShort()
	r := <-done
	if r.err == nil || r.rc.Confirmed || !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "still removing") {
		t.Fatalf("DeleteTemplate cancelled while removing = %+v, %v; want unconfirmed, still removing", r.rc, r.err)
	}
	if errors.Is(r.err, drivers.ErrInUse) {
		t.Errorf("DeleteTemplate returned ErrInUse, which Daytona never answers: %v", r.err)
	}
	if s, ok := e.srv.LookupSnapshot(id.SnapshotID()); !ok || s.State != "removing" {
		t.Errorf("the snapshot after the cancelled delete: %+v (found %v), want removing", s, ok)
	}

	// Deleted again once the removal is due: confirmed.
	e.srv.Advance(time.Minute)
	rc, err := td.DeleteTemplate(ctx, e.config(t, e.snap.ID), id)
	if err != nil {
		t.Fatalf("DeleteTemplate while a sandbox uses it: %v", err)
	}
	if !rc.Confirmed || rc.State != drivers.StateDestroyed || rc.EvidenceKind != drivers.EvidenceProvider || !strings.Contains(rc.Evidence, "404") {
		t.Errorf("receipt %+v, want confirmed destroyed with the API's 404", rc)
	}
	if _, ok := e.srv.LookupSnapshot(id.SnapshotID()); ok {
		t.Errorf("the snapshot is still at the provider after a confirmed delete")
	}
	res, err := from.Exec(ctx, drivers.Command{Argv: []string{"echo", "alive"}})
	if err != nil || string(res.Stdout) != "alive\n" {
		t.Errorf("the sandbox of the deleted snapshot: %+v, %v; want it running", res, err)
	}
	if _, err := e.drv.Acquire(ctx, e.config(t, id.SnapshotID()), drivers.AcquireRequest{}); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("Acquire of the deleted snapshot: err = %v, want ErrImageNotFound", err)
	}
}

// IMG-8: deleting a snapshot that is gone (deleted before, or never there)
// is a confirmed receipt: the API's 404 on DELETE and on the read-back.
func TestDeleteTemplateOfAGoneSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, id := e.capture(t, ctx, "tpl")
	never, err := images.SnapshotIdentity("daytona", uuid.NewString())
	if err != nil {
		t.Fatal(err)
	}
	td, _ := drivers.DriverAs[drivers.TemplateDeleter](e.drv)
	for i, tid := range []images.Identity{id, id, never} {
		rc, err := td.DeleteTemplate(ctx, e.config(t, e.snap.ID), tid)
		if err != nil || !rc.Confirmed || rc.State != drivers.StateDestroyed || !strings.Contains(rc.Evidence, "404") {
			t.Errorf("DeleteTemplate #%d of %s = %+v, %v; want a confirmed receipt", i+1, tid, rc, err)
		}
	}
	if n := e.srv.Calls(daytonafake.RouteDeleteSnapshot); n != 3 {
		t.Errorf("%d DELETE requests, want 3 (a 404 is not retried)", n)
	}
}

package daytona_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/daytonafake"
)

// post sends an authenticated API request straight to the fake.
func post(t *testing.T, e *env, path string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL()+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.srv.APIKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d", path, resp.StatusCode)
	}
}

// LEASE-4, LEASE-6: Resume starts an archived sandbox (restoring), and
// refuses one in state error with the provider's reason.
func TestResumeStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{knobs: daytonafake.Knobs{StartPolls: 1}})
	cfg := e.config(t, e.snap.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, _ := drivers.DriverAs[drivers.Resumer](e.drv)

	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Release(ctx, drivers.Stop); err != nil {
		t.Fatal(err)
	}
	post(t, e, "/sandbox/"+sb.ID()+"/archive")
	if v, _ := e.srv.Sandbox(sb.ID()); v.State != "archived" {
		t.Fatalf("state %q, want archived", v.State)
	}
	again, err := r.Resume(ctx, cfg, sb.ID())
	if err != nil {
		t.Fatalf("Resume of an archived sandbox: %v", err)
	}
	if res, err := again.Exec(ctx, drivers.Command{Argv: []string{"echo", "back"}}); err != nil || string(res.Stdout) != "back\n" {
		t.Fatalf("Exec after restoring: %v %+v", err, res)
	}
	if _, err := again.Release(ctx, drivers.Stop); err != nil {
		t.Fatal(err)
	}

	e.srv.SetKnobs(func(k *daytonafake.Knobs) { k.FailStart = "runner lost" })
	_, err = r.Resume(ctx, cfg, sb.ID())
	if err == nil || !strings.Contains(err.Error(), "runner lost") {
		t.Fatalf("Resume into a failing start: %v, want the provider's reason", err)
	}
	if _, err := r.Resume(ctx, cfg, sb.ID()); err == nil || errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Resume of an errored sandbox: %v, want the error state, not not-found", err)
	}
}

// IMG-4: a capture is a new snapshot id holding the sandbox's files, and
// sandboxes created from it by id start with them.
func TestCaptureCarriesTheSandboxFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cfg := e.config(t, e.snap.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(ctx, drivers.Destroy)
	if _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `echo captured > "$HOME/marker"`}}); err != nil {
		t.Fatal(err)
	}
	c, err := drivers.SandboxAs[drivers.Capturer](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Capture(ctx, drivers.CaptureRequest{Name: "My Template!"})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if id.SnapshotID() == "" || id.Provider() != "daytona" || id.SnapshotID() == e.snap.ID {
		t.Fatalf("Capture = %v, want a new daytona snapshot id", id)
	}
	if snap, ok := e.srv.LookupSnapshot(id.SnapshotID()); !ok || !strings.HasPrefix(snap.Name, "my-template") {
		t.Errorf("captured snapshot %+v (found %v), want a name derived from the template's", snap, ok)
	}
	from, err := e.drv.Acquire(ctx, e.config(t, id.SnapshotID()), drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire from the capture: %v", err)
	}
	defer from.Release(ctx, drivers.Destroy)
	res, err := from.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `cat "$HOME/marker"`}})
	if err != nil || string(res.Stdout) != "captured\n" {
		t.Fatalf("the captured file in a new sandbox: %v %+v", err, res)
	}
	ir, _ := drivers.SandboxAs[drivers.ImageReporter](from, 0)
	if live, err := ir.ImageIdentity(ctx); err != nil || live != id {
		t.Errorf("ImageIdentity of a sandbox from the capture = %v, %v; want %v", live, err, id)
	}
}

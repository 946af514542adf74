package berth_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

// Issue 30 on the Daytona fake (daytonaio/daytona v0.190.0's API): a
// scripted setup runs its step through the toolbox, captures the sandbox
// to a snapshot (active at the provider), deletes the setup sandbox with
// proof and promotes; a new lease starts from the snapshot and sees the
// step's file.
func TestScriptedSetupOnDaytona(t *testing.T) {
	ctx := context.Background()
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	base, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	drv := daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, CleanupTimeout: 10 * time.Second})
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Close() })
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "daytona-setup", Driver: "daytona", Config: map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(), "organization_id": srv.OrganizationID(),
		"snapshot_id": base.ID,
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc := sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: env.ID, Name: "mark", Promote: true,
		Script: strings.NewReader(`{"steps": [{"run": ["sh", "-c", "echo set-up-by-script > \"$HOME/mark\""]}]}`)})
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if ses.State != templates.SessionPromoted || ses.LeaseCleanup != string("confirmed") {
		t.Fatalf("session %+v", ses)
	}
	tpl, err := svc.Get(ctx, tplOps, ses.Template)
	if err != nil || !strings.HasPrefix(tpl.Identity, "snapshot:daytona/") || tpl.State != templates.StateActive {
		t.Fatalf("template %+v, %v", tpl, err)
	}
	if sn, ok := srv.LookupSnapshot(strings.TrimPrefix(tpl.Identity, "snapshot:daytona/")); !ok || sn.State != "active" {
		t.Fatalf("the snapshot at the provider: %+v (found %t), want active", sn, ok)
	}
	h, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}) }()
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", `cat "$HOME/mark"`}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "set-up-by-script\n" {
		t.Errorf("a new lease reads %q (%+v, %v)", res.Stdout, res, err)
	}
	if id, err := leasehook.ImageIdentity(h, ctx); err != nil || id.String() != tpl.Identity {
		t.Errorf("a new lease runs %v (%v), want the template %s", id, err, tpl.Identity)
	}
}

// Issue 30 on the Daytona fake: an interactive setup session's terminal
// (Service.OpenTerminal in process, the toolbox's PTY): a file written in
// the shell, exit, capture and promote; a new lease sees the file.
func TestInteractiveSetupOnDaytona(t *testing.T) {
	ctx := context.Background()
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	base, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	drv := daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, CleanupTimeout: 10 * time.Second})
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Close() })
	env, err := sys.Catalog().Create(ctx, tplOps, environment.CreateRequest{Name: "daytona-term", Driver: "daytona", Config: map[string]any{
		"api_url": srv.URL(), "api_key": srv.APIKey(), "organization_id": srv.OrganizationID(),
		"snapshot_id": base.ID,
	}})
	if err != nil {
		t.Fatal(err)
	}
	svc := sys.Templates()
	ses, err := svc.Setup(ctx, tplOps, templates.SetupRequest{Environment: env.ID, Interactive: true})
	if err != nil || ses.State != templates.SessionWaiting {
		t.Fatalf("Setup: %+v, %v", ses, err)
	}
	pty, err := svc.OpenTerminal(ctx, tplOps, ses.ID, 30, 90)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(pty)
		out <- b
	}()
	if _, err := pty.Write([]byte("echo typed-on-daytona > \"$HOME/term-mark\"; exit 0\n")); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if res, err := pty.Wait(wctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("the shell ended with %+v, %v", res, err)
	}
	_ = pty.Close()
	<-out
	done, err := svc.CaptureSession(ctx, tplOps, ses.ID, true)
	if err != nil || done.State != templates.SessionPromoted || done.LeaseCleanup != string("confirmed") {
		t.Fatalf("CaptureSession: %+v, %v", done, err)
	}
	h, err := sys.Leases().Acquire(ctx, tplOps, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}) }()
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", `cat "$HOME/term-mark"`}})
	if err != nil || string(res.Stdout) != "typed-on-daytona\n" {
		t.Errorf("a new lease reads %q (%+v, %v)", res.Stdout, res, err)
	}
}

package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
)

// silentRunner connects a raw runner on the session of ticket that reads
// every frame and answers none (a runner another principal controls), and
// returns its session once the controller welcomed it.
func silentRunner(t *testing.T, s *server, ticket string) string {
	t.Helper()
	before := map[string]bool{}
	for _, id := range s.c.ConnectedSessions() {
		before[id] = true
	}
	ws := dialRawTicket(t, s, ticket, []string{prpwire.Subprotocol})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := ws.Write(ctx, websocket.MessageText, helloWithTasks(t)); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, id := range s.c.ConnectedSessions() {
			if !before[id] {
				return id
			}
		}
	}
	t.Fatal("the raw runner was not welcomed within a minute")
	return ""
}

// Issue 22 item 1: another runner's session of the same lease and run,
// connected first (its ticket put straight into the ticket store, as a
// foreign mint could before), is never the holder's: Attach returns the
// session of the ticket it minted, the holder's task runs on the holder's
// runner, and the release stops the holder's tasks without waiting on the
// other session, whose runner answers nothing.
func TestAttachUsesOnlyItsOwnSession(t *testing.T) {
	t.Parallel()
	tickets := prpwire.NewMemoryTicketStore()
	w := newLeaseWorldWith(t, time.Minute, serverOptions{Options: controller.Options{Tickets: tickets}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := w.acquire(t)

	foreign, err := prp.NewTicket()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := tickets.CreateTicket(ctx, prp.TicketRecord{Hash: foreign.Hash(), Lease: h.ID(), Run: "run-1", Company: "co-1", Scope: prp.ScopeTask,
		CreatedAt: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	other := silentRunner(t, w.s, foreign.String())
	// A task on the other session, which its runner never answers.
	if _, err := w.s.c.StartTask(ctx, leaseOperator, other, "b1", prp.TaskStart{TaskID: "b-task", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}

	att, err := w.s.c.Attach(ctx, leaseOperator, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if att.Session() == other {
		t.Fatalf("Attach returned the other runner's session %s", other)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	if _, err := w.s.c.StartTask(ctx, leaseOperator, att.Session(), "a1", prp.TaskStart{TaskID: "a-task", Argv: []string{"sh", "-c", "echo ran > " + marker}}); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, w.s, att.Session(), "a1"); res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("the holder's task = %+v, want done with exit 0", res)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "ran\n" {
		t.Fatalf("the holder's task did not run on the holder's runner: %q, %v", b, err)
	}

	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	l, err := h.Release(rctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		t.Fatalf("Release (waits on the other session?): %v", err)
	}
	if l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("lease %s %s, want released confirmed", l.Status, l.Cleanup)
	}
}

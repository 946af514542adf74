// Package controllertest holds the conformance suite every
// controller.Store passes: the memory store in internal/controller, the SQL
// stores in berth's store package.
package controllertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prpwire"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
)

// RunStoreTests runs the Store conformance suite; newStore returns a fresh,
// empty store for each subtest. Times are truncated to microseconds, the
// precision SQL stores keep.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) controller.Store) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	session := func(t *testing.T, s controller.Store, id string) controller.Session {
		t.Helper()
		r := controller.Session{ID: id, Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, CreatedAt: now}
		if err := s.CreateSession(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	start := func(id, argv string) prp.Command {
		return prpwire.SealCommand(prp.Command{ID: id, Kind: prp.CommandTaskStart, Lease: "lease-1", Run: "run-1",
			TaskStart: &prp.TaskStart{TaskID: "t-" + id, Argv: []string{argv}, Env: map[string]string{"A": "1"}}})
	}

	t.Run("a session is created once and read back", func(t *testing.T) {
		s := newStore(t)
		want := session(t, s, "s_1")
		got, err := s.GetSession(ctx, "s_1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GetSession (-want +got):\n%s", diff)
		}
		if err := s.CreateSession(ctx, want); !errors.Is(err, errcode.ErrAlreadyExists) {
			t.Errorf("second CreateSession = %v, want ErrExists", err)
		}
		if _, err := s.GetSession(ctx, "s_2"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("GetSession of an unknown session = %v, want ErrNotFound", err)
		}
	})
	t.Run("a session keeps its ticket and holder mark", func(t *testing.T) {
		s := newStore(t)
		want := controller.Session{ID: "s_h", Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, CreatedAt: now, Ticket: "ab12", Holder: true}
		if err := s.CreateSession(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetSession(ctx, "s_h")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GetSession (-want +got):\n%s", diff)
		}
		if ls, err := s.LeaseSessions(ctx, "lease-1"); err != nil || len(ls) != 1 || ls[0].Ticket != "ab12" || !ls[0].Holder {
			t.Errorf("LeaseSessions = %+v, %v; want the session with its ticket and holder mark", ls, err)
		}
	})
	t.Run("a pool member's session is handed over once", func(t *testing.T) {
		s := newStore(t)
		pool := controller.Session{ID: "s_p", Lease: "lease-p", Run: "pool-1", Company: authz.InstanceCompany, Scope: prp.ScopeTask, CreatedAt: now, Holder: true}
		if err := s.CreateSession(ctx, pool); err != nil {
			t.Fatal(err)
		}
		if _, err := s.HandOverSession(ctx, "s_p", authz.InstanceCompany, "run-2"); err == nil {
			t.Error("HandOverSession to the instance company succeeded, want an error")
		}
		if _, err := s.HandOverSession(ctx, "s_p", "co-2", prp.PoolRunPrefix+"other"); err == nil {
			t.Error("HandOverSession to a warm-pool member's run succeeded, want an error")
		}
		if ok, err := s.HandOverSession(ctx, "s_p", "co-2", "run-2"); err != nil || !ok {
			t.Fatalf("HandOverSession = %t, %v; want true", ok, err)
		}
		got, err := s.GetSession(ctx, "s_p")
		if err != nil {
			t.Fatal(err)
		}
		want := pool
		want.Company, want.Run = "co-2", "run-2"
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the handed-over session (-want +got):\n%s", diff)
		}
		if ok, err := s.HandOverSession(ctx, "s_p", "co-3", "run-3"); err != nil || ok {
			t.Errorf("second HandOverSession = %t, %v; want false, nil", ok, err)
		}
		if got, _ := s.GetSession(ctx, "s_p"); got.Company != "co-2" || got.Run != "run-2" {
			t.Errorf("after a second hand-over the session is %s/%s, want co-2/run-2", got.Company, got.Run)
		}
		tenant := session(t, s, "s_t")
		if ok, err := s.HandOverSession(ctx, tenant.ID, "co-2", "run-2"); err != nil || ok {
			t.Errorf("HandOverSession of a tenant's session = %t, %v; want false, nil", ok, err)
		}
		if _, err := s.HandOverSession(ctx, "s_none", "co-2", "run-2"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("HandOverSession of an unknown session = %v, want ErrNotFound", err)
		}
		// Racing hand-overs: exactly one wins.
		racer := controller.Session{ID: "s_r", Lease: "lease-r", Run: "pool-2", Company: authz.InstanceCompany, Scope: prp.ScopeTask, CreatedAt: now}
		if err := s.CreateSession(ctx, racer); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 8 {
			wg.Go(func() {
				ok, err := s.HandOverSession(ctx, "s_r", fmt.Sprintf("co-%d", i), "run-x")
				if err != nil {
					t.Errorf("racing HandOverSession: %v", err)
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Errorf("%d racing hand-overs won, want 1", won)
		}
	})
	t.Run("one connection of a session is live at a time", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		if ok, err := s.ClaimConnection(ctx, "s_1", "c_a", now.Add(time.Minute), now); err != nil || !ok {
			t.Fatalf("first claim = %t, %v; want true", ok, err)
		}
		if got, err := s.GetSession(ctx, "s_1"); err != nil || !got.ConnectedUntil.Equal(now.Add(time.Minute)) {
			t.Errorf("ConnectedUntil = %v, %v; want %v", got.ConnectedUntil, err, now.Add(time.Minute))
		}
		if ok, err := s.ClaimConnection(ctx, "s_1", "c_b", now.Add(2*time.Minute), now.Add(time.Second)); err != nil || ok {
			t.Errorf("a second connection's claim while the first lasts = %t, %v; want false", ok, err)
		}
		if ok, err := s.ClaimConnection(ctx, "s_1", "c_a", now.Add(2*time.Minute), now.Add(time.Second)); err != nil || !ok {
			t.Errorf("the first connection's renewal = %t, %v; want true", ok, err)
		}
		// An expired claim (a dead connection) gives way.
		if ok, err := s.ClaimConnection(ctx, "s_1", "c_b", now.Add(4*time.Minute), now.Add(3*time.Minute)); err != nil || !ok {
			t.Errorf("a claim after the first expired = %t, %v; want true", ok, err)
		}
		// A released claim gives way at once; releasing another's does nothing.
		if err := s.ReleaseConnection(ctx, "s_1", "c_a"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.ClaimConnection(ctx, "s_1", "c_c", now.Add(5*time.Minute), now.Add(3*time.Minute)); ok {
			t.Error("releasing another connection's claim dropped the live one")
		}
		if err := s.ReleaseConnection(ctx, "s_1", "c_b"); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.ClaimConnection(ctx, "s_1", "c_c", now.Add(5*time.Minute), now.Add(3*time.Minute)); err != nil || !ok {
			t.Errorf("a claim after the release = %t, %v; want true", ok, err)
		}
		if _, err := s.ClaimConnection(ctx, "s_9", "c_a", now.Add(time.Minute), now); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("a claim on an unknown session = %v, want ErrNotFound", err)
		}
	})
	t.Run("claims are renewed in one write, each as ClaimConnection would", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"s_1", "s_2", "s_3", "s_4"} {
			session(t, s, id)
		}
		// s_1 and s_2 are held by c_1 and c_2 until +1m, s_3 by c_x until
		// +1m, s_4 by c_y until +10s.
		for _, c := range []controller.ConnectionClaim{{Session: "s_1", Conn: "c_1"}, {Session: "s_2", Conn: "c_2"}, {Session: "s_3", Conn: "c_x"}} {
			if ok, err := s.ClaimConnection(ctx, c.Session, c.Conn, now.Add(time.Minute), now); err != nil || !ok {
				t.Fatalf("ClaimConnection(%s, %s) = %t, %v", c.Session, c.Conn, ok, err)
			}
		}
		if ok, err := s.ClaimConnection(ctx, "s_4", "c_y", now.Add(10*time.Second), now); err != nil || !ok {
			t.Fatalf("ClaimConnection(s_4, c_y) = %t, %v", ok, err)
		}
		at := now.Add(20 * time.Second)
		until := at.Add(time.Minute)
		got, err := s.RenewConnections(ctx, []controller.ConnectionClaim{
			{Session: "s_1", Conn: "c_1"}, // its own: renewed
			{Session: "s_2", Conn: "c_2"}, // its own: renewed
			{Session: "s_3", Conn: "c_3"}, // c_x's claim lasts: refused
			{Session: "s_4", Conn: "c_4"}, // c_y's claim expired: taken
			{Session: "s_9", Conn: "c_9"}, // no such session
		}, until, at)
		if err != nil {
			t.Fatal(err)
		}
		byID := func(a, b controller.ConnectionClaim) int { return strings.Compare(a.Session, b.Session) }
		slices.SortFunc(got, byID)
		if want := []controller.ConnectionClaim{{Session: "s_1", Conn: "c_1"}, {Session: "s_2", Conn: "c_2"}, {Session: "s_4", Conn: "c_4"}}; !slices.Equal(got, want) {
			t.Errorf("RenewConnections = %v, want %v", got, want)
		}
		for id, want := range map[string]time.Time{"s_1": until, "s_2": until, "s_3": now.Add(time.Minute), "s_4": until} {
			if r, err := s.GetSession(ctx, id); err != nil || !r.ConnectedUntil.Equal(want) {
				t.Errorf("%s: ConnectedUntil = %v, %v; want %v", id, r.ConnectedUntil, err, want)
			}
		}
		// The claims are the renewing connections': another is refused,
		// the holder renews again.
		if ok, err := s.ClaimConnection(ctx, "s_4", "c_y", until, at); err != nil || ok {
			t.Errorf("the old connection's claim after the renewal took s_4 = %t, %v; want false", ok, err)
		}
		if ok, err := s.ClaimConnection(ctx, "s_3", "c_3", until, at); err != nil || ok {
			t.Errorf("a claim on s_3 while c_x holds it = %t, %v; want false", ok, err)
		}
		if got, err := s.RenewConnections(ctx, []controller.ConnectionClaim{{Session: "s_4", Conn: "c_4"}}, until.Add(time.Second), at); err != nil || !slices.Equal(got, []controller.ConnectionClaim{{Session: "s_4", Conn: "c_4"}}) {
			t.Errorf("RenewConnections(s_4 by c_4) again = %v, %v; want s_4 by c_4", got, err)
		}
		// Of two claims of one free session, one is set, and named.
		session(t, s, "s_5")
		got, err = s.RenewConnections(ctx, []controller.ConnectionClaim{{Session: "s_5", Conn: "c_a"}, {Session: "s_5", Conn: "c_b"}}, until, at)
		if err != nil || len(got) != 1 || got[0].Session != "s_5" {
			t.Fatalf("RenewConnections of two claims of s_5 = %v, %v; want one of them", got, err)
		}
		other := map[string]string{"c_a": "c_b", "c_b": "c_a"}[got[0].Conn]
		if ok, err := s.ClaimConnection(ctx, "s_5", other, until, at); err != nil || ok {
			t.Errorf("s_5's claim by %s, after %s's was set = %t, %v; want false", other, got[0].Conn, ok, err)
		}
		if ok, err := s.ClaimConnection(ctx, "s_5", got[0].Conn, until, at); err != nil || !ok {
			t.Errorf("s_5's claim renewed by %s, whose claim was set = %t, %v; want true", got[0].Conn, ok, err)
		}
		if got, err := s.RenewConnections(ctx, nil, until, at); err != nil || got == nil || len(got) != 0 {
			t.Errorf("RenewConnections of no claim = %#v, %v; want an empty slice", got, err)
		}
	})
	t.Run("a lease's sessions are listed oldest first, no other lease's", func(t *testing.T) {
		s := newStore(t)
		if got, err := s.LeaseSessions(ctx, "lease-1"); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("LeaseSessions of a lease without sessions = %v, %v; want an empty slice", got, err)
		}
		later := controller.Session{ID: "s_0", Lease: "lease-1", Run: "run-2", Company: "co-1", Scope: prp.ScopeProbe, CreatedAt: now.Add(time.Second)}
		if err := s.CreateSession(ctx, later); err != nil {
			t.Fatal(err)
		}
		first := session(t, s, "s_1")
		other := controller.Session{ID: "s_2", Lease: "lease-2", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, CreatedAt: now}
		if err := s.CreateSession(ctx, other); err != nil {
			t.Fatal(err)
		}
		got, err := s.LeaseSessions(ctx, "lease-1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]controller.Session{first, later}, got); diff != "" {
			t.Errorf("LeaseSessions (-want +got):\n%s", diff)
		}
	})
	t.Run("commands get contiguous seqs per session", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		session(t, s, "s_2")
		for i, id := range []string{"c1", "c2", "c3"} {
			r, existed, err := s.AppendCommand(ctx, "s_1", start(id, "echo"), now)
			if err != nil || existed || r.Seq != uint64(i+1) || r.State != prp.JournalReceived {
				t.Fatalf("AppendCommand(%s) = seq %d existed %v state %s, %v; want seq %d, new, received", id, r.Seq, existed, r.State, err, i+1)
			}
		}
		if r, _, err := s.AppendCommand(ctx, "s_2", start("c1", "echo"), now); err != nil || r.Seq != 1 {
			t.Errorf("AppendCommand in another session = seq %d, %v; want seq 1", r.Seq, err)
		}
		got, err := s.CommandsAfter(ctx, "s_1", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 3 || got[1].Command.ID != "c3" {
			t.Errorf("CommandsAfter(1) = %+v, want c2, c3", got)
		}
		if diff := cmp.Diff(start("c3", "echo"), got[1].Command); diff != "" {
			t.Errorf("stored command (-want +got):\n%s", diff)
		}
		if got, _ := s.CommandsAfter(ctx, "s_1", 0, 2); len(got) != 2 {
			t.Errorf("CommandsAfter with limit 2 returned %d", len(got))
		}
	})
	t.Run("one read names the sessions with commands past their cursors", func(t *testing.T) {
		s := newStore(t)
		for _, id := range []string{"s_1", "s_2", "s_3", "s_4"} {
			session(t, s, id)
		}
		// s_1 holds 3 commands, s_2 and s_3 one each, s_4 none.
		for _, c := range []struct{ session, id string }{{"s_1", "c1"}, {"s_1", "c2"}, {"s_1", "c3"}, {"s_2", "c1"}, {"s_3", "c1"}} {
			if _, _, err := s.AppendCommand(ctx, c.session, start(c.id, "echo"), now); err != nil {
				t.Fatal(err)
			}
		}
		pending := func(cursors ...controller.CommandCursor) []string {
			t.Helper()
			got, err := s.SessionsWithCommandsAfter(ctx, cursors)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil {
				t.Error("SessionsWithCommandsAfter returned nil, want a slice")
			}
			slices.Sort(got)
			return got
		}
		got := pending(controller.CommandCursor{Session: "s_1", Sent: 2}, controller.CommandCursor{Session: "s_2", Sent: 1},
			controller.CommandCursor{Session: "s_3", Sent: 0}, controller.CommandCursor{Session: "s_4", Sent: 0},
			controller.CommandCursor{Session: "s_unknown", Sent: 0})
		if want := []string{"s_1", "s_3"}; !slices.Equal(got, want) {
			t.Errorf("SessionsWithCommandsAfter = %v, want %v (s_1 past 2 of 3, s_3 past 0 of 1; s_2 sent all, s_4 and an unknown session have none)", got, want)
		}
		if got := pending(controller.CommandCursor{Session: "s_1", Sent: 3}, controller.CommandCursor{Session: "s_1x", Sent: 0}); len(got) != 0 {
			t.Errorf("SessionsWithCommandsAfter with every command sent = %v, want none", got)
		}
		if got := pending(); len(got) != 0 {
			t.Errorf("SessionsWithCommandsAfter of no cursor = %v, want none", got)
		}
		// A command journaled after a read is named by the next.
		if _, _, err := s.AppendCommand(ctx, "s_4", start("c1", "echo"), now); err != nil {
			t.Fatal(err)
		}
		if got, want := pending(controller.CommandCursor{Session: "s_4", Sent: 0}, controller.CommandCursor{Session: "s_2", Sent: 1}), []string{"s_4"}; !slices.Equal(got, want) {
			t.Errorf("SessionsWithCommandsAfter after an append = %v, want %v", got, want)
		}
		// Many cursors are still one read.
		var many []controller.CommandCursor
		for i := range 2000 {
			many = append(many, controller.CommandCursor{Session: fmt.Sprintf("s_many_%d", i)})
		}
		many = append(many, controller.CommandCursor{Session: "s_1", Sent: 1})
		if got, want := pending(many...), []string{"s_1"}; !slices.Equal(got, want) {
			t.Errorf("SessionsWithCommandsAfter of %d cursors = %v, want %v", len(many), got, want)
		}
	})
	t.Run("a duplicate returns the journaled command and a changed body conflicts", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		first, _, err := s.AppendCommand(ctx, "s_1", start("c1", "echo"), now)
		if err != nil {
			t.Fatal(err)
		}
		again, existed, err := s.AppendCommand(ctx, "s_1", start("c1", "echo"), now.Add(time.Second))
		if err != nil || !existed || again.Seq != first.Seq {
			t.Errorf("duplicate AppendCommand = seq %d existed %v, %v; want seq %d existed", again.Seq, existed, err, first.Seq)
		}
		// PRP-4: the same id with another body is rejected.
		if _, _, err := s.AppendCommand(ctx, "s_1", start("c1", "false"), now); !errors.Is(err, controller.ErrIdempotencyConflict) {
			t.Errorf("AppendCommand with another body = %v, want ErrIdempotencyConflict", err)
		}
		if got, _ := s.CommandsAfter(ctx, "s_1", 0, 0); len(got) != 1 {
			t.Errorf("journal holds %d commands, want 1", len(got))
		}
	})
	t.Run("concurrent appends never share a seq or journal an id twice", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 20 {
			wg.Go(func() {
				_, _, err := s.AppendCommand(ctx, "s_1", start(fmt.Sprintf("c%d", i), "echo"), now)
				errs <- err
			})
			wg.Go(func() {
				_, _, err := s.AppendCommand(ctx, "s_1", start("same", "echo"), now)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("AppendCommand: %v", err)
			}
		}
		got, err := s.CommandsAfter(ctx, "s_1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for i, r := range got {
			if r.Seq != uint64(i+1) || ids[r.Command.ID] {
				t.Errorf("journal entry %d: seq %d id %s; want seq %d and unique ids", i, r.Seq, r.Command.ID, i+1)
			}
			ids[r.Command.ID] = true
		}
		if len(got) != 21 {
			t.Errorf("journal holds %d commands, want 21", len(got))
		}
	})
	t.Run("the first result wins", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		if _, _, err := s.AppendCommand(ctx, "s_1", start("c1", "echo"), now); err != nil {
			t.Fatal(err)
		}
		res := prp.Result{CommandID: "c1", Status: prp.ResultDone, Exit: &prp.Exit{Code: 3}}
		r, err := s.CompleteCommand(ctx, "s_1", res, now.Add(time.Second))
		if err != nil || r.State != prp.JournalDone || r.Result == nil || r.Result.Exit.Code != 3 {
			t.Fatalf("CompleteCommand = %+v, %v; want done with exit 3", r, err)
		}
		dup := prp.Result{CommandID: "c1", Status: prp.ResultDone, Duplicate: true, Exit: &prp.Exit{Code: 4}}
		r, err = s.CompleteCommand(ctx, "s_1", dup, now.Add(2*time.Second))
		if err != nil || r.Result.Exit.Code != 3 || r.Result.Duplicate {
			t.Errorf("second CompleteCommand = %+v, %v; want the first result kept", r.Result, err)
		}
		got, err := s.GetCommand(ctx, "s_1", "c1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res, *got.Result); diff != "" || !got.UpdatedAt.Equal(now.Add(time.Second)) {
			t.Errorf("GetCommand result (-want +got):\n%s updated %v", diff, got.UpdatedAt)
		}
		if _, err := s.CompleteCommand(ctx, "s_1", prp.Result{CommandID: "c9", Status: prp.ResultDone}, now); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("CompleteCommand of an unknown command = %v, want ErrNotFound", err)
		}
		if _, err := s.GetCommand(ctx, "s_1", "c9"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("GetCommand of an unknown command = %v, want ErrNotFound", err)
		}
		if _, _, err := s.AppendCommand(ctx, "s_1", start("c2", "echo"), now); err != nil {
			t.Fatal(err)
		}
		r, err = s.CompleteCommand(ctx, "s_1", prp.Result{CommandID: "c2", Status: prp.ResultIndeterminate, Code: prpwire.CodeInterrupted}, now)
		if err != nil || r.State != prp.JournalIndeterminate {
			t.Errorf("CompleteCommand indeterminate = %s, %v; want indeterminate", r.State, err)
		}
	})
	t.Run("events are stored once per seq and read in order", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		out := controller.EventRecord{Session: "s_1", Seq: 2, StoredAt: now, Ref: &controller.OutputRef{File: "s_1/0.chunk", Offset: 10, Length: 5},
			Event: prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Offset: 7}}}
		res := controller.EventRecord{Session: "s_1", Seq: 1, StoredAt: now,
			Event: prp.Event{Kind: prp.EventResult, Result: &prp.Result{CommandID: "c1", Status: prp.ResultDone}}}
		for _, r := range []controller.EventRecord{res, out} {
			if ok, err := s.PutEvent(ctx, r); err != nil || !ok {
				t.Fatalf("PutEvent(%d) = %v, %v; want stored", r.Seq, ok, err)
			}
		}
		again := out
		again.Ref = &controller.OutputRef{File: "other", Length: 1}
		if ok, err := s.PutEvent(ctx, again); err != nil || ok {
			t.Errorf("PutEvent of a stored seq = %v, %v; want false, nil", ok, err)
		}
		got, err := s.EventsAfter(ctx, "s_1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]controller.EventRecord{res, out}, got); diff != "" {
			t.Errorf("EventsAfter (-want +got):\n%s", diff)
		}
		if got, _ := s.EventsAfter(ctx, "s_1", 1, 0); len(got) != 1 || got[0].Seq != 2 {
			t.Errorf("EventsAfter(1) = %+v, want seq 2", got)
		}
		if got, _ := s.EventsAfter(ctx, "s_1", 0, 1); len(got) != 1 || got[0].Seq != 1 {
			t.Errorf("EventsAfter limit 1 = %+v, want seq 1", got)
		}
		if n, err := s.LastEventSeq(ctx, "s_1"); err != nil || n != 2 {
			t.Errorf("LastEventSeq = %d, %v; want 2", n, err)
		}
		if n, err := s.LastEventSeq(ctx, "s_2"); err != nil || n != 0 {
			t.Errorf("LastEventSeq of a session without events = %d, %v; want 0", n, err)
		}
	})
	t.Run("a batch of events is stored once per seq", func(t *testing.T) {
		s := newStore(t)
		b, ok := s.(controller.EventBatcher)
		if !ok {
			t.Skip("the store stores events one by one (no EventBatcher)")
		}
		session(t, s, "s_1")
		ev := func(seq uint64, file string) controller.EventRecord {
			return controller.EventRecord{Session: "s_1", Seq: seq, StoredAt: now, Ref: &controller.OutputRef{File: file, Length: 1},
				Event: prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Offset: int64(seq)}}}
		}
		if err := b.PutEvents(ctx, []controller.EventRecord{ev(1, "a"), ev(2, "a")}); err != nil {
			t.Fatal(err)
		}
		// A batch that repeats stored seqs keeps the stored events.
		if err := b.PutEvents(ctx, []controller.EventRecord{ev(2, "b"), ev(3, "b")}); err != nil {
			t.Fatal(err)
		}
		got, err := s.EventsAfter(ctx, "s_1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]controller.EventRecord{ev(1, "a"), ev(2, "a"), ev(3, "b")}, got); diff != "" {
			t.Errorf("EventsAfter (-want +got):\n%s", diff)
		}
	})
	t.Run("a group intake stores many sessions' events and usage at once, idempotently", func(t *testing.T) {
		s := newStore(t)
		g, ok := s.(controller.GroupIntaker)
		if !ok {
			t.Skip("the store has no group intake (no GroupIntaker)")
		}
		session(t, s, "s_1")
		session(t, s, "s_2")
		ev := func(sess string, seq uint64, file string) controller.EventRecord {
			return controller.EventRecord{Session: sess, Seq: seq, StoredAt: now, Ref: &controller.OutputRef{File: file, Length: 1},
				Event: prp.Event{Kind: prp.EventOutput, TaskID: "t1", Output: &prp.Output{Stream: prp.Stdout, Offset: int64(seq)}}}
		}
		usage := func(seq uint64, bytes int64) []controller.TaskUsage {
			return []controller.TaskUsage{{Usage: controller.OutputUsage{Seq: seq, Bytes: bytes, Events: int64(seq)}}, {Task: "t1", Usage: controller.OutputUsage{Seq: seq, Bytes: bytes}}}
		}
		if err := g.PutIntake(ctx, []controller.IntakeBatch{
			{Session: "s_1", Events: []controller.EventRecord{ev("s_1", 1, "a"), ev("s_1", 2, "a")}, Usage: usage(2, 2)},
			{Session: "s_2", Events: []controller.EventRecord{ev("s_2", 1, "c")}, Usage: usage(1, 1)},
		}); err != nil {
			t.Fatal(err)
		}
		// Stored seqs again keep the stored events; an older usage does not
		// replace a newer one.
		if err := g.PutIntake(ctx, []controller.IntakeBatch{
			{Session: "s_1", Events: []controller.EventRecord{ev("s_1", 2, "b"), ev("s_1", 3, "b")}, Usage: usage(3, 3)},
			{Session: "s_2", Usage: usage(0, 0)},
		}); err != nil {
			t.Fatal(err)
		}
		got, err := s.EventsAfter(ctx, "s_1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]controller.EventRecord{ev("s_1", 1, "a"), ev("s_1", 2, "a"), ev("s_1", 3, "b")}, got); diff != "" {
			t.Errorf("EventsAfter(s_1) (-want +got):\n%s", diff)
		}
		for sess, want := range map[string]int64{"s_1": 3, "s_2": 1} {
			for _, task := range []string{"", "t1"} {
				if u, err := s.OutputUsage(ctx, sess, task); err != nil || u.Bytes != want {
					t.Errorf("OutputUsage(%s, %q) = %+v, %v; want %d bytes", sess, task, u, err, want)
				}
			}
		}
	})
	t.Run("a group intake completes the commands of its result events in the same commit", func(t *testing.T) {
		s := newStore(t)
		g, ok := s.(controller.GroupIntaker)
		if !ok {
			t.Skip("the store has no group intake (no GroupIntaker)")
		}
		session(t, s, "s_1")
		for _, id := range []string{"c1", "c2"} {
			if _, _, err := s.AppendCommand(ctx, "s_1", start(id, "a"), now); err != nil {
				t.Fatal(err)
			}
		}
		result := func(seq uint64, id string, code int) controller.EventRecord {
			return controller.EventRecord{Session: "s_1", Seq: seq, StoredAt: now.Add(time.Duration(seq) * time.Second),
				Event: prp.Event{Kind: prp.EventResult, Result: &prp.Result{CommandID: id, Status: prp.ResultDone, Exit: &prp.Exit{Code: code}}}}
		}
		// c2's result event is stored already, without its completion (a
		// crash between the writes of a store without group intake).
		if _, err := s.PutEvent(ctx, result(3, "c2", 0)); err != nil {
			t.Fatal(err)
		}
		// c1's result, a result of a command never journaled (skipped),
		// and c2's stored result again: completed all the same.
		if err := g.PutIntake(ctx, []controller.IntakeBatch{{Session: "s_1", Events: []controller.EventRecord{result(1, "c1", 3), result(2, "nope", 1), result(3, "c2", 0)}}}); err != nil {
			t.Fatal(err)
		}
		// Another result of c1: the first wins.
		if err := g.PutIntake(ctx, []controller.IntakeBatch{{Session: "s_1", Events: []controller.EventRecord{result(4, "c1", 4)}}}); err != nil {
			t.Fatal(err)
		}
		for id, code := range map[string]int{"c1": 3, "c2": 0} {
			r, err := s.GetCommand(ctx, "s_1", id)
			if err != nil {
				t.Fatal(err)
			}
			if !r.State.Terminal() || r.Result == nil || r.Result.Exit == nil || r.Result.Exit.Code != code {
				t.Errorf("command %s after the group intake: state %s, result %+v; want done with exit %d", id, r.State, r.Result, code)
			}
		}
	})
	t.Run("the secrets of a command are claimed once, of concurrent claims one wins", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		if _, _, err := s.AppendCommand(ctx, "s_1", start("c1", "a"), now); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.AppendCommand(ctx, "s_1", start("c2", "b"), now); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for range 8 {
			wg.Go(func() {
				ok, err := s.ClaimSecrets(ctx, "s_1", "c1", now)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if won != 1 {
			t.Errorf("%d of 8 concurrent claims of c1 won, want 1", won)
		}
		if ok, err := s.ClaimSecrets(ctx, "s_1", "c1", now); ok || err != nil {
			t.Errorf("a later claim of c1 = %v, %v; want false", ok, err)
		}
		if ok, err := s.ClaimSecrets(ctx, "s_1", "c2", now); !ok || err != nil {
			t.Errorf("the first claim of c2 = %v, %v; want true", ok, err)
		}
		if _, err := s.ClaimSecrets(ctx, "s_1", "c3", now); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("a claim of an unknown command = %v, want ErrNotFound", err)
		}
	})
	t.Run("output usage moves only forwards and acks discarded events", func(t *testing.T) {
		s := newStore(t)
		session(t, s, "s_1")
		if u, err := s.OutputUsage(ctx, "s_1", ""); err != nil || u != (controller.OutputUsage{}) {
			t.Fatalf("OutputUsage of a new session = %+v, %v; want zero", u, err)
		}
		u5 := controller.OutputUsage{Seq: 5, Bytes: 10, Events: 3, Truncated: 7, Discarded: 2}
		t5 := controller.OutputUsage{Seq: 4, Bytes: 10, Truncated: 7}
		if err := s.PutOutputUsage(ctx, "s_1", []controller.TaskUsage{{Usage: u5}, {Task: "t1", Usage: t5}}); err != nil {
			t.Fatal(err)
		}
		// A slower writer's older counters change nothing.
		if err := s.PutOutputUsage(ctx, "s_1", []controller.TaskUsage{{Usage: controller.OutputUsage{Seq: 3, Bytes: 1}}, {Task: "t1", Usage: controller.OutputUsage{Seq: 2}}}); err != nil {
			t.Fatal(err)
		}
		if u, err := s.OutputUsage(ctx, "s_1", ""); err != nil || u != u5 {
			t.Errorf("session usage = %+v, %v; want %+v", u, err, u5)
		}
		if u, err := s.OutputUsage(ctx, "s_1", "t1"); err != nil || u != t5 {
			t.Errorf("task usage = %+v, %v; want %+v", u, err, t5)
		}
		if last, err := s.LastEventSeq(ctx, "s_1"); err != nil || last != 5 {
			t.Errorf("LastEventSeq with no event stored and usage at 5 = %d, %v; want 5", last, err)
		}
		if _, err := s.PutEvent(ctx, controller.EventRecord{Session: "s_1", Seq: 6, Event: prp.Event{Kind: prp.EventStarted, TaskID: "t1", PID: 1}, StoredAt: now}); err != nil {
			t.Fatal(err)
		}
		if last, err := s.LastEventSeq(ctx, "s_1"); err != nil || last != 6 {
			t.Errorf("LastEventSeq after event 6 = %d, %v; want 6", last, err)
		}
	})
	t.Run("a cancelled context is honoured", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.GetSession(cctx, "s_1"); !errors.Is(err, context.Canceled) {
			t.Errorf("GetSession with a cancelled context = %v, want context.Canceled", err)
		}
	})
}

// Package templatestest is the conformance suite of the templates package's Store:
// the memory store and the SQL stores (SQLite, PostgreSQL) pass it.
//
//	templatestest.RunStoreTests(t, func(t *testing.T) templates.Store { return store.Memory().Templates })
//
// templates.Store is sealed: the suite checks berth's own stores.
package templatestest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/templates"
)

// records is the store inside a templates.Store.
type records = templatehook.Records[*templates.Template, *templates.Session, *templates.Event, *templates.SessionEvent]

// RunStoreTests runs the suite; newStore returns a fresh, empty store for
// each subtest.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) templates.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s records)
	}{
		{"insert then get returns an equal deep copy", testRoundTrip},
		{"a taken id is a conflict and changes nothing", testDuplicate},
		{"update checks the version", testUpdateVersion},
		{"10 concurrent updates from one version: exactly one wins", testUpdateConcurrent},
		{"list filters by environment and wanted deletion, by creation time", testList},
		{"events append in order per environment", testEvents},
		{"missing templates are not found", testNotFound},
		{"a cancelled context is honoured", testCancelled},
		{"setup sessions round trip and check the version", testSessionRoundTrip},
		{"one active setup session per environment", testSessionOneActive},
		{"10 concurrent starts of one environment's session: exactly one exists", testSessionConcurrent},
		{"session events are read after a cursor", testSessionEvents},
		{"a terminal token is redeemed once, before it expires; of 10 concurrent redemptions one wins; expired ones are pruned", testTerminalTokens},
		{"a refused redemption of a terminal token (another hash, past its expiry) uses nothing up", testTerminalTokenRefusalUsesNothing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, templatehook.Unseal(newStore(t)).(records))
		})
	}
}

// clone returns a copy of *v.
func clone[T any](v *T) *T {
	c := *v
	return &c
}

// baseTime has nanoseconds and a zone other than UTC, to catch stores that
// truncate or lose the instant.
var baseTime = time.Date(2026, 12, 1, 10, 11, 12, 123456789, time.FixedZone("UTC+1", 3600))

func sample(id, env string, at time.Time) *templates.Template {
	return &templates.Template{
		ID: id, Environment: env, Name: "with tools", Driver: "fake", State: templates.StateCaptured,
		Identity: "snapshot:fake/snap-" + id, SourceFingerprint: "sha256:" + fmt.Sprintf("%064d", 7),
		Lease: "lse_1", CreatedAt: at, CreatedBy: "admin-1", UpdatedAt: at, Version: 1,
	}
}

var sameInstant = cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got, sameInstant); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func mustInsert(t *testing.T, s records, tpl *templates.Template) {
	t.Helper()
	if err := s.InsertTemplate(context.Background(), tpl); err != nil {
		t.Fatalf("InsertTemplate(%s): %v", tpl.ID, err)
	}
}

func mustGet(t *testing.T, s records, id string) *templates.Template {
	t.Helper()
	got, err := s.GetTemplate(context.Background(), id)
	if err != nil {
		t.Fatalf("GetTemplate(%s): %v", id, err)
	}
	return got
}

func wantErr(t *testing.T, op string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %v", op, err, target)
	}
}

func testRoundTrip(t *testing.T, s records) {
	full := sample("tpl-1", "env-1", baseTime)
	full.ContentHash, full.SetupSession = "sha256:abc", "ses-1"
	full.State, full.RevokedAt, full.RevokedBy, full.RevokeReason = templates.StateRevoked, baseTime.Add(time.Minute), "admin-2", "leaks a token"
	full.DeleteWanted, full.DeleteNote = true, "lease lse_2 uses it"
	full.FailureReason = "none really"
	full.DeleteReceipt = &drivers.Receipt{State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: baseTime.Add(time.Hour),
		Evidence: "inspect image: not found", EvidenceKind: drivers.EvidenceProvider}
	mustInsert(t, s, full)
	got := mustGet(t, s, "tpl-1")
	diff(t, "round trip", full, got)
	got.DeleteReceipt.Evidence = "changed by the caller"
	if again := mustGet(t, s, "tpl-1"); again.DeleteReceipt.Evidence != "inspect image: not found" {
		t.Errorf("changing a returned template changed the stored one")
	}
	minimal := &templates.Template{ID: "tpl-2", Environment: "env-1", State: templates.StateFailed, Version: 1}
	mustInsert(t, s, minimal)
	diff(t, "minimal round trip", minimal, mustGet(t, s, "tpl-2"))
	wantErr(t, "insert with version 2", s.InsertTemplate(context.Background(), &templates.Template{ID: "tpl-3", Environment: "env-1", Version: 2}), errcode.ErrInvalid)
}

func testDuplicate(t *testing.T, s records) {
	mustInsert(t, s, sample("tpl-1", "env-1", baseTime))
	other := sample("tpl-1", "env-2", baseTime)
	wantErr(t, "insert of a taken id", s.InsertTemplate(context.Background(), other), errcode.ErrConflict)
	if got := mustGet(t, s, "tpl-1"); got.Environment != "env-1" {
		t.Errorf("a refused insert changed the stored template: environment %q", got.Environment)
	}
}

func testUpdateVersion(t *testing.T, s records) {
	ctx := context.Background()
	mustInsert(t, s, sample("tpl-1", "env-1", baseTime))
	v2 := mustGet(t, s, "tpl-1")
	v2.State, v2.Version, v2.UpdatedAt = templates.StateActive, 2, baseTime.Add(time.Second)
	if err := s.UpdateTemplate(ctx, v2); err != nil {
		t.Fatalf("UpdateTemplate: %v", err)
	}
	diff(t, "after update", v2, mustGet(t, s, "tpl-1"))
	stale := clone(v2)
	stale.State = templates.StateRevoked // still version 2: based on 1
	wantErr(t, "stale update", s.UpdateTemplate(ctx, stale), errcode.ErrConflict)
	diff(t, "after a stale update", v2, mustGet(t, s, "tpl-1"))
	missing := sample("nope", "env-1", baseTime)
	missing.Version = 2
	wantErr(t, "update of a missing template", s.UpdateTemplate(ctx, missing), errcode.ErrNotFound)
}

func testUpdateConcurrent(t *testing.T, s records) {
	ctx := context.Background()
	mustInsert(t, s, sample("tpl-1", "env-1", baseTime))
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, conflicts := 0, 0
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := sample("tpl-1", "env-1", baseTime)
			u.Version, u.Name = 2, fmt.Sprintf("writer %d", i)
			err := s.UpdateTemplate(ctx, u)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, errcode.ErrConflict):
				conflicts++
			default:
				t.Errorf("UpdateTemplate: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != 9 {
		t.Errorf("%d wins and %d conflicts, want 1 and 9", wins, conflicts)
	}
}

func testList(t *testing.T, s records) {
	ctx := context.Background()
	mustInsert(t, s, sample("tpl-b", "env-1", baseTime.Add(2*time.Second)))
	mustInsert(t, s, sample("tpl-a", "env-1", baseTime.Add(2*time.Second)))
	first := sample("tpl-z", "env-1", baseTime)
	first.DeleteWanted = true
	mustInsert(t, s, first)
	mustInsert(t, s, sample("tpl-c", "env-2", baseTime))
	ids := func(f templatehook.Filter) []string {
		t.Helper()
		list, err := s.ListTemplates(ctx, f)
		if err != nil {
			t.Fatalf("ListTemplates(%+v): %v", f, err)
		}
		out := []string{}
		for _, tpl := range list {
			out = append(out, tpl.ID)
		}
		return out
	}
	diff(t, "env-1", []string{"tpl-z", "tpl-a", "tpl-b"}, ids(templatehook.Filter{Environment: "env-1"}))
	diff(t, "all", []string{"tpl-c", "tpl-z", "tpl-a", "tpl-b"}, ids(templatehook.Filter{}))
	diff(t, "delete wanted", []string{"tpl-z"}, ids(templatehook.Filter{DeleteWanted: true}))
	diff(t, "none", []string{}, ids(templatehook.Filter{Environment: "env-9"}))
}

func testEvents(t *testing.T, s records) {
	ctx := context.Background()
	e1 := &templates.Event{Environment: "env-1", Action: "promote", To: "tpl-1", Actor: "admin-1", At: baseTime, Revision: 2}
	e2 := &templates.Event{Environment: "env-1", Action: "promote", From: "tpl-1", To: "tpl-2", Actor: "admin-2", At: baseTime.Add(time.Second), Revision: 3, Reason: "new tools"}
	o1 := &templates.Event{Environment: "env-2", Action: "revoke", From: "tpl-9", Actor: "admin-1", At: baseTime, Revision: 5}
	for _, e := range []*templates.Event{e1, o1, e2} {
		if err := s.AppendEvent(ctx, e); err != nil {
			t.Fatalf("AppendEvent: %v", err)
		}
	}
	if e1.Seq != 1 || e2.Seq != 2 || o1.Seq != 1 {
		t.Errorf("seqs %d, %d, %d; want 1, 2 and 1 (per environment)", e1.Seq, e2.Seq, o1.Seq)
	}
	got, err := s.ListEvents(ctx, "env-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "env-1 history", []*templates.Event{e1, e2}, got)
	none, err := s.ListEvents(ctx, "env-9")
	if err != nil || len(none) != 0 {
		t.Errorf("ListEvents(env-9) = %v, %v; want none", none, err)
	}
}

func testNotFound(t *testing.T, s records) {
	_, err := s.GetTemplate(context.Background(), "nope")
	wantErr(t, "get of a missing template", err, errcode.ErrNotFound)
}

func testCancelled(t *testing.T, s records) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.InsertTemplate(ctx, sample("tpl-1", "env-1", baseTime)); !errors.Is(err, context.Canceled) {
		t.Errorf("InsertTemplate on a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.ListTemplates(ctx, templatehook.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ListTemplates on a cancelled context: %v, want context.Canceled", err)
	}
}

func sampleSession(id, env string, state templates.SessionState, at time.Time) *templates.Session {
	return &templates.Session{
		ID: id, Environment: env, Name: "tools", Driver: "fake", State: state, Steps: 2,
		ContentHash: "sha256:" + fmt.Sprintf("%064d", 3), Lease: "lse_9", CreatedAt: at, CreatedBy: "admin-1",
		UpdatedAt: at, ExpiresAt: at.Add(time.Minute), Deadline: at.Add(time.Hour), Version: 1,
	}
}

func testSessionRoundTrip(t *testing.T, s records) {
	ctx := context.Background()
	full := sampleSession("ses-1", "env-1", templates.SessionWaiting, baseTime)
	full.Interactive, full.Template, full.Reused, full.BaseTemplate = true, "tpl-1", true, "tpl-0"
	full.FailureReason, full.LeaseCleanup = "step 2 exited 1", "confirmed"
	if err := s.InsertSession(ctx, full); err != nil {
		t.Fatalf("InsertSession: %v", err)
	}
	got, err := s.GetSession(ctx, "ses-1")
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "session round trip", full, got)
	wantErr(t, "insert of a taken session id", s.InsertSession(ctx, sampleSession("ses-1", "env-2", templates.SessionCaptured, baseTime)), errcode.ErrConflict)
	wantErr(t, "insert with version 2", s.InsertSession(ctx, &templates.Session{ID: "ses-2", Environment: "env-1", Version: 2}), errcode.ErrInvalid)
	v2 := clone(got)
	v2.State, v2.Version = templates.SessionCapturing, 2
	if err := s.UpdateSession(ctx, v2); err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	stale := clone(v2)
	stale.State = templates.SessionCancelled
	wantErr(t, "stale session update", s.UpdateSession(ctx, stale), errcode.ErrConflict)
	if got, _ := s.GetSession(ctx, "ses-1"); got == nil || got.State != templates.SessionCapturing {
		t.Errorf("after a stale update: %+v", got)
	}
	_, err = s.GetSession(ctx, "nope")
	wantErr(t, "get of a missing session", err, errcode.ErrNotFound)
	missing := sampleSession("nope", "env-1", templates.SessionCancelled, baseTime)
	missing.Version = 2
	wantErr(t, "update of a missing session", s.UpdateSession(ctx, missing), errcode.ErrNotFound)
}

func testSessionOneActive(t *testing.T, s records) {
	ctx := context.Background()
	if err := s.InsertSession(ctx, sampleSession("ses-1", "env-1", templates.SessionStarting, baseTime)); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a second active session", s.InsertSession(ctx, sampleSession("ses-2", "env-1", templates.SessionStarting, baseTime)), templates.ErrSessionActive)
	if err := s.InsertSession(ctx, sampleSession("ses-3", "env-2", templates.SessionWaiting, baseTime)); err != nil {
		t.Errorf("an active session of another environment: %v", err)
	}
	if err := s.InsertSession(ctx, sampleSession("ses-4", "env-1", templates.SessionCaptured, baseTime.Add(time.Second))); err != nil {
		t.Errorf("an ended session beside the active one: %v", err)
	}
	ended := sampleSession("ses-1", "env-1", templates.SessionCancelled, baseTime)
	ended.Version = 2
	if err := s.UpdateSession(ctx, ended); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSession(ctx, sampleSession("ses-5", "env-1", templates.SessionStarting, baseTime.Add(2*time.Second))); err != nil {
		t.Fatalf("a new session once the active one ended: %v", err)
	}
	back := clone(ended)
	back.State, back.Version = templates.SessionWaiting, 3
	wantErr(t, "an ended session made active again beside another", s.UpdateSession(ctx, back), templates.ErrSessionActive)
	list, err := s.ListSessions(ctx, templatehook.Filter{Environment: "env-1"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, x := range list {
		ids = append(ids, x.ID)
	}
	diff(t, "sessions of env-1", []string{"ses-1", "ses-4", "ses-5"}, ids)
	active, err := s.ListSessions(ctx, templatehook.Filter{Active: true})
	if err != nil {
		t.Fatal(err)
	}
	ids = []string{}
	for _, x := range active {
		ids = append(ids, x.ID)
	}
	diff(t, "active sessions", []string{"ses-3", "ses-5"}, ids)
}

func testSessionConcurrent(t *testing.T, s records) {
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, refused := 0, 0
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.InsertSession(ctx, sampleSession(fmt.Sprintf("ses-%d", i), "env-1", templates.SessionStarting, baseTime))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, templates.ErrSessionActive):
				refused++
			default:
				t.Errorf("InsertSession: %v", err)
			}
		}()
	}
	wg.Wait()
	active, err := s.ListSessions(ctx, templatehook.Filter{Environment: "env-1"})
	if err != nil {
		t.Fatal(err)
	}
	if wins != 1 || refused != 9 || len(active) != 1 {
		t.Errorf("%d started, %d refused, %d stored; want 1, 9 and 1", wins, refused, len(active))
	}
}

func testSessionEvents(t *testing.T, s records) {
	ctx := context.Background()
	var want []*templates.SessionEvent
	for i := range 5 {
		e := &templates.SessionEvent{Session: "ses-1", At: baseTime.Add(time.Duration(i) * time.Second), State: templates.SessionStarting, Step: i, Message: fmt.Sprintf("step %d", i)}
		if err := s.AppendSessionEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		if e.Seq != int64(i+1) {
			t.Errorf("event %d got seq %d", i, e.Seq)
		}
		want = append(want, e)
	}
	if err := s.AppendSessionEvent(ctx, &templates.SessionEvent{Session: "ses-2", Message: "other"}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []int64{0, 2, 5} {
		got, err := s.ListSessionEvents(ctx, "ses-1", after)
		if err != nil {
			t.Fatal(err)
		}
		diff(t, fmt.Sprintf("events after %d", after), append([]*templates.SessionEvent{}, want[after:]...), got)
	}
}

// testTerminalTokenRefusalUsesNothing: a redemption refused (another
// hash, as a token presented by another principal or on another path
// hashes to; a time past its expiry) leaves the record to its owner.
func testTerminalTokenRefusalUsesNothing(t *testing.T, s records) {
	ctx := context.Background()
	tok := &templatehook.TerminalToken{Hash: fmt.Sprintf("%064x", 9), Session: "ses-1", ExpiresAt: baseTime.Add(time.Minute)}
	if err := s.InsertTerminalToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	got, err := s.RedeemTerminalToken(ctx, fmt.Sprintf("%064x", 10), baseTime)
	wantErr(t, "redeem of another hash", err, templatehook.ErrTokenInvalid)
	if got != nil {
		t.Errorf("redeem of another hash returned %+v", got)
	}
	_, err = s.RedeemTerminalToken(ctx, tok.Hash, baseTime.Add(2*time.Minute))
	wantErr(t, "redeem past its expiry", err, templatehook.ErrTokenInvalid)
	got, err = s.RedeemTerminalToken(ctx, tok.Hash, baseTime.Add(time.Second))
	if err != nil {
		t.Fatalf("its owner after the refusals: %v (a refusal used the token up)", err)
	}
	diff(t, "redeemed token", tok, got)
	_, err = s.RedeemTerminalToken(ctx, tok.Hash, baseTime.Add(time.Second))
	wantErr(t, "a second redeem by its owner", err, templatehook.ErrTokenInvalid)
}

func testTerminalTokens(t *testing.T, s records) {
	ctx := context.Background()
	tok := &templatehook.TerminalToken{Hash: fmt.Sprintf("%064x", 1), Session: "ses-1", ExpiresAt: baseTime.Add(time.Minute)}
	if err := s.InsertTerminalToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a taken hash", s.InsertTerminalToken(ctx, tok), errcode.ErrConflict)
	expired := *tok
	expired.Hash = fmt.Sprintf("%064x", 2)
	if err := s.InsertTerminalToken(ctx, &expired); err != nil {
		t.Fatal(err)
	}
	_, err := s.RedeemTerminalToken(ctx, expired.Hash, baseTime.Add(time.Minute))
	wantErr(t, "redeem at its expiry", err, templatehook.ErrTokenInvalid)
	_, err = s.RedeemTerminalToken(ctx, fmt.Sprintf("%064x", 3), baseTime)
	wantErr(t, "redeem of an unknown hash", err, templatehook.ErrTokenInvalid)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []*templatehook.TerminalToken
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.RedeemTerminalToken(ctx, tok.Hash, baseTime.Add(59*time.Second))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, got)
			case !errors.Is(err, templatehook.ErrTokenInvalid):
				t.Errorf("RedeemTerminalToken: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d concurrent redemptions won, want 1", len(won))
	}
	diff(t, "redeemed token", tok, won[0])

	// Pruning removes what expires before the time given, used or not.
	fresh := *tok
	fresh.Hash, fresh.ExpiresAt = fmt.Sprintf("%064x", 4), baseTime.Add(2*time.Minute)
	if err := s.InsertTerminalToken(ctx, &fresh); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneTerminalTokens(ctx, baseTime.Add(time.Minute)); err != nil || n != 0 {
		t.Errorf("prune before the first expiry: %d, %v; want 0", n, err)
	}
	if n, err := s.PruneTerminalTokens(ctx, baseTime.Add(time.Minute+time.Second)); err != nil || n != 2 {
		t.Errorf("prune after two expiries: %d, %v; want 2 (one used, one not)", n, err)
	}
	if got, err := s.RedeemTerminalToken(ctx, fresh.Hash, baseTime.Add(90*time.Second)); err != nil || got.Hash != fresh.Hash {
		t.Errorf("a token that expires later, after the prune: %+v, %v", got, err)
	}
	if err := s.InsertTerminalToken(ctx, tok); err != nil {
		t.Errorf("the pruned hash again: %v (its record should be gone)", err)
	}
}

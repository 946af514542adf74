package controller_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// connectStatus tries an upgrade of session on s with a token minted for
// it (as a task that stole one would) and returns the HTTP status.
func connectStatus(t *testing.T, s *server, session string) int {
	t.Helper()
	now := time.Now()
	tok, err := prpwire.Mint(testSigner(t), prpwire.Claims{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, Session: session, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, s.URL()+prpwire.ConnectPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Authorization": "Bearer " + tok, "Connection": "Upgrade", "Upgrade": "websocket",
		"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")), "Sec-WebSocket-Protocol": prpwire.Subprotocol} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Issue 22 item 2: a second connection of a live session is refused (409)
// on the replica that holds it and on another replica of the same store;
// it never replaces the first. After the runner's connection is dropped,
// its own runner reconnects.
func TestASecondConnectionOfALiveSessionIsRefusedOnEveryReplica(t *testing.T) {
	t.Parallel()
	store, tickets := controller.NewMemoryStore(), prpwire.NewMemoryTicketStore()
	a := newServer(t, serverOptions{Options: controller.Options{Store: store, Tickets: tickets}})
	b := newServer(t, serverOptions{Options: controller.Options{Store: store, Tickets: tickets}})
	session := startRunner(t, a, prp.ScopeTask)
	for _, s := range []*server{a, b} {
		if code := connectStatus(t, s, session); code != http.StatusConflict {
			t.Errorf("a second connection: HTTP %d, want 409", code)
		}
	}
	if !a.c.Connected(session) {
		t.Fatal("the first connection was replaced")
	}
	if ok, err := a.c.Disconnect(context.Background(), operator, session); err != nil || !ok {
		t.Fatalf("Disconnect = %t, %v", ok, err)
	}
	for deadline := time.Now().Add(time.Minute); !a.c.Connected(session); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runner did not reconnect within a minute")
		}
	}
}

// A closed controller's connections leave no claim behind: once Close
// returns, the store says the session is not connected, so its runner's
// reconnection to another replica (or the next process on the same store)
// is not refused for DeadAfter (seen: a held lease's next envctl process
// waited 30 s for its runner).
func TestCloseEndsTheConnectionsClaims(t *testing.T) {
	t.Parallel()
	store, tickets := controller.NewMemoryStore(), prpwire.NewMemoryTicketStore()
	a := newServer(t, serverOptions{Options: controller.Options{Store: store, Tickets: tickets}})
	session := startRunner(t, a, prp.ScopeTask)
	ctx := context.Background()
	if s, err := store.GetSession(ctx, session); err != nil || !s.ConnectedUntil.After(time.Now()) {
		t.Fatalf("before Close: session %+v, %v; want a live claim", s, err)
	}
	if err := a.c.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := store.GetSession(ctx, session); err != nil || s.ConnectedUntil.After(time.Now()) {
		t.Errorf("after Close: the session's claim lasts until %v (%v); want none", s.ConnectedUntil, err)
	}
}

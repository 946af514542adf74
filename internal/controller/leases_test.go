package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
	"github.com/berthdev/berth/store"
)

// wantHidden fails unless err is the refusal of a record the caller may
// not read: errcode.ErrNotFound, never ErrDenied, naming the id the
// caller gave and no company (issue 22 items 7, 8).
func wantHidden(t *testing.T, what string, err error, id string) {
	t.Helper()
	if !errors.Is(err, errcode.ErrNotFound) || errors.Is(err, errcode.ErrDenied) {
		t.Errorf("%s = %v, want errcode.ErrNotFound (not ErrDenied)", what, err)
		return
	}
	if msg := err.Error(); !strings.Contains(msg, id) || strings.Contains(msg, "co-1") || strings.Contains(msg, "co-2") {
		t.Errorf("%s = %q, want it to name %s and no company", what, msg, id)
	}
}

// Issue 22 items 1, 7, 8: everywhere a principal names a session or a
// lease, a record it may not read (another company's) reads exactly as a
// missing one: errcode.ErrNotFound, the same text but for the id; a record it may
// read but not act on (a board member of the company) is denied, naming
// only the id.
func TestARecordThePrincipalMayNotReadReadsAsAMissingOne(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{Options: controller.Options{Authorizer: authz.DefaultPolicy{}}})
	session := startRunner(t, s, prp.ScopeTask)
	board := authz.Principal{ID: "bea", Role: authz.RoleBoardMember, Companies: []string{"co-1"}}
	ctx := context.Background()
	const missingSession, missingLease = "s_missing", "lease-missing"
	sessionOps := map[string]func(p authz.Principal, id string) error{
		"StartTask": func(p authz.Principal, id string) error {
			_, err := s.c.StartTask(ctx, p, id, "c9", prp.TaskStart{TaskID: "t9", Argv: []string{"true"}})
			return err
		},
		"StopTask": func(p authz.Principal, id string) error {
			_, err := s.c.StopTask(ctx, p, id, "c8", "t9", time.Second)
			return err
		},
		"Wait": func(p authz.Principal, id string) error {
			_, err := s.c.Wait(ctx, p, id, "c9")
			return err
		},
		"StopAndVerify": func(p authz.Principal, id string) error {
			_, err := s.c.StopAndVerify(ctx, p, id, time.Second)
			return err
		},
		"Follow": func(p authz.Principal, id string) error {
			return s.c.Follow(ctx, p, id, 0, func(controller.StoredEvent) error { return errors.New("an event was shown") })
		},
		"Output": func(p authz.Principal, id string) error {
			_, err := s.c.Output(ctx, p, id, "t9", prp.Stdout)
			return err
		},
		"Tasks": func(p authz.Principal, id string) error {
			_, err := s.c.Tasks(ctx, p, id)
			return err
		},
		"EventsLost": func(p authz.Principal, id string) error {
			_, err := s.c.EventsLost(ctx, p, id)
			return err
		},
		"Disconnect": func(p authz.Principal, id string) error {
			_, err := s.c.Disconnect(ctx, p, id)
			return err
		},
	}
	check := func(t *testing.T, op func(authz.Principal, string) error, real, missing string) {
		errMissing, errForeign := op(operator, missing), op(stranger, real)
		wantHidden(t, "missing", errMissing, missing)
		wantHidden(t, "another company's", errForeign, real)
		if errMissing != nil && errForeign != nil {
			if a, b := strings.ReplaceAll(errForeign.Error(), real, "ID"), strings.ReplaceAll(errMissing.Error(), missing, "ID"); a != b {
				t.Errorf("another company's record reads %q, a missing one %q: want one text", a, b)
			}
		}
		errBoard := op(board, real)
		if !errors.Is(errBoard, errcode.ErrDenied) || errors.Is(errBoard, errcode.ErrNotFound) || !strings.Contains(errBoard.Error(), real) {
			t.Errorf("a board member of the company = %v, want ErrDenied naming %s (the record is visible to it)", errBoard, real)
		}
	}
	for name, op := range sessionOps {
		t.Run(name, func(t *testing.T) { check(t, op, session, missingSession) })
	}
	t.Run("MintTicket", func(t *testing.T) {
		check(t, func(p authz.Principal, id string) error {
			// The request names the caller's own company: the lease's
			// recorded company decides.
			_, _, err := s.c.MintTicket(ctx, p, controller.TicketRequest{Lease: id, Run: "run-1", Company: p.Companies[0], Scope: prp.ScopeTask})
			return err
		}, "lease-1", missingLease)
	})
}

// Issue 22 item 1: a ticket's company is the lease's recorded company, and
// tickets are minted for active leases only.
func TestATicketCarriesTheLeasesRecordedCompany(t *testing.T) {
	t.Parallel()
	ls := testLeases(t)
	admin := authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}
	s := newServer(t, serverOptions{Leases: ls, Options: controller.Options{Authorizer: authz.DefaultPolicy{}}})
	ctx := context.Background()
	_, rec, err := s.c.MintTicket(ctx, operator, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Scope: prp.ScopeTask})
	if err != nil || rec.Company != "co-1" {
		t.Fatalf("MintTicket without a company = %+v, %v; want a ticket of co-1, the lease's", rec, err)
	}
	// A principal of both companies names the other one.
	both := authz.Principal{ID: "bot-2", Role: authz.RoleAgent, Companies: []string{"co-1", "co-2"}}
	if _, _, err := s.c.MintTicket(ctx, both, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Company: "co-2", Scope: prp.ScopeTask}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("MintTicket naming another company than the lease's = %v, want errcode.ErrInvalid", err)
	}
	l, err := ls.GetLease(ctx, "lease-1")
	if err != nil {
		t.Fatal(err)
	}
	l.Status = lease.StatusReleased
	if err := ls.UpdateLease(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.MintTicket(ctx, admin, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Scope: prp.ScopeTask}); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("MintTicket for a released lease = %v, want errcode.ErrConflict", err)
	}
}

// endLease marks lease-1 of ls released, as another replica's lease
// manager would (no LeaseEnded reaches this controller).
func endLease(t *testing.T, ls interface {
	GetLease(context.Context, string) (*lease.Lease, error)
	UpdateLease(context.Context, *lease.Lease) error
}) {
	t.Helper()
	ctx := context.Background()
	l, err := ls.GetLease(ctx, "lease-1")
	if err != nil {
		t.Fatal(err)
	}
	l.Status, l.ReleasedAt, l.Cleanup = lease.StatusReleased, time.Now(), "confirmed"
	if err := ls.UpdateLease(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// connectWith dials s's connect endpoint with token. On a refusal it
// returns nil and the HTTP status and the body's code; else the
// connection after the hello and the welcome.
func connectWith(t *testing.T, s *server, token string) (*websocket.Conn, int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL(), "http")+prpwire.ConnectPath, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{prpwire.Subprotocol}})
	if err != nil {
		if resp == nil {
			t.Fatal(err)
		}
		var body prpwire.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return nil, resp.StatusCode, string(body.Code)
	}
	t.Cleanup(func() { ws.CloseNow() })
	if err := ws.Write(ctx, websocket.MessageText, helloWithTasks(t)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.Read(ctx); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	return ws, http.StatusSwitchingProtocols, ""
}

// renewals reads ws's frames until it closes or ctx ends and sends each
// token renewal on the channel, which it closes with the close status.
func renewals(ctx context.Context, ws *websocket.Conn) (<-chan prpwire.TokenRenewal, <-chan websocket.StatusCode) {
	tokens, closed := make(chan prpwire.TokenRenewal, 64), make(chan websocket.StatusCode, 1)
	go func() {
		defer close(tokens)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				closed <- websocket.CloseStatus(err)
				return
			}
			env, err := prpwire.DecodeFrame(b, 0)
			var r prpwire.TokenRenewal
			if err == nil && env.Type == prpwire.TypeToken && prpwire.DecodeBody(env, &r) == nil {
				tokens <- r
			}
		}
	}()
	return tokens, closed
}

// Issue 22 item 6: once the lease ended (recorded by another manager: no
// LeaseEnded here), the session's token is refused at connect, and a live
// connection gets no more renewals: it is closed as unauthorized.
func TestASessionEndsWithItsLease(t *testing.T) {
	t.Parallel()
	ls := testLeases(t)
	// Renewals at half life (3 s); each token lasts 6 s, long enough to
	// be presented again after the lease ended.
	s := newServer(t, serverOptions{Leases: ls, Options: controller.WithTokenTTL(controller.Options{}, 6*time.Second)})
	code, token := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
	if code != http.StatusOK {
		t.Fatalf("exchange: %d", code)
	}
	ws, status, _ := connectWith(t, s, token)
	if ws == nil {
		t.Fatalf("connect while the lease is active: %d", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokens, closed := renewals(ctx, ws)
	var last prpwire.TokenRenewal
	select {
	case last = <-tokens:
	case st := <-closed:
		t.Fatalf("closed (%d) before the first renewal, while the lease is active", st)
	}
	endLease(t, ls)
	if ws, status, code := connectWith(t, s, token); ws != nil || status != http.StatusUnauthorized || code != "lease_ended" {
		t.Errorf("connect after the lease ended: %d %q (connected %t), want 401 lease_ended", status, code, ws != nil)
	}
	// A renewal the writer decided before the lease ended may still
	// arrive; none after it.
	after := 0
	for r := range tokens {
		after++
		last = r
	}
	if after > 1 {
		t.Errorf("%d renewals after the lease ended, want at most the one in flight", after)
	}
	if st := <-closed; st != prpwire.CloseUnauthorized {
		t.Errorf("the connection closed with %d, want %d (unauthorized: the lease ended)", st, prpwire.CloseUnauthorized)
	}
	if ws, status, code := connectWith(t, s, last.Token); ws != nil || status != http.StatusUnauthorized || code != "lease_ended" {
		t.Errorf("connect with the last renewed token after the lease ended: %d %q (connected %t), want 401 lease_ended", status, code, ws != nil)
	}
}

// Issue 22 item 6: a renewed token never outlives the lease's expiry, and
// the connection ends when the lease does.
func TestARenewedTokenNeverOutlivesTheLease(t *testing.T) {
	t.Parallel()
	end := time.Now().Add(2500 * time.Millisecond)
	tokens, closed := connectUntil(t, end, 2*time.Second)
	n := 0
	for r := range tokens {
		n++
		if r.ExpiresAt.After(end) {
			t.Errorf("renewal %d expires %v, after the lease's end %v", n, r.ExpiresAt, end)
		}
	}
	if st := <-closed; st != prpwire.CloseUnauthorized {
		t.Errorf("the connection closed with %d, want %d once the lease's end passed", st, prpwire.CloseUnauthorized)
	}
}

// Issue 22 item 6: with a token that would last far longer (the default
// TTL, renewed at half life), a live connection still ends when its
// lease's expiry passes.
func TestALiveConnectionEndsAtItsLeasesEnd(t *testing.T) {
	t.Parallel()
	tokens, closed := connectUntil(t, time.Now().Add(time.Second), 0)
	for r := range tokens {
		t.Errorf("a renewal (expires %v) for a lease that ends before the token's half life", r.ExpiresAt)
	}
	if st := <-closed; st != prpwire.CloseUnauthorized {
		t.Errorf("the connection closed with %d, want %d once the lease's end passed", st, prpwire.CloseUnauthorized)
	}
}

// connectUntil connects a raw runner for lease-1, recorded active until
// end, to a controller with token TTL ttl (0: the default) and returns
// its renewals and close status (renewals).
func connectUntil(t *testing.T, end time.Time, ttl time.Duration) (<-chan prpwire.TokenRenewal, <-chan websocket.StatusCode) {
	t.Helper()
	ls := lease.NewMemoryStore()
	if _, err := ls.InsertLease(context.Background(), &lease.Lease{ID: "lease-1", Company: "co-1", Status: lease.StatusActive, Policy: lease.Ephemeral, AcquiredAt: time.Now(), ExpiresAt: end}, lease.Quotas{}); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, serverOptions{Leases: ls, Options: controller.WithTokenTTL(controller.Options{}, ttl)})
	ws := dialRaw(t, s, []string{prpwire.Subprotocol})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := ws.Write(ctx, websocket.MessageText, helloWithTasks(t)); err != nil {
		t.Fatal(err)
	}
	return renewals(ctx, ws)
}

// Issue 22 item 6 across replicas: two controllers on one PostgreSQL;
// the lease ends in the store, and the replica the runner did not use
// refuses the session's token as well.
func TestAnEndedLeaseIsRefusedOnEveryReplica(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	signer := testSigner(t)
	var dbs []store.Stores
	replica := func() *server {
		db := openStores(t, url)
		dbs = append(dbs, db)
		return newServer(t, serverOptions{Signer: signer, Leases: db.Leases, Options: controller.Options{Tickets: db.Runners.(controller.RunnerStore), Store: db.Runners.(controller.RunnerStore), DataDir: t.TempDir()}})
	}
	a, b := replica(), replica()
	leasetest.RecordActive(t, dbs[0].Leases, "lease-1", "co-1")
	_, token := exchangeToken(t, a, a.ticket(t, prp.ScopeTask))
	for _, s := range []*server{a, b} {
		ws, status, _ := connectWith(t, s, token)
		if ws == nil {
			t.Fatalf("connect while the lease is active: %d", status)
		}
		ws.CloseNow()
		// The session has one live connection on any replica: the next
		// connects once this one's claim is gone from the store.
		for claimed(t, dbs[0].Runners.(controller.RunnerStore), "lease-1") {
			time.Sleep(5 * time.Millisecond)
		}
	}
	endLease(t, dbs[0].Leases)
	for i, s := range []*server{a, b} {
		if ws, status, code := connectWith(t, s, token); ws != nil || status != http.StatusUnauthorized || code != "lease_ended" {
			t.Errorf("replica %d: connect after the lease ended: %d %q (connected %t), want 401 lease_ended", i, status, code, ws != nil)
		}
	}
}

// claimed reports whether a session of lease has a live connection's claim
// in st (Session.ConnectedUntil in the future).
func claimed(t *testing.T, st controller.Store, lease string) bool {
	t.Helper()
	ss, err := st.LeaseSessions(context.Background(), lease)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.ConnectedUntil.After(time.Now()) {
			return true
		}
	}
	return false
}

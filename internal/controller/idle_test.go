package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// storeCalls counts the store calls of the controller's upkeep of
// connected sessions: journal reads (CommandsAfter per session,
// SessionsWithCommandsAfter for many), claims of the live connection,
// session reads.
type storeCalls struct {
	controller.Store
	journal, journalAll, claims, renewals, renewed, sessions atomic.Int64
}

func (s *storeCalls) RenewConnections(ctx context.Context, claims []controller.ConnectionClaim, until, now time.Time) ([]controller.ConnectionClaim, error) {
	s.renewals.Add(1)
	s.renewed.Add(int64(len(claims)))
	return s.Store.RenewConnections(ctx, claims, until, now)
}

func (s *storeCalls) CommandsAfter(ctx context.Context, session string, after uint64, limit int) ([]controller.CommandRecord, error) {
	s.journal.Add(1)
	return s.Store.CommandsAfter(ctx, session, after, limit)
}

func (s *storeCalls) SessionsWithCommandsAfter(ctx context.Context, cursors []controller.CommandCursor) ([]string, error) {
	s.journalAll.Add(1)
	return s.Store.SessionsWithCommandsAfter(ctx, cursors)
}

func (s *storeCalls) ClaimConnection(ctx context.Context, session, conn string, until, now time.Time) (bool, error) {
	s.claims.Add(1)
	return s.Store.ClaimConnection(ctx, session, conn, until, now)
}

func (s *storeCalls) GetSession(ctx context.Context, id string) (controller.Session, error) {
	s.sessions.Add(1)
	return s.Store.GetSession(ctx, id)
}

// counts returns the counters' values.
func (s *storeCalls) counts() [6]int64 {
	return [6]int64{s.journal.Load(), s.journalAll.Load(), s.claims.Load(), s.sessions.Load(), s.renewals.Load(), s.renewed.Load()}
}

// Issue 55 (runners-10k-idle): an idle connection costs the store
// (almost) nothing. Its writer reads no journal of its own every Poll:
// one journal poller per controller asks the store once per Poll which
// of its sessions have commands their writer has not sent, and wakes only
// those; and the heartbeats' claims of the live connections are renewed
// in batches, not a write each. A command journaled by another replica
// sharing the store still reaches the runner within about a Poll.
func TestIdleConnectionsReadNoJournalOfTheirOwn(t *testing.T) {
	t.Parallel()
	const n = 40
	st := &storeCalls{Store: controller.NewMemoryStore()}
	signer := testSigner(t)
	// newServer's Heartbeat is 1 s, its Poll 50 ms.
	a := newServer(t, serverOptions{Options: controller.Options{Store: st}, Signer: signer})
	b := newServer(t, serverOptions{Options: controller.Options{Store: st}, Signer: signer})
	runners := make([]*hostileRunner, n)
	for i := range runners {
		code, tok := exchangeToken(t, a, a.ticket(t, prp.ScopeTask))
		if code != 200 {
			t.Fatalf("exchange: HTTP %d", code)
		}
		runners[i] = connectRaw(t, a, tok, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{})
	}
	for len(a.c.ConnectedSessions()) < n {
		time.Sleep(10 * time.Millisecond)
	}
	// The window: 40 Polls and two heartbeats with every session idle.
	time.Sleep(200 * time.Millisecond)
	before := st.counts()
	const window = 2 * time.Second
	time.Sleep(window)
	after := st.counts()
	journal, journalAll, claims, sessions, renewals, renewed := after[0]-before[0], after[1]-before[1], after[2]-before[2], after[3]-before[3], after[4]-before[4], after[5]-before[5]
	t.Logf("%d idle sessions over %s (Poll 50 ms, Heartbeat 1 s): %d journal reads of one session, %d of all, %d claims, %d renewals of %d claims, %d session reads",
		n, window, journal, journalAll, claims, renewals, renewed, sessions)
	// One controller polls (b has no session: it reads nothing), 40
	// Polls at most, with some slack for a loaded machine's late timers.
	if journal != 0 || journalAll > 45 || journalAll < 10 {
		t.Errorf("%d idle sessions over %s: %d journal reads of one session and %d of all sessions, want none and one per Poll (40)", n, window, journal, journalAll)
	}
	if sessions != 0 {
		t.Errorf("%d idle sessions over %s: %d session reads, want none", n, window, sessions)
	}
	// Every connection's claim renewed at each heartbeat (one or two in
	// the window, three on late timers), in batches of up to a quarter
	// heartbeat (250 ms): a few writes, not one per claim.
	if claims != 0 || renewed < n || renewed > 3*n || renewals > 10 {
		t.Errorf("%d idle sessions over %s: %d claims, %d renewals of %d claims; want no claim and at most 10 renewals of %d to %d claims", n, window, claims, renewals, renewed, n, 3*n)
	}
	if got := len(a.c.ConnectedSessions()); got != n {
		t.Errorf("%d of %d sessions connected after the window, want all", got, n)
	}

	// Commands journaled by the other replica reach their runners within
	// about a Poll, each woken writer reading its own journal only.
	ctx := context.Background()
	before = st.counts()
	start := time.Now()
	for _, i := range []int{0, n / 2, n - 1} {
		if _, err := b.c.StartTask(ctx, operator, runners[i].session, fmt.Sprintf("c%d", i), prp.TaskStart{TaskID: fmt.Sprintf("t%d", i), Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, n / 2, n - 1} {
		env, _ := runners[i].until(prpwire.TypeCommand, nil)
		var cmd prp.Command
		if err := prpwire.DecodeBody(env, &cmd); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("c%d", i); cmd.ID != want || env.Seq != 1 {
			t.Errorf("runner %d got command %s seq %d, want %s seq 1", i, cmd.ID, env.Seq, want)
		}
	}
	took := time.Since(start)
	after = st.counts()
	t.Logf("3 commands journaled on the other replica reached their runners in %s; %d journal reads of one session", took, after[0]-before[0])
	if took > 5*time.Second {
		t.Errorf("commands journaled on another replica took %s to reach their runners, want about a Poll (50 ms)", took)
	}
	// The three woken writers read their journals (each once or twice:
	// a wakeup may come while a read is under way), no other.
	if r := after[0] - before[0]; r < 3 || r > 12 {
		t.Errorf("3 commands for 3 of %d idle sessions: %d journal reads of one session, want 3 to 12", n, r)
	}
}

// The claims renewed in a batch keep ClaimConnection's meaning: a
// connection whose claim another connection took (here: another
// replica's, once the claim looked expired to it) is closed at its next
// heartbeat, and the others of its batch stay.
func TestABatchedRenewalThatLostItsClaimClosesTheConnection(t *testing.T) {
	t.Parallel()
	st := &storeCalls{Store: controller.NewMemoryStore()}
	s := newServer(t, serverOptions{Options: controller.Options{Store: st}})
	var runners []*hostileRunner
	for range 3 {
		code, tok := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
		if code != 200 {
			t.Fatalf("exchange: HTTP %d", code)
		}
		runners = append(runners, connectRaw(t, s, tok, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{}))
	}
	// The welcome goes before the controller lists a connection: wait
	// for all three, so that "no longer connected" below means dropped.
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if s.c.Connected(runners[0].session) && s.c.Connected(runners[1].session) && s.c.Connected(runners[2].session) {
			break
		}
		if time.Now().After(wait) {
			t.Fatal("the runners' sessions are not all connected 10 s after their welcomes")
		}
	}
	lost := runners[1]
	// Another connection claims lost's session as if its claim had
	// expired (a clock an hour ahead).
	later := time.Now().Add(time.Hour)
	if ok, err := st.ClaimConnection(context.Background(), lost.session, "c_other", later.Add(time.Hour), later); err != nil || !ok {
		t.Fatalf("ClaimConnection by another connection = %t, %v", ok, err)
	}
	renewals := st.renewals.Load()
	// Its next heartbeat (1 s) finds the claim another's: closed.
	deadline := time.Now().Add(30 * time.Second)
	for s.c.Connected(lost.session) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.c.Connected(lost.session) {
		t.Fatal("the connection whose claim another connection took is still served after 30 s")
	}
	select {
	case _, ok := <-lost.frames:
		for ok {
			_, ok = <-lost.frames
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the runner's connection was not closed")
	}
	if st.renewals.Load() == renewals {
		t.Error("no batched renewal ran before the connection was closed")
	}
	// The other two stay through more heartbeats.
	time.Sleep(2 * time.Second)
	for _, rr := range []*hostileRunner{runners[0], runners[2]} {
		if !s.c.Connected(rr.session) {
			t.Errorf("session %s, whose claim was its own, was dropped", rr.session)
		}
	}
}

// connGoroutines counts the goroutines that run a runner connection's
// work in the controller (its reader, writer, intake, heartbeat pings,
// the handler), and returns their stacks.
func connGoroutines() (int, string) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var b strings.Builder
	for _, g := range strings.Split(string(buf), "\n\n") {
		// What it runs, not what started it (the journal poller was
		// started by a connection).
		frames, _, _ := strings.Cut(g, "\ncreated by ")
		if strings.Contains(frames, "internal/controller.(*liveConn).") || strings.Contains(frames, "internal/controller.(*Controller).runConn") || strings.Contains(frames, "internal/controller.(*Controller).connect") {
			n++
			b.WriteString(g + "\n\n")
		}
	}
	return n, b.String()
}

// Issue 55 (runners-10k-idle): an idle connection holds one goroutine of
// the controller's, its reader's, between heartbeats (no writer, intake
// or heartbeat goroutine that only waits), its writer still sends the
// commands journaled for it, and none is left once it ended. Not
// parallel: the other tests' connections would be counted.
func TestAnIdleConnectionHoldsOnlyItsReader(t *testing.T) {
	const n = 20
	// newServer's Heartbeat is 1 s.
	s := newServer(t, serverOptions{})
	runners := make([]*hostileRunner, n)
	for i := range runners {
		code, tok := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
		if code != 200 {
			t.Fatalf("exchange: HTTP %d", code)
		}
		runners[i] = connectRaw(t, s, tok, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{})
	}
	for len(s.c.ConnectedSessions()) < n {
		time.Sleep(10 * time.Millisecond)
	}
	// Two heartbeats: a ping's goroutine lives from the ping to its
	// claim's renewal (up to a quarter heartbeat), so some samples see
	// the readers alone.
	least, most := -1, 0
	var stacks string
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		g, st := connGoroutines()
		if least < 0 || g < least {
			least, stacks = g, st
		}
		most = max(most, g)
	}
	t.Logf("%d idle connections over two heartbeats: %d to %d goroutines of theirs", n, least, most)
	if least != n {
		t.Errorf("%d idle connections hold at least %d goroutines between heartbeats, want %d (their readers):\n%s", n, least, n, stacks)
	}
	if got := len(s.c.ConnectedSessions()); got != n {
		t.Errorf("%d of %d idle sessions connected after two heartbeats, want all", got, n)
	}
	// A writer that holds no goroutine still wakes for a command.
	if _, err := s.c.StartTask(context.Background(), operator, runners[3].session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	env, _ := runners[3].until(prpwire.TypeCommand, nil)
	if env.Seq != 1 {
		t.Errorf("the idle runner's command came with seq %d, want 1", env.Seq)
	}
	// Ended: nothing of theirs is left.
	for _, r := range runners {
		r.ws.CloseNow()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, st := connGoroutines()
		if g == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of %d ended connections left after 30 s:\n%s", g, n, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connectSilent dials s with token, sends a hello and reads the welcome,
// then reads nothing more: the runner answers no ping.
func connectSilent(t *testing.T, s *server, token string) *hostileRunner {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL(), "http")+prpwire.ConnectPath, &websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{prpwire.Subprotocol}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	rr := &hostileRunner{t: t, ws: ws}
	rr.send(prpwire.TypeHello, 0, prpwire.Hello{MinVersion: 1, MaxVersion: prpwire.MaxVersion, RunnerVersion: "silent/1", BinarySHA256: strings.Repeat("ab", 32), Capabilities: []prpwire.Capability{prpwire.CapTasks}})
	env := rr.next(ctx)
	if env.Type != prpwire.TypeWelcome {
		t.Fatalf("first frame = %s, want a welcome", env.Type)
	}
	if err := prpwire.DecodeBody(env, &rr.welcome); err != nil {
		t.Fatal(err)
	}
	rr.session = rr.welcome.Session
	return rr
}

// The heartbeat, a timer that starts a goroutine a ping, still drops a
// runner that does not answer its ping within DeadAfter, not before, and
// only that one: the others, whose pings run at the same time, stay.
func TestARunnerThatAnswersNoPingIsDroppedAlone(t *testing.T) {
	t.Parallel()
	// newServer's Heartbeat is 1 s, DeadAfter three of them.
	s := newServer(t, serverOptions{})
	var others []*hostileRunner
	for range 3 {
		code, tok := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
		if code != 200 {
			t.Fatalf("exchange: HTTP %d", code)
		}
		others = append(others, connectRaw(t, s, tok, []prpwire.Capability{prpwire.CapTasks}, prpwire.Resume{}))
	}
	code, tok := exchangeToken(t, s, s.ticket(t, prp.ScopeTask))
	if code != 200 {
		t.Fatalf("exchange: HTTP %d", code)
	}
	start := time.Now()
	silent := connectSilent(t, s, tok)
	sess := silent.session
	// The welcome goes before the controller lists the connection (it
	// registers it once the handshake is done): wait for that.
	for wait := time.Now().Add(10 * time.Second); !s.c.Connected(sess); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatal("the silent runner's session is not connected 10 s after its welcome")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.c.Connected(sess) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	if s.c.Connected(sess) {
		t.Fatal("a runner that answers no ping is still connected after 30 s")
	}
	// Dropped at the first ping's DeadAfter, about 4 s, and the close
	// handshake's wait for the runner's answer (5 s: it reads nothing).
	t.Logf("the silent runner was dropped after %s", took.Round(time.Millisecond))
	if took < 3*time.Second {
		t.Errorf("the silent runner was dropped after %s, before DeadAfter (3 s)", took)
	}
	// The others answered their pings meanwhile, and still do.
	time.Sleep(2 * time.Second)
	for _, rr := range others {
		if !s.c.Connected(rr.session) {
			t.Errorf("session %s, whose runner answers its pings, was dropped", rr.session)
		}
	}
}

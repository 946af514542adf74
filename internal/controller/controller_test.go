package controller_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/testenv"
)

// PRP-5, PRP-6: a task's output is stored byte for byte (also bytes that
// are not UTF-8), with its exit code, through the real runner over a real
// WebSocket: in binary output frames when the controller grants
// prpwire.CapBinaryOutput, and in JSON envelopes (base64) when it does not. A
// proxy counts the bytes the runner sends, which tells the two apart.
func TestTaskOutputIsByteIdenticalWithItsExitCode(t *testing.T) {
	t.Parallel()
	for _, jsonOutput := range []bool{false, true} {
		name := map[bool]string{false: "binary output frames", true: "JSON output"}[jsonOutput]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testTaskOutput(t, jsonOutput)
		})
	}
}

func testTaskOutput(t *testing.T, jsonOutput bool) {
	s := newServer(t, serverOptions{Options: controller.WithJSONOutput(controller.Options{}, jsonOutput)})
	proxy := newByteCutProxy(t, s.srv.Listener.Addr().String(), 1, 0, 1, 2)
	s.url = "http://" + proxy.ln.Addr().String() + "/prp/"
	session := startRunner(t, s, prp.ScopeTask)
	if h, ok, err := s.c.Hello(context.Background(), operator, session); err != nil || !ok || !prpwire.Has(h.Capabilities, prpwire.CapBinaryOutput) {
		t.Fatalf("hello = %+v, want the runner to offer %s", h, prpwire.CapBinaryOutput)
	}
	proxy.arm()
	want := make([]byte, 300<<10)
	rand.Read(want)
	want = append(want, 0xff, 0xfe, 0x00, '\n')
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, want, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", `cat "$1"; printf 'to stderr' >&2; exit 7`, "sh", file}}); err != nil {
		t.Fatal(err)
	}
	res := wait(t, s, session, "c1")
	if res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 7 {
		t.Fatalf("result = %+v, want done with exit code 7", res)
	}
	got, err := s.c.Output(ctx, operator, session, "t1", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("stdout: %d bytes stored, want the %d bytes of the file, identical", len(got), len(want))
	}
	if got, err := s.c.Output(ctx, operator, session, "t1", prp.Stderr); err != nil || string(got) != "to stderr" {
		t.Errorf("stderr = %q, %v; want %q", got, err, "to stderr")
	}
	t.Logf("compared %d bytes of stdout", len(want))

	// Follow delivers every stored event once, in seq order, from a cursor.
	fctx, cancel := context.WithCancel(ctx)
	var seqs []uint64
	var followed []byte
	err = s.c.Follow(fctx, operator, session, 0, func(e controller.StoredEvent) error {
		seqs = append(seqs, e.Seq)
		if e.Event.Kind == prp.EventOutput && e.Event.Output.Stream == prp.Stdout {
			followed = append(followed, e.Event.Output.Data...)
		}
		if e.Event.Kind == prp.EventResult && e.Event.Result.CommandID == "c1" {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Follow = %v, want context.Canceled", err)
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("Follow delivered seq %d at %d, want %d", seq, i, i+1)
		}
	}
	if !bytes.Equal(followed, want) {
		t.Errorf("Follow: %d bytes of stdout, want %d identical", len(followed), len(want))
	}
	// AUTH-1: another company's principal reads nothing, and the session
	// reads to it as a missing one does (issue 22 item 8).
	_, err = s.c.Output(ctx, stranger, session, "t1", prp.Stdout)
	wantHidden(t, "Output for another company's principal", err, session)
	// Base64 makes 4 bytes of 3; binary frames add a small header per
	// chunk.
	sent := proxy.forwarded()
	if jsonOutput && sent < int64(len(want))*4/3 || !jsonOutput && sent > int64(len(want))*21/20 {
		t.Errorf("the runner sent %d bytes for %d bytes of output: not %s", sent, len(want), map[bool]string{false: "binary frames", true: "JSON"}[jsonOutput])
	}
	t.Logf("the runner sent %d bytes for %d bytes of output", sent, len(want))
}

// PRP-4: a duplicate command returns the stored result and runs nothing
// again; the same id with another body is an idempotency conflict.
func TestDuplicateReturnsStoredResultAndChangedBodyConflicts(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{})
	session := startRunner(t, s, prp.ScopeTask)
	ctx := context.Background()
	start := prp.TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", "echo ran; exit 3"}}
	first, err := s.c.StartTask(ctx, operator, session, "c1", start)
	if err != nil {
		t.Fatal(err)
	}
	res := wait(t, s, session, "c1")
	dup, err := s.c.StartTask(ctx, operator, session, "c1", start)
	if err != nil {
		t.Fatal(err)
	}
	if dup.Seq != first.Seq || dup.Result == nil || !dup.Result.Duplicate || dup.Result.Exit.Code != res.Exit.Code {
		t.Errorf("duplicate StartTask = seq %d result %+v; want seq %d and the stored result (exit %d) marked duplicate", dup.Seq, dup.Result, first.Seq, res.Exit.Code)
	}
	changed := start
	changed.Argv = []string{"sh", "-c", "echo other"}
	if _, err := s.c.StartTask(ctx, operator, session, "c1", changed); !errors.Is(err, controller.ErrIdempotencyConflict) {
		t.Errorf("StartTask with the same id and another body = %v, want ErrIdempotencyConflict", err)
	}
	// The next command gets the next seq and runs; the task of c1 ran once.
	if r, err := s.c.StartTask(ctx, operator, session, "c2", prp.TaskStart{TaskID: "t2", Argv: []string{"true"}}); err != nil || r.Seq != first.Seq+1 {
		t.Fatalf("StartTask(c2) = seq %d, %v; want seq %d", r.Seq, err, first.Seq+1)
	}
	wait(t, s, session, "c2")
	if out, err := s.c.Output(ctx, operator, session, "t1", prp.Stdout); err != nil || string(out) != "ran\n" {
		t.Errorf("output of t1 = %q, %v; want one %q", out, err, "ran\n")
	}
}

// PRP-7, AUTH-1: a command for another lease or run is denied and not
// journaled; a principal without a grant for the company cannot dispatch
// or mint.
func TestCommandsOutsideTheTokensScopeAreDenied(t *testing.T) {
	t.Parallel()
	store := controller.NewMemoryStore()
	s := newServer(t, serverOptions{Options: controller.Options{Store: store}})
	session := startRunner(t, s, prp.ScopeTask)
	ctx := context.Background()
	for _, c := range []prp.Command{
		{ID: "c1", Kind: prp.CommandTaskStart, Lease: "lease-2", Run: "run-1", TaskStart: &prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}},
		{ID: "c2", Kind: prp.CommandTaskStart, Lease: "lease-1", Run: "run-2", TaskStart: &prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}},
	} {
		if _, err := s.c.Dispatch(ctx, operator, session, c); !errors.Is(err, prp.ErrScopeDenied) {
			t.Errorf("Dispatch for lease %s run %s = %v, want ErrScopeDenied", c.Lease, c.Run, err)
		}
	}
	_, err := s.c.StartTask(ctx, stranger, session, "c3", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}})
	wantHidden(t, "StartTask by another company's principal", err, session)
	_, _, err = s.c.MintTicket(ctx, stranger, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask})
	wantHidden(t, "MintTicket by another company's principal", err, "lease-1")
	if cmds, _ := store.CommandsAfter(ctx, session, 0, 0); len(cmds) != 0 {
		t.Errorf("journal holds %d commands after denials, want 0", len(cmds))
	}
}

// PRP-8: a probe identity reports its platform and version and runs no
// task: the controller denies the dispatch, and the runner itself refuses
// a command that reaches it anyway.
func TestProbeIdentityRefusesTasks(t *testing.T) {
	t.Parallel()
	store := controller.NewMemoryStore()
	s := newServer(t, serverOptions{Options: controller.Options{Store: store}})
	session := startRunner(t, s, prp.ScopeProbe)
	ctx := context.Background()
	h, ok, err := s.c.Hello(ctx, operator, session)
	if err != nil || !ok || h.Platform.OS != "linux" || h.RunnerVersion == "" {
		t.Errorf("hello of the probe identity = %+v, %v, %v; want its platform and version", h, ok, err)
	}
	// Another company's principal learns nothing of the session, not even
	// that it exists (issue 24: Hello takes the principal).
	if h, ok, err := s.c.Hello(ctx, stranger, session); !errors.Is(err, errcode.ErrNotFound) || ok || h.RunnerVersion != "" {
		t.Errorf("Hello for a stranger = %+v, %v, %v; want errcode.ErrNotFound and nothing", h, ok, err)
	}
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); !errors.Is(err, prp.ErrScopeDenied) {
		t.Errorf("StartTask on a probe session = %v, want ErrScopeDenied", err)
	}
	// Past the controller's check (a journal written by a broken
	// controller): the runner refuses.
	cmd := prpwire.SealCommand(prp.Command{ID: "c2", Kind: prp.CommandTaskStart, Lease: "lease-1", Run: "run-1", TaskStart: &prp.TaskStart{TaskID: "t2", Argv: []string{"touch", filepath.Join(t.TempDir(), "ran")}}})
	if _, _, err := store.AppendCommand(ctx, session, cmd, time.Now()); err != nil {
		t.Fatal(err)
	}
	res := wait(t, s, session, "c2")
	if res.Status != prp.ResultRejected || res.Code != prpwire.CodeProbeIdentity {
		t.Errorf("result of a task on a probe identity = %+v, want rejected %s", res, prpwire.CodeProbeIdentity)
	}
}

// PRP-2: a replayed ticket fails across two controllers on one PostgreSQL
// store; expired and foreign tickets get their own codes, before any
// upgrade.
func TestTicketReplayFailsAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	signer := testSigner(t)
	replica := func() *server {
		db := openStores(t, url)
		return newServer(t, serverOptions{Signer: signer, Options: controller.Options{Tickets: db.Runners.(controller.RunnerStore), Store: db.Runners.(controller.RunnerStore)}})
	}
	a, b := replica(), replica()
	tk := a.ticket(t, prp.ScopeTask)
	if code, resp := exchange(t, a, tk, "lease-1"); code != http.StatusOK || !strings.HasPrefix(resp.Session, "s_") {
		t.Fatalf("exchange on replica a = %d %+v, want 200 with a session", code, resp)
	}
	if code, resp := exchange(t, b, tk, "lease-1"); code != http.StatusUnauthorized || resp.Code != "ticket_replayed" {
		t.Errorf("replay on replica b = %d %+v, want 401 ticket_replayed", code, resp)
	}
	// Concurrent exchanges of one ticket on both replicas: exactly one wins.
	tk = a.ticket(t, prp.ScopeTask)
	codes := make(chan int, 2)
	for _, s := range []*server{a, b} {
		go func() { code, _ := exchange(t, s, tk, "lease-1"); codes <- code }()
	}
	if c1, c2 := <-codes, <-codes; min(c1, c2) != http.StatusOK || max(c1, c2) != http.StatusUnauthorized {
		t.Errorf("concurrent exchanges on two replicas = %d and %d, want one 200 and one 401", c1, c2)
	}
	tk = a.ticket(t, prp.ScopeTask)
	if code, resp := exchange(t, b, tk, "lease-9"); code != http.StatusUnauthorized || resp.Code != "ticket_foreign" {
		t.Errorf("exchange for another lease = %d %+v, want 401 ticket_foreign", code, resp)
	}
	short, _, err := a.c.MintTicket(context.Background(), operator, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask, TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // let the millisecond ticket expire (not an assertion on timing)
	if code, resp := exchange(t, b, short.String(), "lease-1"); code != http.StatusUnauthorized || resp.Code != "ticket_expired" {
		t.Errorf("exchange of an expired ticket = %d %+v, want 401 ticket_expired", code, resp)
	}
	// A connect without a valid token is refused before the upgrade.
	req, _ := http.NewRequest(http.MethodGet, a.URL()+prpwire.ConnectPath, nil)
	req.Header.Set("Authorization", "Bearer prpk1.k1.e30.AAAA")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("connect with a bad token = %d, want 401", resp.StatusCode)
	}
}

// exchangeResult is the decoded body of an exchange: an ExchangeResponse's
// fields or an ErrorResponse's code.
type exchangeResult struct {
	Session string       `json:"session"`
	Token   string       `json:"token"`
	Code    prpwire.Code `json:"code"`
}

// exchange POSTs a ticket exchange to s and returns the status and body.
func exchange(t *testing.T, s *server, ticket, lease string) (int, exchangeResult) {
	return exchangeBody(t, s, ticket, lease)
}

func exchangeBody(t *testing.T, s *server, ticket, lease string) (int, exchangeResult) {
	b, _ := json.Marshal(prpwire.ExchangeRequest{Ticket: ticket, Lease: lease})
	var out exchangeResult
	resp, err := http.Post(s.URL()+prpwire.ExchangePath, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Error(err)
		return 0, out
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

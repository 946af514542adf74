package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/qualification"
)

// TestAdmissionSessionCeiling: with MaxSessions 2, the real runner of a
// third session is refused with the passing code at_capacity (HTTP 503),
// counted, keeps retrying with its backoff, and is connected once one of
// the first two runners stops.
func TestAdmissionSessionCeiling(t *testing.T) {
	s := newServer(t, serverOptions{Options: controller.Options{MaxSessions: 2}})
	if a := s.c.Admission(); a.MaxSessions != 2 || a.MaxInflightBytes != 1<<30 {
		t.Fatalf("Admission() = %+v, want ceilings 2 sessions and the default 1 GiB", a)
	}
	start := func() admRun { return startAdmRunner(t, s) }
	stop := func(r admRun) { r.stop(t) }
	waitUntil := func(what string, cond func() bool) { admWait(t, s, what, cond) }
	first, second := start(), start()
	defer stop(second)
	waitUntil("two runners connected", func() bool { return len(s.c.ConnectedSessions()) == 2 })
	before := s.c.ConnectedSessions()

	third := start()
	defer stop(third)
	waitUntil("the third runner refused twice", func() bool { return s.c.Admission().RefusedSessions >= 2 })
	if a := s.c.Admission(); a.Sessions != 2 || a.RefusedBytes != 0 {
		t.Errorf("at the ceiling: Admission() = %+v, want 2 sessions admitted, none refused for bytes", a)
	}
	if got := s.c.ConnectedSessions(); !slices.Equal(got, before) {
		t.Errorf("connected sessions = %v, want the first two %v only", got, before)
	}
	select {
	case err := <-third.done:
		t.Fatalf("the refused runner gave up: %v", err)
	default:
	}
	if l := third.logs.String(); !strings.Contains(l, "HTTP 503: "+prpwire.CodeAtCapacity) {
		t.Errorf("the refused runner's log does not name the refusal %s:\n%s", prpwire.CodeAtCapacity, l)
	}

	// A slot frees: the third runner is admitted on its next attempt.
	stop(first)
	waitUntil("the third runner connected", func() bool {
		ids := s.c.ConnectedSessions()
		return len(ids) == 2 && !slices.Equal(ids, before)
	})
	if a := s.c.Admission(); a.Sessions != 2 {
		t.Errorf("after the slot freed: Admission() = %+v, want 2 sessions", a)
	}
}

// TestAdmissionBytesCeiling: while the output bytes in flight are at
// MaxInflightBytes, a runner is refused (counted as RefusedBytes) and
// retries; once they are below it, the runner connects, and the output of
// a task it streams is counted in flight until acked: nothing is left in
// flight once every chunk is acked.
func TestAdmissionBytesCeiling(t *testing.T) {
	s := newServer(t, serverOptions{Options: controller.Options{MaxInflightBytes: 1000}})
	s.c.HoldInflight(1000)
	r := startAdmRunner(t, s)
	defer r.stop(t)
	admWait(t, s, "the runner refused for bytes", func() bool { return s.c.Admission().RefusedBytes >= 1 })
	if a := s.c.Admission(); len(s.c.ConnectedSessions()) != 0 || a.RefusedSessions != 0 || a.Sessions != 0 {
		t.Errorf("at the bytes ceiling: Admission() = %+v, connected %v; want no session, none refused for sessions", a, s.c.ConnectedSessions())
	}
	s.c.HoldInflight(-1000)
	admWait(t, s, "the runner connected", func() bool { return len(s.c.ConnectedSessions()) == 1 })
	session := s.c.ConnectedSessions()[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"head", "-c", "300000", "/dev/zero"}}); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c1"); res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result = %+v, want exit 0", res)
	}
	admWait(t, s, "nothing left in flight", func() bool { return s.c.Admission().InflightBytes == 0 })
}

type admRun struct {
	cancel context.CancelFunc
	done   chan error
	logs   *syncbuf.Buffer
}

// startAdmRunner runs the real runner in-process against s with a fresh
// task ticket, retrying every 20 ms; it does not wait for it to connect.
func startAdmRunner(t *testing.T, s *server) admRun {
	t.Helper()
	logs := &syncbuf.Buffer{}
	r, err := runner.New(s.URL(), t.TempDir(), &runner.Options{Lease: "lease-1", Ticket: s.ticket(t, prp.ScopeTask),
		BinarySHA256: strings.Repeat("ab", 32), Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Backoff: func(int) time.Duration { return 20 * time.Millisecond },
		Platform: func(context.Context) (qualification.Platform, error) {
			return qualification.Platform{OS: "linux", Arch: "amd64"}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return admRun{cancel, done, logs}
}

// stop stops the runner and waits for its Run.
func (r admRun) stop(t *testing.T) {
	r.cancel()
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("runner: %v\n%s", err, r.logs.String())
	}
}

// admWait waits until cond holds, failing the test after 30 s.
func admWait(t *testing.T, s *server, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s; admission %+v, connected %v", what, s.c.Admission(), s.c.ConnectedSessions())
		}
	}
}

// TestAdmissionNoCeiling: a negative MaxSessions admits every runner.
func TestAdmissionNoCeiling(t *testing.T) {
	s := newServer(t, serverOptions{Options: controller.Options{MaxSessions: -1, MaxInflightBytes: -1}})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { startRunner(t, s, prp.ScopeTask) })
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); len(s.c.ConnectedSessions()) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("connected %v, want 3", s.c.ConnectedSessions())
		}
	}
	if a := s.c.Admission(); a.RefusedSessions != 0 || a.Sessions != 3 {
		t.Errorf("Admission() = %+v, want 3 sessions, none refused", a)
	}
}

package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// rawRunner is a hand-written runner over a real WebSocket that answers
// task.start with a done result and task.stop with the proof it is given:
// it stands for a runner whose checks could not run (a /proc it cannot
// read), which the real runner cannot be made to meet on this machine.
func rawRunner(t *testing.T, s *server, proof prp.StopProof) {
	t.Helper()
	rawRunnerFunc(t, s, func() prp.StopProof { return proof })
}

// rawRunnerFunc is rawRunner answering each task.stop with proof().
func rawRunnerFunc(t *testing.T, s *server, proof func() prp.StopProof) {
	t.Helper()
	rawRunnerTicket(t, s, s.ticket(t, prp.ScopeTask), proof)
}

// rawRunnerTicket is rawRunnerFunc on the session of ticket.
func rawRunnerTicket(t *testing.T, s *server, ticket string, proof func() prp.StopProof) {
	t.Helper()
	ws := dialRawTicket(t, s, ticket, []string{prpwire.Subprotocol})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := ws.Write(ctx, websocket.MessageText, helloWithTasks(t)); err != nil {
		t.Fatal(err)
	}
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env, err := prpwire.DecodeFrame(b, 0)
	var w prpwire.Welcome
	if err == nil {
		err = prpwire.DecodeBody(env, &w)
	}
	if err != nil {
		t.Fatalf("welcome: %v", err)
	}
	go func() {
		var seq uint64
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			env, err := prpwire.DecodeFrame(b, 0)
			if err != nil || env.Type != prpwire.TypeCommand {
				continue
			}
			var c prp.Command
			if prpwire.DecodeBody(env, &c) != nil {
				continue
			}
			res := prp.Result{CommandID: c.ID, Status: prp.ResultDone}
			if c.Kind == prp.CommandTaskStop {
				p := proof()
				p.TaskID = c.TaskStop.TaskID
				res.Proof = &p
			}
			seq++
			ev, _ := prpwire.NewEnvelope(w.Version, prpwire.TypeEvent, "e"+c.ID, w.Session, prp.Event{Kind: prp.EventResult, Result: &res})
			ev.Seq = seq
			out, err := prpwire.EncodeFrame(ev, w.MaxFrame)
			if err != nil || ws.Write(ctx, websocket.MessageText, out) != nil {
				return
			}
		}
	}()
}

func helloWithTasks(t *testing.T) []byte {
	t.Helper()
	env, err := prpwire.NewEnvelope(1, prpwire.TypeHello, "m1", "", prpwire.Hello{MinVersion: 1, MaxVersion: 1, RunnerVersion: "raw/1",
		BinarySHA256: strings.Repeat("ab", 32), Capabilities: []prpwire.Capability{prpwire.CapTasks, prpwire.CapStopProof}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := prpwire.EncodeFrame(env, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PRP-6, CONVENTIONS 20: a proof whose checks could not all run is
// reported as incomplete (ErrProofIncomplete, with the proof), never as a
// verified stop.
func TestAnIncompleteProofIsReportedAsIncomplete(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{})
	rawRunner(t, s, prp.StopProof{Methods: []string{prp.MethodGroup}, Failed: []string{prp.MethodProcTag + ": /proc is not readable"}, Survivors: []int{}, VerifiedAt: time.Now().UTC()})
	session := waitSession(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, s, session, "c1")
	proofs, err := s.c.StopAndVerify(ctx, operator, session, time.Second)
	if !errors.Is(err, controller.ErrProofIncomplete) || !strings.Contains(err.Error(), "t1") {
		t.Errorf("StopAndVerify = %v, want ErrProofIncomplete naming task t1", err)
	}
	if len(proofs) != 1 || proofs[0].Complete || proofs[0].TaskID != "t1" {
		t.Errorf("proofs = %+v, want the incomplete proof of t1", proofs)
	}
}

// A proof that claims to be complete but names a survivor is not trusted.
func TestAProofClaimingCompletionWithASurvivorIsNotTrusted(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{})
	rawRunner(t, s, prp.StopProof{Methods: []string{prp.MethodGroup, prp.MethodProcTag}, Survivors: []int{4242}, Complete: true, VerifiedAt: time.Now().UTC()})
	session := waitSession(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "t1", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, s, session, "c1")
	if _, err := s.c.StopAndVerify(ctx, operator, session, time.Second); !errors.Is(err, controller.ErrProofIncomplete) {
		t.Errorf("StopAndVerify = %v, want ErrProofIncomplete", err)
	}
}

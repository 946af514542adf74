package berth_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
)

// Issue 31, runner pools on the real Docker engine with the real runner
// binary: each member starts with its runner launched and connected on a
// session of the instance, which runs no command; the acquisition that
// adopts a member attaches without launching anything (the session is
// handed over to its company and run, the token renewed before any
// command) and its first task runs there. After a restart (the first
// System closed: its ingress is gone and the runners are disconnected) a
// second System adopts the other member: its Attach hands the session
// over and launches a runner with a resume ticket, which leaves the
// member's live runner to reconnect (one runner per state directory);
// that runner runs the task. The second System's pool pass reconnects the
// runner of the third member ahead, so its adoption launches nothing. No
// live record of the environment is left.
func TestRunnerPoolOnDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, img, run := dockerRig(t)
	bin := testenv.RunnerBinary(t)
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	stores := store.Memory()
	tickets := &recordedTickets{RunnerStore: stores.Runners.(controller.RunnerStore)}
	stores.Runners = controller.SealStore(tickets).(store.RunnerStore)
	// Replicas (here: a process and the one after its restart) share the
	// runners' signing key.
	keys := [][]byte{bytes.Repeat([]byte("k"), 32)}
	newSys := func() *berth.System {
		sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, Stores: stores, RunnerBinary: bin,
			Leases: &lease.Options{ManualPoolRefill: true}, RunnerKeys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return sys
	}
	sys := newSys()
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "runner-pool-docker", Driver: "docker",
		Config: map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}},
		Pool:   &environment.Pool{Size: 3, Runner: true}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := sys.Leases().MaintainPools(ctx, ops); err != nil || rep.Created != 3 {
		t.Fatalf("MaintainPools: %+v, %v", rep, err)
	}
	members, err := stores.Leases.ListLeases(ctx, lease.Filter{Environment: env.ID, Statuses: []lease.Status{lease.StatusPooled}})
	if err != nil || len(members) != 3 {
		t.Fatalf("pooled members: %v, %v", members, err)
	}
	for _, m := range members {
		ss, err := tickets.LeaseSessions(ctx, m.ID)
		if err != nil || len(ss) != 1 || ss[0].Company != authz.InstanceCompany || !slices.Contains(berth.Runners(sys).ConnectedSessions(), ss[0].ID) {
			t.Fatalf("member %s: sessions %+v, %v; want one of the instance, connected", m.ID, ss, err)
		}
		if _, err := berth.Runners(sys).Reattach(ctx, ops, ss[0].ID); err == nil {
			att, _ := berth.Runners(sys).Reattach(ctx, ops, ss[0].ID)
			if _, err := att.Start(ctx, ops, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"true"}}}); !errors.Is(err, prp.ErrScopeDenied) {
				t.Errorf("a task on member %s before adoption: %v, want ErrScopeDenied", m.ID, err)
			}
		}
	}
	set, err := sys.RunnerSet()
	if err != nil {
		t.Fatal(err)
	}
	first := func(sys *berth.System, runID string, want []controller.AttachStage) {
		t.Helper()
		h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, Run: runID, Runner: set})
		if err != nil {
			t.Fatal(err)
		}
		if h.Lease().Labels["berth.pool"] != "member" {
			t.Fatalf("%s: not adopted from the pool", runID)
		}
		var stages []controller.AttachStage
		attachStart := time.Now()
		att, err := berth.Runners(sys).Attach(ctx, ops, h, controller.AttachRequest{Progress: func(s controller.AttachStage) { stages = append(stages, s) }})
		if err != nil {
			t.Fatalf("%s: attach: %v", runID, err)
		}
		t.Logf("%s: attach took %s", runID, time.Since(attachStart))
		if got, w := stageList(stages), stageList(want); got != w {
			t.Errorf("%s: attach stages %s, want %s", runID, got, w)
		}
		if att.Run() != runID || att.Company() != "acme" {
			t.Errorf("%s: attachment of run %s company %s", runID, att.Run(), att.Company())
		}
		var out bytes.Buffer
		task, err := att.Start(ctx, ops, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"sh", "-c", "echo pooled $(id -u)"}}, Stdout: &out})
		if err != nil {
			t.Fatalf("%s: start: %v", runID, err)
		}
		exit, err := task.Wait(ctx)
		if err != nil || exit.Code != 0 || !strings.HasPrefix(out.String(), "pooled ") {
			t.Fatalf("%s: task: %+v, %v, output %q", runID, exit, err, out.String())
		}
		// One runner serves the container: a relaunch on a state
		// directory another live runner holds runs nothing and exits. It
		// exits after its nudge, which the member's runner may answer (and
		// this task run) before the relaunched process is scheduled again
		// on a busy machine: so the count may be 2 for a moment, and must
		// come to 1.
		var count string
		for deadline := time.Now().Add(15 * time.Second); ; {
			res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c",
				`n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in /.berth/bin/berth-runner*) n=$((n+1));; esac; done; echo $n`}})
			if err != nil {
				t.Fatalf("%s: count the runner processes: %v", runID, err)
			}
			if count = strings.TrimSpace(string(res.Stdout)); count == "1" || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if count != "1" {
			t.Errorf("%s: runner processes in the container after 15 s: %s; want 1", runID, count)
		}
		ss, err := tickets.LeaseSessions(ctx, h.ID())
		if err != nil || len(ss) != 1 || ss[0].Company != "acme" || ss[0].Run != runID {
			t.Errorf("%s: sessions of the adopted lease %+v, %v; want the member's one, handed over", runID, ss, err)
		}
		if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			t.Fatalf("%s: release: %v", runID, err)
		}
	}
	first(sys, "r1", []controller.AttachStage{controller.AttachInstalling, controller.AttachConnected})
	sys.Close() // drains nothing; the other member's runner is disconnected
	sys2 := newSys()
	defer sys2.Close()
	// The restarted System serves no member's runner until one is adopted:
	// the Attach that hands the session over launches a runner with a
	// resume ticket of it, which finds the member's runner alive on the
	// state directory, nudges it to reconnect now and exits: the member's
	// own runner, with its pool token, is renewed and runs the task.
	first(sys2, "r2", []controller.AttachStage{controller.AttachInstalling, controller.AttachLaunching, controller.AttachConnecting, controller.AttachConnected})
	// The relaunched runner found the state directory busy and exchanged
	// nothing; its resume ticket (in the sandbox's reach) is used up all
	// the same, so no task can exchange it for the session's token.
	resumes := 0
	for _, r := range tickets.created() {
		if r.Resume == "" {
			continue
		}
		resumes++
		if _, err := tickets.ConsumeTicket(ctx, r.Hash, r.Lease, r.Resume, time.Now().UTC()); !errors.Is(err, prp.ErrTicketReplayed) {
			t.Errorf("the resume ticket of session %s after the attach: %v, want it used up (ErrTicketReplayed)", r.Resume, err)
		}
	}
	if resumes != 1 {
		t.Errorf("%d resume tickets minted, want 1 (the restarted System's relaunch)", resumes)
	}
	// The restarted System's pool pass reconnects the runner of the member
	// left (the same launch, which nudges it), so the next adoption
	// launches nothing again.
	if _, err := sys2.Leases().MaintainPools(ctx, ops); err != nil {
		t.Fatal(err)
	}
	first(sys2, "r3", []controller.AttachStage{controller.AttachInstalling, controller.AttachConnected})

	cur, err := sys2.Catalog().Get(ctx, ops, env.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys2.Catalog().Delete(ctx, ops, env.ID, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := sys2.Leases().Sweep(ctx, ops); err != nil {
		t.Fatal(err)
	}
	ls, err := stores.Leases.ListLeases(ctx, lease.Filter{Environment: env.ID, Statuses: []lease.Status{lease.StatusPooled, lease.StatusActive, lease.StatusStarting}})
	if err != nil || len(ls) != 0 {
		t.Fatalf("live records left: %v, %v", ls, err)
	}
}

func stageList(ss []controller.AttachStage) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return strings.Join(out, ",")
}

// recordedTickets is a runner store that records the tickets created.
type recordedTickets struct {
	controller.RunnerStore
	mu   sync.Mutex
	recs []prp.TicketRecord
}

func (r *recordedTickets) CreateTicket(ctx context.Context, t prp.TicketRecord) error {
	r.mu.Lock()
	r.recs = append(r.recs, t)
	r.mu.Unlock()
	return r.RunnerStore.CreateTicket(ctx, t)
}

func (r *recordedTickets) created() []prp.TicketRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

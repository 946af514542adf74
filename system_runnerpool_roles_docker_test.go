package berth_test

import (
	"bytes"
	"context"
	"io"
	"strings"
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

// Issue 49, item 5: on an environment with a runner pool, an agent's and a
// board member's runs adopt a member and run their task on its runner, as
// an operator's do: the agent's through Handle.Run, the board member's
// through the controller's Attach and Start. Their handles' Lease() is the redacted view (no
// labels), which once made Attach miss the adoption and fail with "a
// runner is already attached to the lease in this process". DefaultPolicy
// lets no board member lease; the host's policy here lets them lease for
// their company as agents do (they still may not read configs). Real
// Docker engine, real runner binary.
func TestRunnerPoolAgentAndBoardMemberOnDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, img, run := dockerRig(t)
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	stores := store.Memory()
	policy := authz.AuthorizerFunc(func(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
		if p.Role == authz.RoleBoardMember && a == authz.ActionLease {
			p.Role = authz.RoleAgent
		}
		return authz.DefaultPolicy{}.Authorize(ctx, p, a, r)
	})
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{docker.New(nil)}, Stores: stores, Authorizer: policy,
		RunnerBinary: testenv.RunnerBinary(t), Leases: &lease.Options{ManualPoolRefill: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "runner-pool-roles", Driver: "docker",
		Config: map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}},
		Pool:   &environment.Pool{Size: 2, Runner: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Assignments().Set(ctx, ops, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws", Company: "acme"},
		EnvironmentID: env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	if rep, err := sys.Leases().MaintainPools(ctx, ops); err != nil || rep.Created != 2 {
		t.Fatalf("MaintainPools: %+v, %v", rep, err)
	}
	for _, p := range []authz.Principal{
		{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}},
		{ID: "bea", Role: authz.RoleBoardMember, Companies: []string{"acme"}},
	} {
		t.Run(string(p.Role), func(t *testing.T) {
			h, err := sys.Leases().Acquire(ctx, p, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws"}, WithRunner: true})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
					t.Errorf("release: %v", err)
				}
			}()
			if !h.Lease().Redacted {
				t.Fatalf("%s sees the lease unredacted; the test needs the redacted view", p.Role)
			}
			rec, err := stores.Leases.GetLease(ctx, h.ID())
			if err != nil || rec.Labels["berth.pool"] != "member" {
				t.Fatalf("lease %s not adopted from the pool: %+v, %v", h.ID(), rec, err)
			}
			if p.Role == authz.RoleAgent {
				// Through Handle.Run: the handle carries the agent's authority.
				task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "echo pooled-run"}})
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				b, err := io.ReadAll(task.Stream(ctx))
				if err != nil || strings.TrimSpace(string(b)) != "pooled-run" {
					t.Fatalf("task output %q, %v", b, err)
				}
				if exit, err := task.Wait(ctx); err != nil || exit.Code != 0 {
					t.Fatalf("task: %+v, %v", exit, err)
				}
			} else {
				// Through the controller's Attach and Start.
				var stages []controller.AttachStage
				att, err := berth.Runners(sys).Attach(ctx, p, h, controller.AttachRequest{Progress: func(s controller.AttachStage) { stages = append(stages, s) }})
				if err != nil {
					t.Fatalf("attach: %v", err)
				}
				// The adopted member's runner is connected: nothing is launched.
				if got, want := stageList(stages), stageList([]controller.AttachStage{controller.AttachInstalling, controller.AttachConnected}); got != want {
					t.Errorf("attach stages %s, want %s", got, want)
				}
				var out bytes.Buffer
				task, err := att.Start(ctx, p, controller.TaskSpec{TaskStart: prp.TaskStart{Argv: []string{"sh", "-c", "echo pooled-run"}}, Stdout: &out})
				if err != nil {
					t.Fatalf("start: %v", err)
				}
				exit, err := task.Wait(ctx)
				if err != nil || exit.Code != 0 || strings.TrimSpace(out.String()) != "pooled-run" {
					t.Fatalf("task: %+v, %v, output %q", exit, err, out.String())
				}
			}
			ss, err := stores.Runners.(controller.RunnerStore).LeaseSessions(ctx, h.ID())
			if err != nil || len(ss) != 1 || ss[0].Company != "acme" {
				t.Errorf("sessions of the adopted lease %+v, %v; want the member's one, handed over to acme", ss, err)
			}
		})
	}
}

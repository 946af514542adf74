package berth_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"path"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

// An agent's turn with a workspace, on the fake driver (docs/leases.md,
// "Workspaces"): acquire through the agent's scope with a runner, prepare
// the project (here an archive; a host directory or a Git repository
// alike), run the agent's task in it and stream its output, collect what
// it changed, and release, which ends the workspace's record with a
// receipt. Hold the lease instead (AcquireRequest.Policy
// lease.ReuseByWorkspace) for the next turn to find the same files.
func ExampleSystem_Workspaces() {
	ctx := context.Background()
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fake.New(nil)}, TestMode: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sys.Close()
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "sandboxes", Driver: "fake"})
	if err != nil {
		fmt.Println(err)
		return
	}
	bind := environment.BindingRef{Kind: environment.BindingWorkspace, Company: "acme", Key: "fix-tests"}
	if _, err := sys.Assignments().Set(ctx, ops, environment.Binding{BindingRef: bind, EnvironmentID: env.ID}, 0); err != nil {
		fmt.Println(err)
		return
	}

	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	h, err := sys.Leases().Acquire(ctx, agent, lease.AcquireRequest{
		Scope: &authz.Scope{Company: "acme", Workspace: "fix-tests", Project: "app"}, WithRunner: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{}) // on every return
	var project bytes.Buffer
	tw := tar.NewWriter(&project)
	tw.WriteHeader(&tar.Header{Name: "main.c", Typeflag: tar.TypeReg, Mode: 0o644, Size: 13})
	tw.Write([]byte("int main(){}\n"))
	tw.Close()
	ws, err := sys.Workspaces().Prepare(ctx, agent, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceArchive, Location: "app.tar"}, Archive: &project})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ws.State, path.Dir(ws.Dir)) // <workdir>/.berth/ws/fix-tests-<owner hash>

	// The agent's task, in the workspace's directory.
	task, err := h.Run(ctx, lease.Command{Dir: ws.Dir,
		Argv: []string{"sh", "-c", "echo '/* fixed */' >> main.c && echo 'main.c fixed'"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	line, err := bufio.NewReader(task.Stream(ctx)).ReadString('\n') // the output, as it comes
	if err != nil {
		fmt.Println(err)
		return
	}
	exit, err := task.Wait(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%sexit %d\n", line, exit.Code)

	var changes bytes.Buffer // a tar stream of the changed files: unpack it with tarsafe.Extract
	r, err := sys.Workspaces().Collect(ctx, agent, h, workspace.CollectRequest{Workspace: ws.ID, Files: &changes})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("changed:", r.Changed, "base == head:", r.Base == r.Head)

	if _, err := h.Release(ctx, lease.ReleaseOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	recs, err := sys.Workspaces().Show(ctx, ops, h.ID())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(recs[0].State, recs[0].End.Reason, recs[0].End.Outcome)
	// Output:
	// ready /root/.berth/ws
	// main.c fixed
	// exit 0
	// changed: [main.c] base == head: false
	// ended released clean
}

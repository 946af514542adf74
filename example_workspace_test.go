package berth_test

import (
	"archive/tar"
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

// An agent's turn with a workspace, on the fake driver: lease, prepare
// the project (here an archive; a host directory or a Git repository
// alike), let the agent work, collect what it changed, release (which
// ends the workspace's record with a receipt).
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
	h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{EnvironmentID: env.ID, Company: "acme"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var project bytes.Buffer
	tw := tar.NewWriter(&project)
	tw.WriteHeader(&tar.Header{Name: "main.c", Typeflag: tar.TypeReg, Mode: 0o644, Size: 14})
	tw.Write([]byte("int main(){}\n\n"))
	tw.Close()

	ws, err := sys.Workspaces().Prepare(ctx, ops, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceArchive, Location: "app.tar"}, Archive: &project})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ws.State, path.Dir(ws.Dir)) // <workdir>/.berth/ws/fix-tests-<owner hash>

	// The agent's turn (the fake runs ln -s; a real target runs anything).
	if _, err := h.Exec(ctx, lease.Command{Argv: []string{"ln", "-s", "main.c", ".berth/ws/" + path.Base(ws.Dir) + "/entry.c"}}); err != nil {
		fmt.Println(err)
		return
	}
	var changes bytes.Buffer // a tar stream: unpack it with tarsafe.Extract
	r, err := sys.Workspaces().Collect(ctx, ops, h, workspace.CollectRequest{Workspace: ws.ID, Files: &changes})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("changed:", r.Changed, "base == head:", r.Base == r.Head)

	if _, err := h.Release(ctx, lease.ReleaseOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	recs, _ := sys.Workspaces().Show(ctx, ops, h.ID())
	fmt.Println(recs[0].State, recs[0].End.Reason, recs[0].End.Outcome)
	// Output:
	// ready /root/.berth/ws
	// changed: [entry.c] base == head: false
	// ended released clean
}

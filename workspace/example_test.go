package workspace_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

// A workspace is prepared in a lease's sandbox under its owner, found
// again only by that owner's key, and its files are reached inside its
// directory only: a board member of the company lists them, and reads
// nothing more.
func ExampleManager_Files() {
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
	tw.WriteHeader(&tar.Header{Name: "main.c", Typeflag: tar.TypeReg, Mode: 0o644, Size: 13})
	tw.Write([]byte("int main(){}\n"))
	tw.Close()
	ws, err := sys.Workspaces().Prepare(ctx, ops, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceArchive, Location: "app.tar"}, Archive: &project})
	if err != nil {
		fmt.Println(err)
		return
	}
	found, _ := sys.Workspaces().Find(ctx, ops, "acme", "app", "fix-tests")
	_, err = sys.Workspaces().Find(ctx, ops, "globex", "app", "fix-tests")
	fmt.Println(found.ID == ws.ID, found.State, "another company:", errors.Is(err, errcode.ErrNotFound))

	board := authz.Principal{ID: "b", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	files := sys.Workspaces().Files(board, h, ws.ID)
	list, _ := files.ReadDir(ctx, "")
	fmt.Println(list[0].Name, list[0].Size)
	err = files.GetArchive(ctx, "main.c", &bytes.Buffer{})
	fmt.Println("the board member reads:", errors.Is(err, errcode.ErrDenied))
	_, err = files.ReadDir(ctx, "../..")
	fmt.Println("outside the directory:", errors.Is(err, errcode.ErrInvalid))
	// Output:
	// true ready another company: true
	// main.c 13
	// the board member reads: true
	// outside the directory: true
}

package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/workspace"
)

// A workspace's record is written before its files go in (preparing),
// made ready at its checkpoint, and ended with a receipt; only its owner
// finds it by its key.
func Example() {
	ctx := context.Background()
	s := workspace.NewMemoryStore()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	w := &workspace.Workspace{
		ID: "ws-1", Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceGit, Location: "https://git.example.com/acme/app.git", Ref: "main"},
		Lease:  "lease-1", Dir: "/work/.berth/ws/fix-tests-0123456789abcdef",
		State: workspace.StatePreparing, CreatedAt: now, UpdatedAt: now, Revision: 1,
	}
	if err := s.InsertWorkspace(ctx, w); err != nil { // write-ahead
		fmt.Println(err)
	}
	// ... the files go into the sandbox ...
	w.State, w.Revision = workspace.StateReady, 2
	w.Checkpoint.Commit = "0123456789abcdef0123456789abcdef01234567"
	if err := s.UpdateWorkspace(ctx, w); err != nil {
		fmt.Println(err)
	}
	got, _ := s.FindWorkspace(ctx, "acme", "app", "fix-tests")
	fmt.Println(got.ID, got.State, got.Checkpoint.Commit[:7])
	_, err := s.FindWorkspace(ctx, "globex", "app", "fix-tests")
	fmt.Println("another company:", errors.Is(err, errcode.ErrNotFound))

	w.State, w.Revision = workspace.StateEnded, 3
	w.End = &workspace.End{Reason: workspace.EndReleased, Outcome: workspace.OutcomeClean, At: now.Add(time.Hour)}
	if err := s.UpdateWorkspace(ctx, w); err != nil {
		fmt.Println(err)
	}
	got, _ = s.GetWorkspace(ctx, "ws-1")
	fmt.Println(got.State, got.End.Reason, got.End.Outcome)
	// Output:
	// ws-1 ready 0123456
	// another company: true
	// ended released clean
}

package berth_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/sqlite"
	"github.com/berthdev/berth/workspace"
)

// The workspace's life in a Docker sandbox of the busybox test image on
// network none: busybox's find, stat and sha256sum compute the tree
// hash, equal to the host's.
func TestWorkspaceLifeDocker(t *testing.T) {
	_, img, run := dockerRig(t)
	testWorkspaceLife(t, docker.New(nil), map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}})
}

// A workspace's files through the Docker driver, on network none.
func TestWorkspaceFilesDocker(t *testing.T) {
	_, img, run := dockerRig(t)
	testWorkspaceFiles(t, docker.New(nil), map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}})
}

// A Git source in a Docker sandbox whose image has the host's git (built
// as the glibc test image is, with git and its libraries): the shallow
// repository goes in, the agent commits on network none, and Collect
// brings the commits back as a bundle.
func TestWorkspaceGitDocker(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git:", err)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	git, _ = filepath.EvalSymlinks(git)
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, &testimage.Options{Programs: []string{git}})
	run := randomHex(t)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	testWorkspaceGit(t, docker.New(nil), map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}, true)
}

// crashChildEnv names the SQLite database of TestWorkspaceCrashChild when
// the test binary runs as the child of TestWorkspaceKilledDuringPrepare.
const crashChildEnv = "BERTH_TEST_WS_CRASH_DB"

// TestWorkspaceCrashChild is the process TestWorkspaceKilledDuringPrepare
// kills: over a SQLite database it leases a Docker sandbox that expires
// soon and prepares a workspace from its standard input, which the parent
// never writes, so that it is killed mid-prepare.
func TestWorkspaceCrashChild(t *testing.T) {
	dbPath := os.Getenv(crashChildEnv)
	if dbPath == "" {
		t.Skip("the child of TestWorkspaceKilledDuringPrepare")
	}
	ctx := context.Background()
	db, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores(), MemorySecrets: true, Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "crash", Driver: "docker", Config: map[string]any{
		"image": os.Getenv(crashChildEnv + "_IMAGE"), "network": "none", "labels": map[string]any{"test.berth/run": os.Getenv(crashChildEnv + "_RUN")}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, wsOperator, lease.AcquireRequest{EnvironmentID: v.ID, Company: "acme", Expires: time.Now().Add(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "k",
		Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: os.Stdin})
	t.Fatalf("the prepare returned (%v); it should have been killed", err)
}

// kill -9 during Prepare, then a sweep by another process: the lease the
// dead process held is expired with its container destroyed (no orphan),
// and the workspace record it left preparing ends swept with a receipt
// that says what happened.
//
// Requirements: WS-3.
func TestWorkspaceKilledDuringPrepare(t *testing.T) {
	cli, img, run := dockerRig(t)
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "berth.db")
	db, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self, "-test.run=^TestWorkspaceCrashChild$", "-test.v")
	child.Env = append(os.Environ(), crashChildEnv+"="+dbPath, crashChildEnv+"_IMAGE="+img.Ref, crashChildEnv+"_RUN="+run)
	stdin, err := child.StdinPipe() // never written: the prepare blocks reading it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	st := db.Stores()
	var rec *workspace.Workspace
	for rec == nil {
		ws, err := wsRecords(st.Workspaces).ListWorkspaces(ctx, workspacehook.Filter{State: string(workspace.StatePreparing)})
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 {
			rec = ws[0]
		}
		select {
		case <-exited:
			t.Fatalf("the child ended before its prepare: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	if n := containers(t, cli, "berth.lease="+rec.Lease); n != 1 {
		t.Fatalf("%d containers of the lease after the kill, want its 1", n)
	}
	sys, err := berth.New(ctx, &berth.Options{Stores: st, MemorySecrets: true, Drivers: []drivers.Driver{docker.New(nil)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	l, err := sys.Leases().Get(ctx, wsOperator, rec.Lease)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(l.ExpiresAt) + 100*time.Millisecond) // the dead process's lease runs out
	rep, err := sys.Sweep(ctx, wsOperator)
	if err != nil {
		t.Fatal(err)
	}
	if rep.WorkspacesEnded != 1 {
		t.Errorf("the sweep ended %d workspaces, want 1", rep.WorkspacesEnded)
	}
	if l, err = sys.Leases().Get(ctx, wsOperator, rec.Lease); err != nil || l.Status != lease.StatusExpired || l.Cleanup != "confirmed" {
		t.Errorf("the lease after the sweep: %s %s %v, want expired, cleanup confirmed", l.Status, l.Cleanup, err)
	}
	if n := containers(t, cli, "berth.lease="+rec.Lease); n != 0 {
		t.Errorf("%d containers of the lease after the sweep, want none", n)
	}
	got, err := wsRecords(st.Workspaces).GetWorkspace(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e := got.End; got.State != workspace.StateEnded || e == nil || e.Reason != workspace.EndSwept || e.Outcome != workspace.OutcomeIndeterminate || !strings.Contains(e.Detail, "preparing") {
		t.Errorf("the record after the sweep: %s %+v, want ended swept indeterminate", got.State, e)
	}
}

// wsRecords returns the records inside the sealed workspace store s.
func wsRecords(s workspace.Store) workspacehook.Records[*workspace.Workspace] {
	return workspacehook.Unseal(s).(workspacehook.Records[*workspace.Workspace])
}

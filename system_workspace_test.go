package berth_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

var wsOperator = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

// wsRig is a System with one environment of driver, and a lease of it
// for company.
func wsLease(t testing.TB, sys *berth.System, driver string, cfg map[string]any, company string) *lease.Handle {
	t.Helper()
	ctx := context.Background()
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "ws-" + driver + "-" + company, Driver: driver, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, wsOperator, lease.AcquireRequest{EnvironmentID: v.ID, Company: company})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = h.Release(context.Background(), lease.ReleaseOptions{}) })
	return h
}

func wsSystem(t testing.TB, d drivers.Driver) *berth.System {
	t.Helper()
	sys, err := berth.New(context.Background(), &berth.Options{Drivers: []drivers.Driver{d}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	return sys
}

// wsSource writes a small project: modes, an empty directory, a 0-byte
// file, a link in, and a .env the default exclude list leaves out.
func wsSource(t *testing.T) (dir, hashWithoutEnv string) {
	t.Helper()
	dir = t.TempDir()
	for p, c := range map[string]string{"src/main.c": "int main(void) { return 1; }\n", "Makefile": "test:\n\t./run.sh\n", "run.sh": "#!/bin/sh\nexit 0\n", "empty": ""} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "run.sh"), 0o755)
	os.Mkdir(filepath.Join(dir, "build"), 0o750)
	os.Chmod(filepath.Join(dir, "build"), 0o750)
	if err := os.Symlink("src/main.c", filepath.Join(dir, "main.c")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	h, err := workspacehook.TreeHash(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("TOKEN=secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, h
}

// files returns the sandbox's drivers.Files, for a test that plays the
// agent.
func files(t testing.TB, h *lease.Handle) drivers.Files {
	t.Helper()
	var f drivers.Files
	if err := h.Raw(func(sb any) error { f = sb.(drivers.Files); return nil }); err != nil {
		t.Fatal(err)
	}
	return f
}

func tarOf(t *testing.T, entries map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range entries {
			if !yield(k) {
				return
			}
		}
	}) {
		c := entries[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(c))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(c))
	}
	tw.Close()
	return &b
}

func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
}

// The workspace's life on a target: prepare a host directory (the hash in
// the sandbox equals the host's, .env left out), the agent changes
// files, collect returns them and the deletions, a release ends the
// record with a receipt.
func testWorkspaceLife(t *testing.T, d drivers.Driver, cfg map[string]any) {
	ctx := context.Background()
	sys := wsSystem(t, d)
	h := wsLease(t, sys, d.Name(), cfg, "acme")
	src, want := wsSource(t)
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceDir, Location: src}})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if ws.State != workspace.StateReady || ws.Checkpoint.Tree != want {
		t.Fatalf("prepared %s at %+v, want ready at the source's tree hash %s", ws.State, ws.Checkpoint, want)
	}
	if !strings.Contains(ws.Dir, "/.berth/ws/fix-tests-") {
		t.Errorf("directory %s", ws.Dir)
	}
	rel := ".berth/ws/" + filepath.Base(ws.Dir)
	fs := files(t, h)
	list, err := fs.ReadDir(ctx, rel)
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range list {
		if fi.Name == ".env" {
			t.Error("the .env file went into the sandbox")
		}
	}
	// The agent's turn: a changed file, a new one, a removed one.
	if err := fs.PutArchive(ctx, rel, tarOf(t, map[string]string{"src/main.c": "int main(void) { return 0; }\n", "NEW": "new\n"})); err != nil {
		t.Fatal(err)
	}
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "rm -f " + rel + "/empty"}}); d.Name() != "fake" && (err != nil || res.ExitCode != 0) {
		t.Fatalf("rm: %v %+v", err, res)
	}
	var out bytes.Buffer
	r, err := sys.Workspaces().Collect(ctx, wsOperator, h, workspace.CollectRequest{Workspace: ws.ID, Files: &out})
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if !slices.Equal(r.Changed, []string{"NEW", "src/main.c"}) {
		t.Errorf("changed %q, want NEW and src/main.c", r.Changed)
	}
	if d.Name() != "fake" && !slices.Equal(r.Deleted, []string{"empty"}) {
		t.Errorf("deleted %q, want empty", r.Deleted)
	}
	if r.Base.Tree != want || r.Head.Tree == want || r.Head.Tree == "" {
		t.Errorf("receipt base %s head %s", r.Base.Tree, r.Head.Tree)
	}
	names := tarNames(t, &out)
	slices.Sort(names)
	if !slices.Equal(names, []string{"NEW", "src/main.c"}) {
		t.Errorf("the archive holds %q, want NEW and src/main.c", names)
	}
	// Another company is refused the lease.
	_, err = sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "globex", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceDir, Location: src}})
	if errcode.ReasonOf(err) != "workspace_owner" || !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("another company's prepare: %v, want reason workspace_owner", err)
	}
	// Another project of the same company too: the lease holds acme/app's.
	_, err = sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Project: "other", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceDir, Location: src}})
	if errcode.ReasonOf(err) != "workspace_owner" {
		t.Errorf("another project's prepare: %v, want reason workspace_owner", err)
	}
	// Prepared again: the directory no longer matches, so it is put in
	// afresh under a new record, the old one ended reprepared.
	ws2, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceDir, Location: src}})
	if err != nil || ws2.ID == ws.ID || ws2.Checkpoint.Tree != want {
		t.Fatalf("prepare again: %+v, %v", ws2, err)
	}
	// Once more, unchanged: the same record, nothing moved.
	ws3, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests",
		Source: workspace.Source{Kind: workspace.SourceDir, Location: src}})
	if err != nil || ws3.ID != ws2.ID {
		t.Fatalf("prepare unchanged: %+v, %v; want the record %s reused", ws3, err, ws2.ID)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	shown, err := sys.Workspaces().Show(ctx, wsOperator, h.ID())
	if err != nil || len(shown) != 2 {
		t.Fatalf("Show: %d records, %v", len(shown), err)
	}
	if e := shown[0].End; e == nil || e.Reason != workspace.EndReprepared {
		t.Errorf("the first record ended %+v, want reprepared", e)
	}
	if e := shown[1].End; shown[1].State != workspace.StateEnded || e == nil || e.Reason != workspace.EndReleased || e.Outcome != workspace.OutcomeClean {
		t.Errorf("after the release the record is %s %+v, want ended released clean", shown[1].State, e)
	}
	// A board member of another company sees none of it.
	if shown, _ := sys.Workspaces().Show(ctx, authz.Principal{ID: "b", Role: authz.RoleBoardMember, Companies: []string{"globex"}}, h.ID()); len(shown) != 0 {
		t.Errorf("another company's board member sees %d records", len(shown))
	}
}

// Requirements: WS-3.
func TestWorkspaceLifeFake(t *testing.T) {
	testWorkspaceLife(t, fake.New(nil), nil)
}

func TestWorkspaceLifeLocal(t *testing.T) {
	testWorkspaceLife(t, local.New(nil), map[string]any{"workdir": t.TempDir()})
}

// A prepare that never finishes (its process gone: here blocked on its
// archive) leaves its record preparing; once its lease is gone, a sweep
// ends the record swept, with a receipt that says so, and the lease is
// expired with its sandbox destroyed.
//
// Requirements: WS-3.
func TestWorkspaceSweepEndsAPrepareLeftBehind(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "crash", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, wsOperator, lease.AcquireRequest{EnvironmentID: v.ID, Company: "acme", Expires: time.Now().Add(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		_, _ = sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "k",
			Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: pr})
	}()
	var rec *workspace.Workspace
	for rec == nil {
		ws, err := sys.Workspaces().Show(ctx, wsOperator, h.ID())
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 1 {
			rec = ws[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rec.State != workspace.StatePreparing {
		t.Fatalf("the record is %s while its archive is read, want preparing (write-ahead)", rec.State)
	}
	time.Sleep(time.Until(h.Lease().ExpiresAt) + 10*time.Millisecond) // until the lease is past its expiry
	rep, err := sys.Sweep(ctx, wsOperator)
	if err != nil {
		t.Fatal(err)
	}
	if rep.WorkspacesEnded != 1 {
		t.Errorf("the sweep ended %d workspaces, want 1", rep.WorkspacesEnded)
	}
	l, err := sys.Leases().Get(ctx, wsOperator, h.ID())
	if err != nil || l.Status != lease.StatusExpired || l.Cleanup != "confirmed" {
		t.Errorf("the lease after the sweep: %+v, %v; want expired, cleanup confirmed", l, err)
	}
	ws, err := sys.Workspaces().Show(ctx, wsOperator, h.ID())
	if err != nil || len(ws) != 1 {
		t.Fatalf("Show: %v %v", ws, err)
	}
	if e := ws[0].End; ws[0].State != workspace.StateEnded || e == nil || e.Reason != workspace.EndSwept || e.Outcome != workspace.OutcomeIndeterminate || !strings.Contains(e.Detail, "preparing") {
		t.Errorf("the record after the sweep: %s %+v, want ended swept indeterminate", ws[0].State, e)
	}
	pw.CloseWithError(errors.New("the crashed prepare's stream ends"))
}

// gitRepo makes a repository of two commits on branch main and returns
// its path and head commit.
func gitRepo(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git:", err)
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(dir, "a.c"), []byte("int a;\n"), 0o644)
	run("add", "a.c")
	run("commit", "-q", "-m", "one")
	os.WriteFile(filepath.Join(dir, "test.sh"), []byte("#!/bin/sh\nexit 1\n"), 0o755)
	run("add", "test.sh")
	run("commit", "-q", "-m", "two")
	return dir, run("rev-parse", "HEAD")
}

// A Git source at a ref: on a target with git (local) its shallow
// repository goes in, the agent commits, and Collect returns the commits
// as a bundle the source repository fetches, the uncommitted diff and a
// receipt naming base and head; on a target without git (the fake) the
// files go in with the commit recorded.
//
// Requirements: WS-3.
func TestWorkspaceGit(t *testing.T) {
	t.Run("local", func(t *testing.T) { testWorkspaceGit(t, local.New(nil), map[string]any{"workdir": t.TempDir()}, true) })
	t.Run("fake", func(t *testing.T) { testWorkspaceGit(t, fake.New(nil), nil, false) })
}

// testWorkspaceGit prepares a Git source on d's target, which has git
// (the repository goes in) or not (the files go in).
func testWorkspaceGit(t *testing.T, d drivers.Driver, cfg map[string]any, hasGit bool) {
	repo, head := gitRepo(t)
	ctx := context.Background()
	sys := wsSystem(t, d)
	h := wsLease(t, sys, d.Name(), cfg, "acme")
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "repo",
		Source: workspace.Source{Kind: workspace.SourceGit, Location: repo, Ref: "main"}})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if ws.Checkpoint.Commit != head || ws.Checkpoint.Tree == "" {
		t.Fatalf("checkpoint %+v, want commit %s and a tree", ws.Checkpoint, head)
	}
	rel := ".berth/ws/" + filepath.Base(ws.Dir)
	if !hasGit {
		list, err := files(t, h).ReadDir(ctx, rel)
		if err != nil || len(list) != 2 || list[0].Name != "a.c" || list[1].Name != "test.sh" {
			t.Errorf("without git the sandbox holds %+v, %v; want a.c and test.sh", list, err)
		}
		r, err := sys.Workspaces().Collect(ctx, wsOperator, h, workspace.CollectRequest{Workspace: ws.ID})
		if err != nil || r.Base.Commit != head || len(r.Changed) != 0 {
			t.Errorf("Collect: %+v, %v", r, err)
		}
		return
	}
	agent := `set -e; cd "$1"; test "$(git rev-list --count HEAD)" = 1; git log -1 --format=%H | grep -q ` + head + `
git config --get remote.origin.url && exit 9
printf '#!/bin/sh\nexit 0\n' > test.sh; git -c user.name=agent -c user.email=a@example.com commit -qam fix
echo wip > notes.txt; echo 'int b;' >> a.c`
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", agent, "agent", rel}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the agent's turn: %v %+v %s", err, res, res.Stderr)
	}
	var bundle, diff, out bytes.Buffer
	r, err := sys.Workspaces().Collect(ctx, wsOperator, h, workspace.CollectRequest{Workspace: ws.ID, Files: &out, Bundle: &bundle, Diff: &diff})
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if r.Base.Commit != head || r.Head.Commit == head || len(r.Head.Commit) != 40 {
		t.Errorf("receipt base %s head %s", r.Base.Commit, r.Head.Commit)
	}
	if !slices.Equal(r.Changed, []string{"a.c", "notes.txt", "test.sh"}) {
		t.Errorf("changed %q", r.Changed)
	}
	if !strings.Contains(diff.String(), "notes.txt") || !strings.Contains(diff.String(), "+int b;") || strings.Contains(diff.String(), "exit 0") {
		t.Errorf("the diff:\n%s", diff.String())
	}
	bf := filepath.Join(t.TempDir(), "agent.bundle")
	os.WriteFile(bf, bundle.Bytes(), 0o600)
	cmd := exec.Command("git", "fetch", "-q", bf, "HEAD")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fetching the bundle into the source: %v: %s", err, out)
	}
	cmd = exec.Command("git", "rev-parse", "FETCH_HEAD")
	cmd.Dir = repo
	if out, _ := cmd.Output(); strings.TrimSpace(string(out)) != r.Head.Commit {
		t.Errorf("the bundle's head %s, the receipt's %s", out, r.Head.Commit)
	}
	// Prepared again: HEAD moved and the status is dirty, so the
	// repository is put in afresh; once more, clean at the commit, it is
	// kept as it is.
	req := workspace.PrepareRequest{Company: "acme", Key: "repo", Source: workspace.Source{Kind: workspace.SourceGit, Location: repo, Ref: "main"}}
	again, err := sys.Workspaces().Prepare(ctx, wsOperator, h, req)
	if err != nil || again.ID == ws.ID || again.Checkpoint != ws.Checkpoint {
		t.Fatalf("prepare after the agent's commit: %+v, %v", again, err)
	}
	res, err = h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", `cd "$1" && git rev-parse HEAD && git status --porcelain`, "check", rel}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != head {
		t.Errorf("the repository after the new prepare: %q, %v; want HEAD %s, clean", res.Stdout, err, head)
	}
	if same, err := sys.Workspaces().Prepare(ctx, wsOperator, h, req); err != nil || same.ID != again.ID {
		t.Errorf("prepare at a clean HEAD: %+v, %v; want the record %s kept", same, err, again.ID)
	}
}

// On a host target the workspace's directory outlives its lease: the next
// lease's prepare of the same owner's key finds it by its checkpoint and
// keeps it when it holds the source's tree (nothing is put in again),
// and removes and prepares it again when anything in it changed, never
// handing over what another turn left there.
//
// Requirements: WS-4.
func TestWorkspaceHostTargetKeepsTheDirectory(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, local.New(nil))
	workdir := t.TempDir()
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "host", Driver: "local", Config: map[string]any{"workdir": workdir}})
	if err != nil {
		t.Fatal(err)
	}
	src, want := wsSource(t)
	prepare := func() *workspace.Workspace {
		t.Helper()
		h, err := sys.Leases().Acquire(ctx, wsOperator, lease.AcquireRequest{EnvironmentID: v.ID, Company: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx, lease.ReleaseOptions{})
		ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "k",
			Source: workspace.Source{Kind: workspace.SourceDir, Location: src}})
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
	// A file's inode and change time: both stay while it is kept.
	inode := func(ws *workspace.Workspace) [2]int64 {
		fi, err := os.Stat(filepath.Join(ws.Dir, "src", "main.c"))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return [2]int64{int64(st.Ino), st.Ctim.Nano()}
	}
	first := prepare()
	if !strings.HasPrefix(first.Dir, workdir+"/.berth/ws/k-") {
		t.Fatalf("directory %s, want it under the lease's workdir %s", first.Dir, workdir)
	}
	ino := inode(first)
	second := prepare()
	if second.ID == first.ID || second.Dir != first.Dir || second.Checkpoint.Tree != want || inode(second) != ino {
		t.Errorf("the second lease's prepare: %+v; want a new record over the same directory, kept (inode and ctime %v, now %v)", second, ino, inode(second))
	}
	// Another turn left a file there: the next prepare starts afresh.
	if err := os.WriteFile(filepath.Join(first.Dir, "left-behind"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	third := prepare()
	if _, err := os.Stat(filepath.Join(third.Dir, "left-behind")); !errors.Is(err, os.ErrNotExist) || third.Checkpoint.Tree != want {
		t.Errorf("after a change the prepare kept the directory (%v)", err)
	}
	recs, _ := sys.Workspaces().Show(ctx, wsOperator, first.Lease)
	if len(recs) != 1 || recs[0].End == nil || recs[0].End.Outcome != workspace.OutcomeClean || !strings.Contains(recs[0].End.Detail, "stays on the host") {
		t.Errorf("the first lease's record: %+v", recs[0].End)
	}
}

// A workspace is its owner's across leases too: the owner's key live in
// one lease is refused to another live lease (workspace_in_use), a
// workspace is collected only through its own lease, and a principal of
// another company is refused the lease.
//
// Requirements: WS-4.
func TestWorkspaceOwnerAcrossLeases(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	h1 := wsLease(t, sys, "fake", nil, "acme")
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "second", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := sys.Leases().Acquire(ctx, wsOperator, lease.AcquireRequest{EnvironmentID: v.ID, Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Release(ctx, lease.ReleaseOptions{})
	req := func() workspace.PrepareRequest {
		return workspace.PrepareRequest{Company: "acme", Project: "app", Key: "k",
			Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, map[string]string{"a": "1"})}
	}
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h1, req())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Workspaces().Prepare(ctx, wsOperator, h2, req()); errcode.ReasonOf(err) != "workspace_in_use" || !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("the key live in another live lease: %v, want reason workspace_in_use", err)
	}
	if _, err := sys.Workspaces().Collect(ctx, wsOperator, h2, workspace.CollectRequest{Workspace: ws.ID}); errcode.ReasonOf(err) != "workspace_owner" {
		t.Errorf("collect through another lease: %v, want reason workspace_owner", err)
	}
	for name, bad := range map[string]workspace.PrepareRequest{
		"a key that is a path": {Company: "acme", Key: "../k", Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, nil)},
		"a token in the URL":   {Company: "acme", Key: "k2", Source: workspace.Source{Kind: workspace.SourceGit, Location: "https://x-token:s3cret@git.example.com/a.git"}},
	} {
		if _, err := sys.Workspaces().Prepare(ctx, wsOperator, h2, bad); !errors.Is(err, errcode.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want invalid, naming no secret", name, err)
		}
	}
	// An agent of the company may prepare an archive it hands over, not
	// have berth read a host directory or repository (ActionReadHost).
	acmeAgent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	for _, src := range []workspace.Source{{Kind: workspace.SourceDir, Location: "/etc"}, {Kind: workspace.SourceGit, Location: "/srv/git/private"}} {
		if _, err := sys.Workspaces().Prepare(ctx, acmeAgent, h2, workspace.PrepareRequest{Company: "acme", Key: "host", Source: src}); !errors.Is(err, errcode.ErrDenied) {
			t.Errorf("an agent's %s source %s: %v, want denied", src.Kind, src.Location, err)
		}
	}
	if _, err := sys.Workspaces().Prepare(ctx, acmeAgent, h2, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "mine",
		Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, map[string]string{"a": "1"})}); err != nil {
		t.Errorf("an agent's archive source: %v", err)
	}
	globex := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"globex"}}
	if _, err := sys.Workspaces().Prepare(ctx, globex, h1, req()); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("another company's agent prepares: %v, want denied", err)
	}
	if _, err := sys.Workspaces().Collect(ctx, globex, h1, workspace.CollectRequest{Workspace: ws.ID}); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("another company's agent collects: %v, want not found", err)
	}
	// Once the first lease is released, the key moves to the second.
	if _, err := h1.Release(ctx, lease.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	if ws2, err := sys.Workspaces().Prepare(ctx, wsOperator, h2, req()); err != nil || ws2.Lease != h2.ID() {
		t.Errorf("after the release: %+v, %v", ws2, err)
	}
}

// A workspace's files for a person or a program (what a server's file
// routes call): a board member of the company lists them and reads
// nothing more, the holder reads and writes, only inside the workspace's
// directory, and an upload that would leave it is refused before it
// reaches the sandbox.
func TestWorkspaceFiles(t *testing.T) {
	t.Run("fake", func(t *testing.T) { testWorkspaceFiles(t, fake.New(nil), nil) })
	t.Run("local", func(t *testing.T) { testWorkspaceFiles(t, local.New(nil), map[string]any{"workdir": t.TempDir()}) })
}

func testWorkspaceFiles(t *testing.T, d drivers.Driver, cfg map[string]any) {
	ctx := context.Background()
	sys := wsSystem(t, d)
	h := wsLease(t, sys, d.Name(), cfg, "acme")
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "k",
		Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, map[string]string{"a.txt": "a", "sub/b.txt": "b"})})
	if err != nil {
		t.Fatal(err)
	}
	board := authz.Principal{ID: "b", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	list, err := sys.Workspaces().Files(board, h, ws.ID).ReadDir(ctx, "")
	if err != nil || len(list) != 2 || list[0].Name != "a.txt" || list[1].Name != "sub" {
		t.Errorf("the board member's listing: %+v, %v", list, err)
	}
	if err := sys.Workspaces().Files(board, h, ws.ID).GetArchive(ctx, "a.txt", io.Discard); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("the board member reads a file: %v, want denied", err)
	}
	// Without a handle (a board member may not open the lease): the
	// same listing and refusals, through the lease's files.
	if list, err := sys.Workspaces().Files(board, nil, ws.ID).ReadDir(ctx, "sub"); err != nil || len(list) != 1 || list[0].Name != "b.txt" {
		t.Errorf("the board member's listing without a handle: %+v, %v", list, err)
	}
	if err := sys.Workspaces().Files(board, nil, ws.ID).GetArchive(ctx, "a.txt", io.Discard); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("the board member reads a file without a handle: %v, want denied", err)
	}
	if _, err := sys.Workspaces().Files(board, nil, ws.ID).ReadDir(ctx, "../.."); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("the board member lists out of the workspace: %v, want invalid", err)
	}
	other := authz.Principal{ID: "o", Role: authz.RoleBoardMember, Companies: []string{"globex"}}
	for _, hh := range []*lease.Handle{h, nil} {
		if _, err := sys.Workspaces().Files(other, hh, ws.ID).ReadDir(ctx, ""); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("another company lists (handle %v): %v, want not found", hh != nil, err)
		}
	}
	if err := sys.Workspaces().Files(agent, h, ws.ID).PutArchive(ctx, "sub", tarOf(t, map[string]string{"c.txt": "c"})); err != nil {
		t.Fatalf("the agent's upload: %v", err)
	}
	var out bytes.Buffer
	if err := sys.Workspaces().Files(agent, h, ws.ID).GetArchive(ctx, "sub", &out); err != nil {
		t.Fatal(err)
	}
	if names := tarNames(t, &out); !slices.Contains(names, "c.txt") || !slices.Contains(names, "b.txt") {
		t.Errorf("sub holds %q", names)
	}
	for _, p := range []string{"..", "../..", "/etc", "sub/../../x"} {
		if _, err := sys.Workspaces().Files(agent, h, ws.ID).ReadDir(ctx, p); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("ReadDir %q: %v, want invalid", p, err)
		}
	}
	err = sys.Workspaces().Files(agent, h, ws.ID).PutArchive(ctx, "", tarOf(t, map[string]string{"ok": "1", "../escape": "x"}))
	if errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errcode.MessageOf(err), "../escape") {
		t.Errorf("an upload that leaves the directory: %v, want unsafe_archive naming the entry", err)
	}
	if list, _ := files(t, h).ReadDir(ctx, ".berth/ws"); slices.ContainsFunc(list, func(f drivers.FileInfo) bool { return f.Name == "escape" }) {
		t.Error("the refused entry reached the sandbox")
	}
}

// A reusable lease (reuse_by_workspace) keeps its workspace between
// runs: its release (a stop, resumable) leaves the record ready, the
// next acquisition resumes the same lease, where Show finds the record
// and a prepare of the unchanged source keeps it; a destroy ends it.
func TestWorkspaceKeptByAReusableLease(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "reuse", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	acquire := func() *lease.Handle {
		t.Helper()
		h, err := sys.Leases().Acquire(ctx, wsOperator, lease.AcquireRequest{EnvironmentID: v.ID, Company: "acme", Workspace: "fix-tests", Policy: lease.ReuseByWorkspace})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	src, _ := wsSource(t)
	req := workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix-tests", Source: workspace.Source{Kind: workspace.SourceDir, Location: src}}
	h := acquire()
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	h2 := acquire()
	if h2.ID() != h.ID() {
		t.Fatalf("the second acquisition got lease %s, want the reused %s", h2.ID(), h.ID())
	}
	recs, err := sys.Workspaces().Show(ctx, wsOperator, h2.ID())
	if err != nil || len(recs) != 1 || recs[0].ID != ws.ID || recs[0].State != workspace.StateReady {
		t.Fatalf("the resumed lease's workspaces: %+v, %v; want %s ready", recs, err, ws.ID)
	}
	again, err := sys.Workspaces().Prepare(ctx, wsOperator, h2, req)
	if err != nil || again.ID != ws.ID {
		t.Errorf("prepare in the resumed lease: %+v, %v; want %s kept", again, err, ws.ID)
	}
	if _, err := h2.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	if recs, _ := sys.Workspaces().Show(ctx, wsOperator, h2.ID()); len(recs) != 1 || recs[0].State != workspace.StateEnded || recs[0].End.Reason != workspace.EndReleased {
		t.Errorf("after the destroy: %+v", recs[0])
	}
}

// The task is hostile on a host target too: a symbolic link it planted
// as .berth (or as the workspace's directory) leads no prepare out of the
// workdir, and a base manifest it rewrote is refused by Collect.
func TestWorkspaceHostilePlants(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, local.New(nil))
	workdir, outside := t.TempDir(), t.TempDir()
	h := wsLease(t, sys, "local", map[string]any{"workdir": workdir}, "acme")
	src, _ := wsSource(t)
	req := workspace.PrepareRequest{Company: "acme", Key: "k", Source: workspace.Source{Kind: workspace.SourceDir, Location: src}}
	if err := os.Symlink(outside, filepath.Join(workdir, ".berth")); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Workspaces().Prepare(ctx, wsOperator, h, req); err == nil || !strings.Contains(errcode.MessageOf(err), "symbolic link") {
		t.Errorf("prepare under a planted .berth link: %v", err)
	}
	if list, _ := os.ReadDir(outside); len(list) != 0 {
		t.Errorf("the prepare wrote %d entries outside the workdir", len(list))
	}
	recs, _ := sys.Workspaces().Show(ctx, wsOperator, h.ID())
	if len(recs) != 1 || recs[0].State != workspace.StateEnded || recs[0].End.Reason != workspace.EndFailed {
		t.Errorf("the failed prepare's record: %+v", recs)
	}
	os.Remove(filepath.Join(workdir, ".berth"))

	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, req)
	if err != nil {
		t.Fatal(err)
	}
	// The task rewrites the manifest Collect compares with, to hide a change.
	base := ws.Dir + ".base"
	if err := os.WriteFile(base, []byte("forged\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Workspaces().Collect(ctx, wsOperator, h, workspace.CollectRequest{Workspace: ws.ID}); errcode.ReasonOf(err) != "tree_mismatch" {
		t.Errorf("collect over a forged manifest: %v, want reason tree_mismatch", err)
	}
	// The workspace's directory swapped for a link out: a new prepare
	// refuses to remove through it.
	os.RemoveAll(ws.Dir)
	if err := os.Symlink(outside, ws.Dir); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644)
	if _, err := sys.Workspaces().Prepare(ctx, wsOperator, h, req); err == nil {
		t.Error("a prepare over a planted directory link succeeded")
	}
	if list, _ := os.ReadDir(outside); len(list) != 1 {
		t.Errorf("outside the workdir now holds %d entries, want the 1 it had", len(list))
	}
}

// Many changes are collected from one archive of the directory, a few
// one by one; both give the changed entries only.
func TestWorkspaceCollectManyChanges(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	h := wsLease(t, sys, "fake", nil, "acme")
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "k",
		Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, map[string]string{"keep": "same"})})
	if err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := range 100 {
		many[fmt.Sprintf("gen/%03d.txt", i)] = strconv.Itoa(i)
	}
	if err := files(t, h).PutArchive(ctx, ".berth/ws/"+filepath.Base(ws.Dir), tarOf(t, many)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r, err := sys.Workspaces().Collect(ctx, wsOperator, h, workspace.CollectRequest{Workspace: ws.ID, Files: &out})
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, &out)
	if len(r.Changed) != 101 || len(names) != 101 || slices.Contains(names, "keep") || !slices.Contains(names, "gen/099.txt") {
		t.Errorf("%d changed, the archive holds %d entries (%q...)", len(r.Changed), len(names), names[:min(3, len(names))])
	}
}

// The reuse key of reuse_by_workspace holds the scope's project: the
// same project's next run resumes the lease (and finds its workspace),
// another project's run of the same company and workspace gets a lease
// of its own.
//
// Requirements: WS-4.
func TestWorkspaceReuseKeyHoldsTheProject(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	v, err := sys.Catalog().Create(ctx, wsOperator, environment.CreateRequest{Name: "scoped", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Assignments().Set(ctx, wsOperator, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Company: "acme", Key: "ws"}, EnvironmentID: v.ID}, 0); err != nil {
		t.Fatal(err)
	}
	agent := authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}}
	acquire := func(project string) *lease.Handle {
		t.Helper()
		h, err := sys.Leases().Acquire(ctx, agent, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws", Project: project}, Policy: lease.ReuseByWorkspace})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a := acquire("app")
	if _, err := sys.Workspaces().Prepare(ctx, agent, a, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "ws",
		Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, map[string]string{"f": "1"})}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(ctx, lease.ReleaseOptions{}); err != nil {
		t.Fatal(err)
	}
	b := acquire("other")
	defer b.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if b.ID() == a.ID() {
		t.Fatalf("another project's run resumed lease %s, which holds project app's workspace", a.ID())
	}
	found, err := sys.Workspaces().Find(ctx, agent, "acme", "app", "ws")
	if err != nil || found.Lease != a.ID() {
		t.Errorf("Find: %+v, %v; want the workspace in lease %s", found, err, a.ID())
	}
	if _, err := sys.Workspaces().Find(ctx, agent, "acme", "other", "ws"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Find for another project: %v, want not found", err)
	}
	if _, err := sys.Workspaces().Find(ctx, authz.Principal{ID: "g", Role: authz.RoleAgent, Companies: []string{"globex"}}, "acme", "app", "ws"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Find by another company's agent: %v, want not found", err)
	}
	again := acquire("app")
	defer again.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	if again.ID() != a.ID() {
		t.Errorf("the same project's next run got lease %s, want %s", again.ID(), a.ID())
	}
	if recs, err := sys.Workspaces().Show(ctx, agent, again.ID()); err != nil || len(recs) != 1 || recs[0].State != workspace.StateReady {
		t.Errorf("its workspace: %+v, %v", recs, err)
	}
}

// An archive source is checked as an upload is: an entry that would
// leave the workspace's directory fails the prepare, naming it, and the
// record ends failed with a receipt.
func TestWorkspaceArchiveSourceIsChecked(t *testing.T) {
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	h := wsLease(t, sys, "fake", nil, "acme")
	_, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "k",
		Source: workspace.Source{Kind: workspace.SourceArchive}, Archive: tarOf(t, map[string]string{"../../out": "x"})})
	if errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errcode.MessageOf(err), "../../out") {
		t.Fatalf("prepare of an archive that leaves: %v", err)
	}
	recs, _ := sys.Workspaces().Show(ctx, wsOperator, h.ID())
	if len(recs) != 1 || recs[0].End == nil || recs[0].End.Reason != workspace.EndFailed || !strings.Contains(recs[0].End.Detail, "../../out") {
		t.Errorf("the record: %+v", recs[0].End)
	}
}

// A Git source at a commit (not a branch): that commit's files, and its
// name as the checkpoint; a ref that is not there fails the prepare with
// a sentence that names the repository and the ref.
func TestWorkspaceGitAtACommit(t *testing.T) {
	repo, _ := gitRepo(t)
	out, err := exec.Command("git", "-C", repo, "rev-parse", "HEAD~1").Output()
	if err != nil {
		t.Fatal(err)
	}
	first := strings.TrimSpace(string(out))
	ctx := context.Background()
	sys := wsSystem(t, fake.New(nil))
	h := wsLease(t, sys, "fake", nil, "acme")
	ws, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "old",
		Source: workspace.Source{Kind: workspace.SourceGit, Location: repo, Ref: first}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := files(t, h).ReadDir(ctx, ".berth/ws/"+filepath.Base(ws.Dir))
	if ws.Checkpoint.Commit != first || err != nil || len(list) != 1 || list[0].Name != "a.c" {
		t.Errorf("at %s: checkpoint %s, files %+v, %v", first, ws.Checkpoint.Commit, list, err)
	}
	_, err = sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: "missing",
		Source: workspace.Source{Kind: workspace.SourceGit, Location: repo, Ref: "no-such-branch"}})
	if !errors.Is(err, errcode.ErrInvalid) || !strings.Contains(errcode.MessageOf(err), "no-such-branch") {
		t.Errorf("a missing ref: %v", err)
	}
}

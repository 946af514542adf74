package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

// leaseOf returns the lease id envctl run's progress named.
func leaseOf(t *testing.T, stderr string) string {
	t.Helper()
	m := regexp.MustCompile(`envctl: lease (\S+) \(`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("stderr names no lease:\n%s", stderr)
	}
	return m[1]
}

// issue 52 items 5 and 6: envctl run --workspace-dir prepares the
// workspace before the task, which runs in it, and --collect unpacks what
// it changed after it, its exit status still the task's; with
// --workspace-git the agent's commit comes back as a bundle and its
// uncommitted files as a diff. On the local driver with the real runner
// binary (the fake runs internal/runner in its own process).
func TestRunPreparesAndCollectsTheWorkspace(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	c := newCLI(t)
	c.ok("env", "create", "--name", "here", "--driver", "local", "--config", writeFile(t, `{"workdir":"`+t.TempDir()+`"}`))
	src := t.TempDir()
	for name, body := range map[string]string{"main.c": "int main(){}\n", "gone.txt": "x", ".env": "TOKEN=s3cret"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dest := filepath.Join(t.TempDir(), "out")
	out, errOut, err := c.exec("", "run", "here", "--company", "acme", "--workspace", "w", "--workspace-dir", src, "--collect", dest,
		"--runner-binary", bin, "--", "sh", "-c", `test ! -e .env || echo LEAK; cat main.c; echo fixed >> main.c; echo n > new.txt; rm gone.txt; exit 3`)
	if exitCode(err) != 3 || out != "int main(){}\n" {
		t.Fatalf("run = %v (exit %d), stdout %q; want the task's exit 3 and main.c\nstderr:\n%s", err, exitCode(err), out, errOut)
	}
	wantContains(t, "stderr", errOut, "preparing workspace w from dir "+src, "workspace w (ws-", "collected: 2 changed, 1 deleted since tree sha256:", "cleanup confirmed")
	for name, want := range map[string]string{"main.c": "int main(){}\nfixed\n", "new.txt": "n\n"} {
		if b, err := os.ReadFile(filepath.Join(dest, name)); err != nil || string(b) != want {
			t.Errorf("collected %s = %q, %v; want %q", name, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "gone.txt")); err == nil {
		t.Errorf("a deleted file was collected")
	}
	// The record ended with the lease; show prints it.
	id := leaseOf(t, errOut)
	show := c.ok("workspace", "show", id)
	wantContains(t, "workspace show", show, "(key w)", "company acme", "source:     dir "+src, "state:      ended", "ended:      released, clean", "checkpoint: tree sha256:")

	// A Git source at a ref: the task commits one change and leaves one
	// file uncommitted.
	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "a.txt")
	git("commit", "-qm", "base")
	gdest := filepath.Join(t.TempDir(), "changes")
	var rep runReport
	c.okJSON(&rep, "run", "here", "--company", "acme", "--workspace-git", repo+"@main", "--collect", gdest, "--runner-binary", bin, "--",
		"sh", "-c", `echo b >> a.txt && git -c user.name=a -c user.email=a@example.com commit -qam agent && echo u > u.txt`)
	if rep.Workspace == nil || rep.Workspace.Source.Ref != "main" || rep.Workspace.Checkpoint.Commit == "" || rep.Collected == nil ||
		!slices.Equal(rep.Collected.Changed, []string{"a.txt", "u.txt"}) || rep.Collected.Head.Commit == rep.Collected.Base.Commit || rep.Collected.Head.Commit == "" {
		t.Errorf("run --json: workspace %+v, collected %+v; want the Git source at main, a.txt and u.txt changed, a new head commit", rep.Workspace, rep.Collected)
	}
	if b, err := os.ReadFile(gdest + ".bundle"); err != nil || !bytes.HasPrefix(b, []byte("# v2 git bundle")) {
		t.Errorf("%s.bundle = %.40q, %v; want a git bundle", gdest, b, err)
	}
	if b, err := os.ReadFile(gdest + ".diff"); err != nil || !strings.Contains(string(b), "u.txt") || strings.Contains(string(b), "a.txt") {
		t.Errorf("%s.diff = %q, %v; want the uncommitted u.txt only", gdest, b, err)
	}
	if b, err := os.ReadFile(filepath.Join(gdest, "a.txt")); err != nil || string(b) != "a\nb\n" {
		t.Errorf("collected a.txt = %q, %v", b, err)
	}

	// berth reads a host's directory for an operator, never for an agent.
	c.ok("assign", "set", "workspace", "w", "here", "--company", "acme")
	if _, errOut, err := c.exec("", "--as", "agent:ann@acme", "run", "--company", "acme", "--workspace", "w", "--workspace-dir", src, "--runner-binary", bin, "--", "true"); err == nil || !strings.Contains(errorText(err, false, false), "read_host") {
		t.Errorf("an agent's --workspace-dir: %v, want refused\n%s", err, errOut)
	}

	// Without a workspace, --collect has nothing to collect; both sources
	// at once are refused.
	if _, msg := c.fail("run", "here", "--company", "acme", "--collect", dest, "--", "true"); !strings.Contains(msg, "--collect needs a workspace") {
		t.Errorf("--collect alone: %s", msg)
	}
	if _, msg := c.fail("run", "here", "--company", "acme", "--workspace-dir", src, "--workspace-git", repo, "--", "true"); !strings.Contains(msg, "name one source") {
		t.Errorf("two sources: %s", msg)
	}
}

// REPO[@REF] splits at a ref's "@", never a URL's user's.
func TestSplitGitRef(t *testing.T) {
	for in, want := range map[string][2]string{
		"/srv/app":                      {"/srv/app", ""},
		"/srv/app@main":                 {"/srv/app", "main"},
		"/srv/app@feature/x":            {"/srv/app", "feature/x"},
		"git@github.com:org/app.git":    {"git@github.com:org/app.git", ""},
		"git@github.com:org/app.git@v1": {"git@github.com:org/app.git", "v1"},
		"https://bob@host/app":          {"https://bob@host/app", ""},
		"https://host/app@v2":           {"https://host/app", "v2"},
		"app@":                          {"app@", ""},
	} {
		if r, ref := splitGitRef(in); r != want[0] || ref != want[1] {
			t.Errorf("splitGitRef(%q) = %q, %q; want %q, %q", in, r, ref, want[0], want[1])
		}
	}
}

// issue 52 item 5: workspace ls|get|put act inside the lease's one live
// workspace (or --workspace ID), --workdir in the working directory, and
// workspace show prints its source, checkpoint, owner, state and what
// changed; a board member lists it and nothing more. On a fake lease held
// across envctl processes.
func TestWorkspaceVerbsActInsideTheWorkspace(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	var acq struct{ ID string }
	c.okJSON(&acq, "lease", "acquire", "sbx", "--company", "acme")
	id := acq.ID

	// The workspace as a first turn's 'run --workspace-dir' leaves it (the
	// fake's runner cannot run a task in a fake directory): prepared
	// through the library from an archive.
	ctx := context.Background()
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	sys, err := openSystem(ctx, &globals{db: c.db, drivers: c.drivers, testMode: true, as: ops, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Open(ctx, ops, id)
	if err != nil {
		t.Fatal(err)
	}
	var arc bytes.Buffer
	tw := tar.NewWriter(&arc)
	_ = tw.WriteHeader(&tar.Header{Name: "main.c", Typeflag: tar.TypeReg, Mode: 0o644, Size: 13})
	_, _ = tw.Write([]byte("int main(){}\n"))
	_ = tw.Close()
	ws, err := sys.Workspaces().Prepare(ctx, ops, h, workspace.PrepareRequest{Company: "acme", Project: "app", Key: "fix",
		Source: workspace.Source{Kind: workspace.SourceArchive, Location: "app.tar"}, Archive: &arc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(ctx, lease.Command{Argv: []string{"ln", "-s", "main.c", ".berth/ws/" + filepath.Base(ws.Dir) + "/entry.c"}}); err != nil {
		t.Fatal(err)
	}
	sys.Close()

	wantContains(t, "ls", c.ok("workspace", "ls", id), "main.c", "entry.c -> main.c")
	wantContains(t, "ls --workdir", c.ok("workspace", "ls", id, "--workdir"), ".berth/")
	if ls := c.ok("--as", "board_member:bea@acme", "workspace", "ls", id, "--workspace", ws.ID); !strings.Contains(ls, "main.c") {
		t.Errorf("board member's ls of the workspace lacks main.c:\n%s", ls)
	}
	if _, _, err := c.exec("", "--as", "board_member:bea@acme", "workspace", "get", id, "--to", t.TempDir()); err == nil {
		t.Errorf("a board member got the workspace's files")
	}
	if _, _, err := c.exec("", "workspace", "ls", id, ".."); err == nil || !strings.Contains(errorText(err, false, false), "outside the workspace") {
		t.Errorf("ls ..: %v", err)
	}
	if _, _, err := c.exec("", "workspace", "ls", id, "--workspace", "ws-nope"); err == nil || !strings.Contains(errorText(err, false, false), "Could not find workspace ws-nope") {
		t.Errorf("ls --workspace ws-nope: %v", err)
	}
	up := t.TempDir()
	if err := os.WriteFile(filepath.Join(up, "notes.md"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("workspace", "put", id, "--from", up)
	dst := t.TempDir()
	c.ok("workspace", "get", id, "--to", dst)
	for name, want := range map[string]string{"main.c": "int main(){}\n", "notes.md": "hi"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("got %s = %q, %v; want %q", name, b, err, want)
		}
	}

	show := c.ok("workspace", "show", id)
	wantContains(t, "workspace show", show, "workspace "+ws.ID+" (key fix)", "company acme, project app", "source:     archive app.tar",
		"state:      ready", "checkpoint: tree "+ws.Checkpoint.Tree, "changed:    entry.c notes.md", "deleted:    -")
	var js []showEntry
	c.okJSON(&js, "workspace", "show", id)
	if len(js) != 1 || js[0].Changes == nil || len(js[0].Changes.Changed) != 2 {
		b, _ := json.Marshal(js)
		t.Errorf("workspace show --json = %s", b)
	}
	if _, _, err := c.exec("", "--as", "agent:eve@globex", "workspace", "show", id); err == nil || !strings.Contains(errorText(err, false, false), "Could not find lease "+id) {
		t.Errorf("another company's show: %v, want not found", err)
	}
	c.ok("lease", "release", id)
	wantContains(t, "show after release", c.ok("workspace", "show", id), "state:      ended", "ended:      released")
}

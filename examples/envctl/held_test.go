package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/berthdev/berth/errcode"
)

// heldLease returns the id of the lease envctl run --hold printed it held.
func heldLease(t *testing.T, stderr string) string {
	t.Helper()
	m := regexp.MustCompile(`envctl: lease (\S+) held: run in it with 'envctl run --lease `).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("stderr names no held lease:\n%s", stderr)
	}
	return m[1]
}

// issue 52 items 4 and 5: envctl run --hold keeps the lease and prints
// its id; a later acquisition of the company's workspace gets the same
// lease, another company's does not; another company's principal does not
// find it; workspace put, ls and get reach its files as the lease
// authorizes them; lease release ends it.
//
// Requirements: WS-5.
func TestRunHoldsTheLeaseAcrossTurns(t *testing.T) {
	c := newCLI(t)
	c.createFake("sbx", `{"image":"`+c.fake.DefaultImageIdentity().String()+`"}`)
	bin := fakeRunnerBinary(t)
	out, errOut, err := c.exec("", "run", "sbx", "--company", "acme", "--workspace", "w", "--hold", "--runner-binary", bin, "--", "echo", "turn one")
	if err != nil || out != "turn one\n" {
		t.Fatalf("run --hold = %v, stdout %q\nstderr:\n%s", err, out, errOut)
	}
	id := heldLease(t, errOut)
	if strings.Contains(errOut, "cleanup confirmed") {
		t.Errorf("a held lease was released:\n%s", errOut)
	}
	if got := c.ok("lease", "list", "--status", "active"); !strings.Contains(got, id) || !strings.Contains(got, "reuse_by_workspace") {
		t.Errorf("lease list --status active lacks the held lease %s of reuse_by_workspace:\n%s", id, got)
	}

	// The second turn of workspace w resumes the same lease (the fake's
	// runner lives in the process that launched it, so the run of a
	// later process in it is TestRunInRealTargets/box-held's, with the
	// real runner).
	if got := c.ok("lease", "acquire", "sbx", "--company", "acme", "--workspace", "w", "--policy", "reuse_by_workspace"); !strings.Contains(got, "lease "+id+" ") {
		t.Errorf("second turn of workspace w: want lease %s:\n%s", id, got)
	}
	if got := c.ok("lease", "acquire", "sbx", "--company", "globex", "--workspace", "w", "--policy", "reuse_by_workspace"); strings.Contains(got, "lease "+id+" ") {
		t.Errorf("company globex's turn of workspace w got acme's lease %s", id)
	}

	// Another company's agent does not find it; --lease takes no ENV.
	if _, _, err := c.exec("", "--as", "agent:eve@globex", "run", "--lease", id, "--", "true"); err == nil || !strings.Contains(errorText(err, false, false), "Could not find lease "+id) {
		t.Errorf("another company's run --lease: %v, want not found", err)
	}
	if _, msg := c.fail("run", "sbx", "--lease", id, "--", "true"); !strings.Contains(msg, "leave out ENV") {
		t.Errorf("run ENV --lease: %s", msg)
	}

	// Files of the held lease, then its release.
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"main.c": "int main(){}\n", "sub/x.txt": "x", ".env": "TOKEN=s3cret"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, errOut, err := c.exec("", "workspace", "put", id, "--from", src); err != nil {
		t.Fatalf("workspace put: %v\n%s", err, errOut)
	}
	ls := c.ok("workspace", "ls", id)
	wantContains(t, "workspace ls", ls, "main.c", "sub/")
	if strings.Contains(ls, ".env") {
		t.Errorf("put uploaded .env:\n%s", ls)
	}
	if ls := c.ok("--as", "board_member:bea@acme", "workspace", "ls", id, "sub"); !strings.Contains(ls, "x.txt") {
		t.Errorf("board member's ls sub lacks x.txt:\n%s", ls)
	}
	dst := t.TempDir()
	if _, _, err := c.exec("", "--as", "board_member:bea@acme", "workspace", "get", id, "--to", dst); err == nil || !strings.Contains(errorText(err, false, false), "may list the files of lease "+id+" but not read or write them") {
		t.Errorf("board member's get: %v, want refused", err)
	}
	if _, _, err := c.exec("", "--as", "agent:eve@globex", "workspace", "ls", id); err == nil || !strings.Contains(errorText(err, false, false), "Could not find lease "+id) {
		t.Errorf("another company's ls: %v, want not found", err)
	}
	if _, _, err := c.exec("", "workspace", "ls", id, "../.."); err == nil || !strings.Contains(errorText(err, false, false), "is not inside the working directory of lease "+id) {
		t.Errorf("ls ../..: %v, want refused", err)
	}
	if _, errOut, err := c.exec("", "workspace", "get", id, "--to", dst); err != nil {
		t.Fatalf("workspace get: %v\n%s", err, errOut)
	}
	for name, want := range map[string]string{"main.c": "int main(){}\n", "sub/x.txt": "x"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("got %s = %q, %v; want %q", name, b, err, want)
		}
	}

	// What the sandbox sends back is the task's to forge: a link that
	// leads out of the destination is refused, naming it, and nothing is
	// written through it.
	if err := os.Symlink("/etc", filepath.Join(src, "sub", "out")); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := c.exec("", "workspace", "put", id, "--from", src); err != nil {
		t.Fatalf("workspace put of a link: %v\n%s", err, errOut)
	}
	if ls := c.ok("workspace", "ls", id, "sub"); !strings.Contains(ls, "out -> /etc") {
		t.Errorf("the link did not go in as a link:\n%s", ls)
	}
	evil := t.TempDir()
	_, _, err = c.exec("", "workspace", "get", id, "sub", "--to", evil)
	if err == nil || errcode.ReasonOf(err) != "unsafe_archive" || !strings.Contains(errorText(err, false, false), `"out"`) {
		t.Errorf("workspace get of a link out of the destination: %v, want unsafe_archive naming out", err)
	}
	if _, err := os.Lstat(filepath.Join(evil, "out")); err == nil {
		t.Errorf("the link out of the destination was written")
	}

	// issue 52 item 5: --collect in a held lease without a workspace is
	// refused before the task runs.
	if _, _, err := c.exec("", "run", "--lease", id, "--collect", t.TempDir(), "--", "true"); err == nil || !strings.Contains(err.Error(), "holds no live workspace to collect") {
		t.Errorf("run --lease --collect without a workspace: %v", err)
	}

	// run --hold stopped its task with proof: the release needs no runner.
	if got := c.ok("lease", "release", id); !strings.Contains(got, "released") || !strings.Contains(got, "cleanup: confirmed") {
		t.Errorf("lease release %s:\n%s", id, got)
	}
	if _, _, err := c.exec("", "run", "--lease", id, "--", "true"); err == nil || !strings.Contains(err.Error(), "not a live lease") {
		t.Errorf("run --lease of a released lease: %v", err)
	}
}

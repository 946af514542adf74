package lease_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// issue 52 item 4: a reuse_by_workspace lease is its workspace's and
// project's: the same company, project and workspace get the same lease
// (a second turn finds the first one's sandbox), another project or
// another company never does.
//
// Requirements: WS-4, WS-5.
func TestReuseByWorkspaceKeyHasTheProject(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	req := func(company, project, ws string) lease.AcquireRequest {
		r := w.req(lease.ReuseByWorkspace, "")
		r.Company, r.Project, r.Workspace = company, project, ws
		return r
	}
	acquire := func(r lease.AcquireRequest) *lease.Handle {
		t.Helper()
		h, err := w.m.Acquire(bg, op, r)
		if err != nil {
			t.Fatalf("Acquire(%s/%s/%s): %v", r.Company, r.Project, r.Workspace, err)
		}
		return h
	}
	first := acquire(req("acme", "p1", "w"))
	if again := acquire(req("acme", "p1", "w")); again.ID() != first.ID() || again.SandboxID() != first.SandboxID() {
		t.Errorf("second turn of acme/p1/w: lease %s (%s), want %s (%s)", again.ID(), again.SandboxID(), first.ID(), first.SandboxID())
	}
	// Another manager (another process) resumes it too.
	if h, err := w.newManager(nil).Acquire(bg, op, req("acme", "p1", "w")); err != nil || h.ID() != first.ID() {
		t.Errorf("second turn through another manager: %v, %v; want lease %s", h, err, first.ID())
	}
	for _, r := range []lease.AcquireRequest{req("acme", "p2", "w"), req("acme", "", "w"), req("globex", "p1", "w"), req("acme", "p1", "w2")} {
		if h := acquire(r); h.ID() == first.ID() {
			t.Errorf("%s/%s/%s got the lease of acme/p1/w", r.Company, r.Project, r.Workspace)
		}
	}

	// Through a scope the project is the scope's; another is refused.
	if _, err := w.asg.Set(bg, op, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "w", Company: "acme"}, EnvironmentID: w.env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	scope := &authz.Scope{Company: "acme", Workspace: "w", Project: "p1"}
	h, err := w.m.Acquire(bg, roleAgent, lease.AcquireRequest{Scope: scope, Policy: lease.ReuseByWorkspace})
	if err != nil || h.ID() != first.ID() {
		t.Errorf("agent's turn through the scope of acme/p1/w: %v, %v; want lease %s", h, err, first.ID())
	}
	if _, err := w.m.Acquire(bg, roleAgent, lease.AcquireRequest{Scope: scope, Project: "p2", Policy: lease.ReuseByWorkspace}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("project p2 through a scope of p1: %v, want errcode.ErrInvalid", err)
	}
}

// tarOf returns a tar stream of the files (name -> content).
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// issue 52 item 5: Manager.Files authorizes as the lease does: its
// company's agent and the operators read and write, a board member lists
// only, another company's principal does not find it; paths stay in the
// working directory; another manager reaches a sandbox lease's files by
// resuming it.
func TestFilesAuthorization(t *testing.T) {
	t.Parallel()
	w := newWorld(t, worldOpts{})
	h := w.acquire(lease.ReuseByWorkspace, "")
	f, err := w.m.Files(bg, roleAgent, h.ID())
	if err != nil {
		t.Fatalf("Files for the company's agent: %v", err)
	}
	if err := f.PutArchive(bg, "", bytes.NewReader(tarOf(t, map[string]string{"a.txt": "hello"}))); err != nil {
		t.Fatalf("PutArchive: %v", err)
	}

	// Another manager (another process) resumes the sandbox for it.
	other := w.newManager(nil)
	of, err := other.Files(bg, roleOp, h.ID())
	if err != nil {
		t.Fatalf("Files through another manager: %v", err)
	}
	var got bytes.Buffer
	if err := of.GetArchive(bg, "a.txt", &got); err != nil {
		t.Fatalf("GetArchive: %v", err)
	}
	tr := tar.NewReader(&got)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := io.ReadAll(tr); hdr.Name != "a.txt" || string(body) != "hello" {
		t.Errorf("GetArchive(a.txt) = %q %q, want a.txt hello", hdr.Name, body)
	}

	bf, err := w.m.Files(bg, roleBoard, h.ID())
	if err != nil {
		t.Fatalf("Files for a board member: %v", err)
	}
	list, err := bf.ReadDir(bg, ".")
	if err != nil || len(list) != 1 || list[0].Name != "a.txt" || list[0].Size != 5 {
		t.Errorf("board member's ReadDir = %+v, %v; want a.txt of 5 bytes", list, err)
	}
	if err := bf.GetArchive(bg, "a.txt", io.Discard); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("board member's GetArchive: %v, want errcode.ErrDenied", err)
	}
	if err := bf.PutArchive(bg, "", bytes.NewReader(tarOf(t, map[string]string{"b": "x"}))); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("board member's PutArchive: %v, want errcode.ErrDenied", err)
	}

	stranger := authz.Principal{ID: "eve", Role: authz.RoleAgent, Companies: []string{"globex"}}
	if _, err := w.m.Files(bg, stranger, h.ID()); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("another company's agent: %v, want errcode.ErrNotFound", err)
	}
	for _, p := range []string{"/etc", "..", "../x", "a/../../x"} {
		if _, err := f.ReadDir(bg, p); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("ReadDir(%q): %v, want errcode.ErrInvalid", p, err)
		}
		if err := f.GetArchive(bg, p, io.Discard); !errors.Is(err, errcode.ErrInvalid) {
			t.Errorf("GetArchive(%q): %v, want errcode.ErrInvalid", p, err)
		}
	}

	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Files(bg, roleAgent, h.ID()); !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("Files of a released lease: %v, want errcode.ErrConflict", err)
	}
	var _ drivers.Files = f
}

package main

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/berthdev/berth/workspace"
)

// tarNames returns the regular files of a tar stream, name -> content.
func tarNames(t *testing.T, b []byte) map[string]string {
	t.Helper()
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("the archive: %v", err)
		}
		c, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg {
			got[h.Name] = string(c)
		}
	}
}

// issue 52 item 5: a held lease's workspace over HTTP. An uploaded tar
// prepares it (POST …/workspace), the files routes act inside it
// (?workspace=ID), GET …/workspace shows its record, checkpoint and what
// changed, …/workspace/{ws}/changes downloads the changed files; the
// holder's company's agent and operators read and write, a board member
// lists and reads the records only, another company's principal finds
// nothing; the release ends the record and the sweep reports
// workspacesEnded.
func TestLeaseWorkspaceRoutes(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/acme/assignments/workspace/ws1", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
	r := e.startRun(t, "acme", tokAgent, map[string]any{"workspace": "ws1", "project": "p1", "hold": true, "argv": []string{"true"}})
	id := e.waitRun(t, "acme", r.ID, tokAgent, ended).Lease
	base := "/api/v1/companies/acme/leases/" + id
	tarHdr := map[string]string{"Content-Type": tarType}
	src := string(tarBytes(t, [2]string{"main.c", "int main(){}\n"}, [2]string{"src/", ""}, [2]string{"src/a.c", "a"}))

	// Prepare: the holder's company's agent; a board member may not, and
	// another company's principal does not find the lease.
	e.must(t, http.StatusBadRequest, call{method: "POST", path: base + "/workspace?key=bad%20key", token: tokAgent, header: tarHdr, body: src})
	e.must(t, http.StatusForbidden, call{method: "POST", path: base + "/workspace?key=fix", token: tokBoard, header: tarHdr, body: src})
	e.must(t, http.StatusNotFound, call{method: "POST", path: "/api/v1/companies/globex/leases/" + id + "/workspace?key=fix", token: tokAdmin, header: tarHdr, body: src})
	var ws workspace.Workspace
	e.must(t, http.StatusOK, call{method: "POST", path: base + "/workspace?key=fix&project=p1&name=app.tar", token: tokAgent, header: tarHdr, body: src}).decode(t, &ws)
	if ws.State != workspace.StateReady || ws.Key != "fix" || ws.Project != "p1" || ws.Lease != id || ws.Checkpoint.Tree == "" || ws.Source.Kind != workspace.SourceArchive {
		t.Fatalf("prepared workspace %+v: want ready, key fix, project p1, in lease %s, at a tree", ws, id)
	}

	// The files routes inside it: an upload is a change.
	files := base + "/files?workspace=" + ws.ID
	e.must(t, http.StatusOK, call{method: "PUT", path: files + "&path=src", token: tokAgent, header: tarHdr, body: string(tarBytes(t, [2]string{"b.c", "bee"}))})
	for _, tok := range []string{tokAgent, tokBoard} {
		var list filesList
		e.must(t, http.StatusOK, call{method: "GET", path: files + "&path=src", token: tok}).decode(t, &list)
		var names []string
		for _, f := range list.Entries {
			names = append(names, f.Name)
		}
		if !slices.Equal(names, []string{"a.c", "b.c"}) {
			t.Errorf("listing of the workspace's src: %v, want a.c b.c", names)
		}
	}
	e.must(t, http.StatusForbidden, call{method: "GET", path: files + "&path=main.c&archive=1", token: tokBoard})
	if got := tarNames(t, e.must(t, http.StatusOK, call{method: "GET", path: files + "&path=main.c&archive=1", token: tokOperator}).body); got["main.c"] != "int main(){}\n" {
		t.Errorf("download of the workspace's main.c: %v", got)
	}
	for _, p := range []string{"..", "../x", "/etc"} {
		e.must(t, http.StatusBadRequest, call{method: "GET", path: files + "&path=" + p, token: tokAgent})
		e.must(t, http.StatusBadRequest, call{method: "GET", path: files + "&path=" + p, token: tokBoard})
	}
	e.must(t, http.StatusNotFound, call{method: "GET", path: base + "/files?workspace=ws-nope", token: tokBoard})

	// Show: the record with what changed for the holder; the record alone
	// for a board member.
	var show workspaceShow
	e.must(t, http.StatusOK, call{method: "GET", path: base + "/workspace", token: tokAgent}).decode(t, &show)
	if len(show.Workspaces) != 1 || show.Workspaces[0].Workspace.ID != ws.ID || show.Workspaces[0].Changes == nil ||
		!slices.Equal(show.Workspaces[0].Changes.Changed, []string{"src/b.c"}) || show.Workspaces[0].Changes.Base != ws.Checkpoint {
		t.Errorf("show = %+v, want workspace %s with src/b.c changed since its checkpoint", show, ws.ID)
	}
	var board workspaceShow
	e.must(t, http.StatusOK, call{method: "GET", path: base + "/workspace", token: tokBoard}).decode(t, &board)
	if len(board.Workspaces) != 1 || board.Workspaces[0].Changes != nil || board.Workspaces[0].ChangesError == "" {
		t.Errorf("board member's show = %+v, want the record and why its changes are missing", board)
	}
	e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/companies/acme/leases/" + id + "/workspace", token: tokGlobex})

	// The changed files as a tar; a Git part of an archive workspace is empty.
	changes := base + "/workspace/" + ws.ID + "/changes"
	got := e.must(t, http.StatusOK, call{method: "GET", path: changes, token: tokAgent})
	if files := tarNames(t, got.body); len(files) != 1 || files["src/b.c"] != "bee" || got.header.Get("Content-Type") != tarType {
		t.Errorf("changes = %v (%s), want src/b.c", files, got.header.Get("Content-Type"))
	}
	if got := e.must(t, http.StatusOK, call{method: "GET", path: changes + "?part=diff", token: tokAgent}); len(got.body) != 0 {
		t.Errorf("the diff of an archive workspace: %q", got.body)
	}
	e.must(t, http.StatusBadRequest, call{method: "GET", path: changes + "?part=nope", token: tokAgent, raw: true})
	e.must(t, http.StatusForbidden, call{method: "GET", path: changes, token: tokBoard})
	e.must(t, http.StatusNotFound, call{method: "GET", path: base + "/workspace/ws-nope/changes", token: tokAgent})

	// The release ends the record with a receipt; the sweep reports the
	// workspaces it ended.
	e.must(t, http.StatusOK, call{method: "POST", path: base + "/release", token: tokAgent})
	var after workspaceShow
	e.must(t, http.StatusOK, call{method: "GET", path: base + "/workspace", token: tokAgent}).decode(t, &after)
	show = after
	if len(show.Workspaces) != 1 || show.Workspaces[0].Workspace.State != workspace.StateEnded || show.Workspaces[0].Workspace.End == nil ||
		show.Workspaces[0].Workspace.End.Reason != workspace.EndReleased {
		t.Errorf("after the release: %+v, want the record ended released", show)
	}
	var sweep map[string]any
	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/sweep", token: tokAdmin}).decode(t, &sweep)
	if _, ok := sweep["workspacesEnded"]; !ok {
		t.Errorf("the sweep's report lacks workspacesEnded: %v", sweep)
	}
}

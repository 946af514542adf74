package main

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/berthdev/berth/lease"
)

// tarBytes returns a tar stream of files (name -> content), in order.
func tarBytes(t *testing.T, files ...[2]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(f[0], "/") {
			h.Name, h.Mode, h.Typeflag = strings.TrimSuffix(f[0], "/"), 0o755, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// issue 52 items 4 and 5: a run that holds its lease (hold with a
// workspace: reuse_by_workspace) keeps it without a receipt; a run naming
// the lease (leaseId) runs in it and keeps it; a later held run of the
// workspace and project gets the same lease, another project's does not;
// another company's path does not find it. Its files are listed,
// downloaded and uploaded as the lease authorizes: the holder's company's
// agent and the operators read and write, a board member lists only,
// another company's principal does not find it; paths stay in the
// working directory; then the lease is released.
func TestHeldRunsAndLeaseFiles(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	v := e.createFake(t, "box")
	e.must(t, http.StatusOK, call{method: "PUT", path: "/api/v1/companies/acme/assignments/workspace/ws1", token: tokAdmin, body: map[string]any{"environmentId": v.ID}})
	turn := func(body map[string]any) runView {
		t.Helper()
		r := e.startRun(t, "acme", tokAgent, body)
		got := e.waitRun(t, "acme", r.ID, tokAgent, ended)
		if got.Status != runExited || got.Exit == nil || got.Exit.Code != 0 || !got.Held || got.Receipt != nil || len(got.Proofs) == 0 {
			t.Fatalf("held run %+v: want exited 0, held, no receipt, the stop proof of what the task left", got)
		}
		return got
	}
	first := turn(map[string]any{"workspace": "ws1", "project": "p1", "hold": true, "argv": []string{"echo", "one"}})
	var l lease.Lease
	e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/leases/" + first.Lease, token: tokAgent}).decode(t, &l)
	if l.Status != lease.StatusActive || l.Policy != lease.ReuseByWorkspace {
		t.Errorf("the held lease is %s (%s), want active reuse_by_workspace", l.Status, l.Policy)
	}
	if second := turn(map[string]any{"leaseId": first.Lease, "argv": []string{"echo", "two"}}); second.Lease != first.Lease {
		t.Errorf("run in lease %s ran in %s", first.Lease, second.Lease)
	}
	if third := turn(map[string]any{"workspace": "ws1", "project": "p1", "hold": true, "argv": []string{"true"}}); third.Lease != first.Lease {
		t.Errorf("the workspace's next held run got lease %s, want %s", third.Lease, first.Lease)
	}
	if other := turn(map[string]any{"workspace": "ws1", "project": "p2", "hold": true, "argv": []string{"true"}}); other.Lease == first.Lease {
		t.Errorf("project p2's held run got project p1's lease %s", first.Lease)
	}
	e.must(t, http.StatusNotFound, call{method: "POST", path: "/api/v1/companies/globex/runs", token: tokAdmin,
		body: map[string]any{"leaseId": first.Lease, "argv": []string{"true"}}})
	e.must(t, http.StatusBadRequest, call{method: "POST", path: "/api/v1/companies/acme/runs", token: tokAgent,
		body: map[string]any{"leaseId": first.Lease, "workspace": "ws1", "argv": []string{"true"}}})

	files := "/api/v1/companies/acme/leases/" + first.Lease + "/files"
	tarHdr := map[string]string{"Content-Type": tarType}
	up := tarBytes(t, [2]string{"a.txt", "hello"}, [2]string{"sub/", ""}, [2]string{"sub/b.txt", "bee"})
	var put filesPut
	e.must(t, http.StatusOK, call{method: "PUT", path: files, token: tokAgent, header: tarHdr, body: string(up)}).decode(t, &put)
	if put.Bytes != int64(len(up)) {
		t.Errorf("PUT files read %d bytes, want %d", put.Bytes, len(up))
	}
	e.must(t, http.StatusOK, call{method: "POST", path: files + "?path=sub", token: tokOperator, header: tarHdr, body: string(tarBytes(t, [2]string{"c.txt", "sea"}))})
	for _, tok := range []string{tokAgent, tokBoard} {
		var list filesList
		e.must(t, http.StatusOK, call{method: "GET", path: files + "?path=sub", token: tok}).decode(t, &list)
		names := []string{}
		for _, f := range list.Entries {
			names = append(names, f.Name)
		}
		if len(names) != 2 || names[0] != "b.txt" || names[1] != "c.txt" {
			t.Errorf("listing of sub: %v, want b.txt c.txt", names)
		}
	}
	r := e.must(t, http.StatusOK, call{method: "GET", path: files + "?path=sub&archive=1", token: tokAgent})
	if r.header.Get("Content-Type") != tarType {
		t.Errorf("archive Content-Type %q", r.header.Get("Content-Type"))
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(r.body))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the downloaded archive: %v", err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	if got["b.txt"] != "bee" || got["c.txt"] != "sea" || len(got) != 2 {
		t.Errorf("downloaded archive of sub: %v", got)
	}
	e.must(t, http.StatusOK, call{method: "GET", path: files + "?path=a.txt", token: tokOperator, header: map[string]string{"Accept": tarType}})

	// A board member lists only; another company's does not find it.
	e.must(t, http.StatusForbidden, call{method: "GET", path: files + "?path=a.txt&archive=1", token: tokBoard})
	e.must(t, http.StatusForbidden, call{method: "PUT", path: files, token: tokBoard, header: tarHdr, body: string(up)})
	e.must(t, http.StatusNotFound, call{method: "GET", path: files, token: tokGlobex})
	e.must(t, http.StatusNotFound, call{method: "GET", path: "/api/v1/companies/globex/leases/" + first.Lease + "/files", token: tokAdmin})
	for _, p := range []string{"..", "../x", "/etc"} {
		e.must(t, http.StatusBadRequest, call{method: "GET", path: files + "?path=" + p, token: tokAgent})
	}
	e.must(t, http.StatusBadRequest, call{method: "PUT", path: files, token: tokAgent, raw: true, header: map[string]string{"Content-Type": "application/json"}, body: "{}"})

	e.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/leases/" + first.Lease + "/release", token: tokAgent}).decode(t, &l)
	if l.Status != lease.StatusReleased {
		t.Errorf("released held lease is %s", l.Status)
	}
	e.must(t, http.StatusConflict, call{method: "GET", path: files, token: tokAgent})
}

package main

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

// workspaceView is one workspace of GET …/leases/{id}/workspace: its
// record and, for a ready one, what changed since its checkpoint (the
// receipt of a collect that fetches nothing), when the caller may open
// the lease (its holder, operators).
type workspaceView struct {
	Workspace *workspace.Workspace `json:"workspace"`
	Changes   *workspace.Receipt   `json:"changes,omitempty"`
	// ChangesError says why Changes is missing for a ready workspace.
	ChangesError string `json:"changesError,omitempty"`
}

// workspaceShow is what GET …/leases/{id}/workspace answers.
type workspaceShow struct {
	Lease      string          `json:"lease"`
	Workspaces []workspaceView `json:"workspaces"`
}

// workspaceDir is the working directory of a run's task in the lease id:
// the directory of the lease's one live workspace (POST …/workspace
// prepared it in a held lease), else "" (the sandbox's own). Derived from
// the lease alone, so that a replica taking a run over finds the same.
func (s *server) workspaceDir(ctx context.Context, p authz.Principal, id string) (string, error) {
	recs, err := s.sys.Workspaces().Show(ctx, p, id)
	if err != nil {
		return "", fmt.Errorf("the workspaces of lease %s: %w", id, err)
	}
	dir := ""
	for _, w := range recs {
		if w.State == workspace.StateEnded {
			continue
		}
		if dir != "" {
			return "", nil // several: none is the run's
		}
		dir = w.Dir
	}
	return dir, nil
}

// leaseHandle returns the caller's handle of the path's lease
// (lease.Manager.Open: authz.ActionLease, its holder and operators).
func (s *server) leaseHandle(r *http.Request) (*lease.Lease, *lease.Handle, error) {
	l, err := s.companyLease(r)
	if err != nil {
		return nil, nil, err
	}
	h, err := s.sys.Leases().Open(r.Context(), principalOf(r), l.ID)
	return l, h, err
}

// getWorkspace is GET …/leases/{id}/workspace: the lease's workspace
// records (workspace.Manager.Show: whoever may read the lease), live and
// ended, with what changed in each ready one for a caller who may open
// the lease.
func (s *server) getWorkspace(w http.ResponseWriter, r *http.Request) {
	l, err := s.companyLease(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p := principalOf(r)
	recs, err := s.sys.Workspaces().Show(r.Context(), p, l.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := workspaceShow{Lease: l.ID, Workspaces: []workspaceView{}}
	var h *lease.Handle
	var herr error
	for _, ws := range recs {
		v := workspaceView{Workspace: ws}
		if ws.State == workspace.StateReady {
			if h == nil && herr == nil {
				h, herr = s.sys.Leases().Open(r.Context(), p, l.ID)
			}
			if herr != nil {
				v.ChangesError = errcode.MessageOf(herr)
			} else if v.Changes, err = s.sys.Workspaces().Collect(r.Context(), p, h, workspace.CollectRequest{Workspace: ws.ID}); err != nil {
				v.ChangesError = errcode.MessageOf(err)
			}
		}
		out.Workspaces = append(out.Workspaces, v)
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// prepareWorkspace is POST …/leases/{id}/workspace?key=K[&project=P][&name=N]
// with a tar body (Content-Type application/x-tar, at most
// maxFilesUpload bytes): the archive becomes the workspace K of the
// path's company and project P in the lease (workspace.Manager.Prepare of
// a SourceArchive, checked as an upload is). A host's directory or
// repository is not a source here: the server reads no path a client
// names.
func (s *server) prepareWorkspace(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	l, h, err := s.leaseHandle(r)
	if err == nil {
		if mt, _, merr := mime.ParseMediaType(r.Header.Get("Content-Type")); merr != nil || mt != tarType {
			err = invalid("Content-Type", "want %s (a tar stream), got %q", tarType, r.Header.Get("Content-Type"))
		}
	}
	var ws *workspace.Workspace
	if err == nil {
		ws, err = s.sys.Workspaces().Prepare(r.Context(), principalOf(r), h, workspace.PrepareRequest{
			Company: l.Company, Project: q.Get("project"), Key: q.Get("key"),
			Source:  workspace.Source{Kind: workspace.SourceArchive, Location: q.Get("name")},
			Archive: http.MaxBytesReader(w, r.Body, maxFilesUpload)})
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			err = &errcode.Error{Code: errcode.Invalid, Reason: "archive_too_large", Field: "body",
				Message: fmt.Sprintf("The upload goes past %d bytes, the server's limit: prepare from a smaller archive.", int64(maxFilesUpload)),
				Err:     fmt.Errorf("workspace: upload past %d bytes: %w: %w", int64(maxFilesUpload), err, errcode.ErrInvalid)}
		}
	}
	s.audit(r, "lease.workspace.prepare", "", err, "lease", r.PathValue("id"), "key", q.Get("key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, ws)
}

// workspaceChanges is GET …/leases/{id}/workspace/{ws}/changes: what
// changed in the workspace since its checkpoint (workspace.Manager.Collect),
// as a tar stream of the added and changed entries (the sandbox's to
// forge: unpack it with a safe extractor such as berth's tarsafe), or
// with ?part=bundle the agent's commits as a Git bundle, ?part=diff its
// uncommitted changes as a binary git diff (empty when there are none).
// The receipt, the paths changed and deleted, is in GET …/workspace.
func (s *server) workspaceChanges(w http.ResponseWriter, r *http.Request) {
	part := r.URL.Query().Get("part")
	_, h, err := s.leaseHandle(r)
	req := workspace.CollectRequest{Workspace: r.PathValue("ws")}
	tw := &tarWriter{w: w, limit: maxFilesDownload}
	switch part {
	case "", "files":
		req.Files = tw
	case "bundle", "diff":
		tw.typ, tw.name = "application/octet-stream", "changes."+part
		if part == "bundle" {
			req.Bundle = tw
		} else {
			req.Diff = tw
		}
	default:
		err = invalid("part", "want files, bundle or diff, got %q", part)
	}
	if err == nil {
		_, err = s.sys.Workspaces().Collect(r.Context(), principalOf(r), h, req)
	}
	s.audit(r, "lease.workspace.changes", "", err, "lease", r.PathValue("id"), "workspace", r.PathValue("ws"), "part", part)
	switch {
	case err != nil && tw.n == 0:
		s.writeError(w, r, err)
	case err != nil:
		s.log.Warn("workspace: changes cut off", "lease", r.PathValue("id"), "error", err.Error())
		panic(http.ErrAbortHandler)
	case tw.n == 0 && req.Files != nil:
		_, _ = tw.Write(make([]byte, 1024)) // an empty tar stream: its end
	case tw.n == 0:
		tw.start()
	}
}

// workspaceFiles returns the files of the workspace ws of the path's
// lease for the caller, through the workspace manager (paths relative to
// the workspace's directory, never out of it): its holder and operators
// open the lease; a board member, who may list the lease's files but not
// open it, lists them without a handle.
func (s *server) workspaceFiles(r *http.Request, ws string) (drivers.Files, error) {
	p := principalOf(r)
	h, err := s.sys.Leases().Open(r.Context(), p, r.PathValue("id"))
	if err == nil {
		return s.sys.Workspaces().Files(p, h, ws), nil
	}
	if !errors.Is(err, errcode.ErrDenied) || r.Method != http.MethodGet || wantsArchive(r) {
		return nil, err
	}
	recs, serr := s.sys.Workspaces().Show(r.Context(), p, r.PathValue("id"))
	if serr != nil {
		return nil, serr
	}
	for _, rec := range recs {
		if rec.ID == ws {
			return s.sys.Workspaces().Files(p, nil, ws), nil
		}
	}
	return nil, fmt.Errorf("workspace %s of lease %s: %w", ws, r.PathValue("id"), errcode.ErrNotFound)
}

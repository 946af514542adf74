package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/tarsafe"
	"github.com/berthdev/berth/workspace"
)

// taskWorkspace returns the workspace the task of envctl run runs in: the
// one prepared from wsu's source (the key is --workspace W, or a fresh
// run-… key), or, in a held lease without a source, the lease's one live
// workspace (nil when it has none; several are an error only with
// --collect, which must know which).
func taskWorkspace(ctx context.Context, g *globals, sys *system, h *lease.Handle, req lease.AcquireRequest,
	wsu *wsUse, progress func(string, ...any)) (*workspace.Workspace, error) {
	if wsu != nil && wsu.src != nil {
		key := req.Workspace
		if key == "" {
			id, err := newID("run")
			if err != nil {
				return nil, err
			}
			key = strings.ReplaceAll(id[:16], "_", "-")
		}
		progress("preparing workspace %s from %s %s", key, wsu.src.Kind, sourceText(*wsu.src))
		ws, err := sys.Workspaces().Prepare(ctx, g.as, h, workspace.PrepareRequest{Company: req.Company, Project: req.Project,
			Key: key, Source: *wsu.src})
		if err != nil {
			return nil, fmt.Errorf("prepare workspace %s: %w", key, err)
		}
		progress("workspace %s (%s) ready in %s at %s", ws.Key, ws.ID, ws.Dir, checkpointText(ws.Checkpoint))
		return ws, nil
	}
	collect := wsu != nil && wsu.collect != ""
	recs, err := sys.Workspaces().Show(ctx, g.as, h.ID())
	if err != nil {
		return nil, fmt.Errorf("the workspaces of lease %s: %w", h.ID(), err)
	}
	var live []*workspace.Workspace
	for _, w := range recs {
		if w.State != workspace.StateEnded {
			live = append(live, w)
		}
	}
	switch {
	case len(live) == 1:
		ws := live[0]
		progress("task runs in workspace %s (%s), %s", ws.Key, ws.ID, ws.Dir)
		return ws, nil
	case len(live) == 0 && collect:
		return nil, fmt.Errorf("lease %s holds no live workspace to collect: prepare one with 'envctl run ENV ... --workspace-dir DIR --hold' (or --workspace-git)", h.ID())
	case len(live) > 1 && collect:
		return nil, fmt.Errorf("lease %s holds %d live workspaces: --collect cannot tell which; collect with 'envctl workspace get %s --workspace ID'", h.ID(), len(live), h.ID())
	case len(live) > 1:
		progress("lease %s holds %d live workspaces: the task runs in its working directory", h.ID(), len(live))
	}
	return nil, nil
}

// collectWorkspace collects what changed in ws into the directory dest
// (tarsafe.Extract: nothing outside it) and, for a Git workspace, the
// agent's commits and uncommitted diff into dest.bundle and dest.diff
// beside it (written only when not empty), and returns the receipt.
func collectWorkspace(ctx context.Context, g *globals, sys *system, h *lease.Handle, ws *workspace.Workspace,
	dest string, progress func(string, ...any)) (*workspace.Receipt, error) {
	if ws == nil {
		return nil, errors.New("no workspace to collect")
	}
	dest = filepath.Clean(dest)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var bundle, diff bytes.Buffer
	req := workspace.CollectRequest{Workspace: ws.ID}
	if ws.Source.Kind == workspace.SourceGit {
		req.Bundle, req.Diff = &bundle, &diff
	}
	var r *workspace.Receipt
	err = extractFrom(root, func(w io.Writer) error {
		req.Files = w
		var err error
		r, err = sys.Workspaces().Collect(ctx, g.as, h, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	written := []string{dest}
	for _, f := range []struct {
		ext string
		b   *bytes.Buffer
	}{{".bundle", &bundle}, {".diff", &diff}} {
		if f.b.Len() == 0 {
			continue
		}
		if err := os.WriteFile(dest+f.ext, f.b.Bytes(), 0o644); err != nil {
			return nil, err
		}
		written = append(written, dest+f.ext)
	}
	progress("workspace %s collected: %d changed, %d deleted since %s, into %s", ws.Key, len(r.Changed), len(r.Deleted),
		checkpointText(r.Base), strings.Join(written, ", "))
	return r, nil
}

// extractFrom unpacks into root, with berth's safe extractor, the tar
// stream that produce writes. The sandbox writes into a pipe and the
// extractor reads it: a refused entry stops both, and the error is the
// one that failed first (the extractor's names the entry it refused).
func extractFrom(root *os.Root, produce func(io.Writer) error) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := tarsafe.Extract(pr, root, tarsafe.Options{})
		if err == nil {
			// The zero blocks after the archive's end (bounded: the
			// sandbox's to pad).
			_, err = io.Copy(io.Discard, io.LimitReader(pr, 1<<20))
		}
		pr.CloseWithError(err)
		done <- err
	}()
	gerr := produce(pw)
	pw.CloseWithError(gerr)
	xerr := <-done
	if gerr != nil && (xerr == nil || errors.Is(xerr, gerr)) {
		return gerr
	}
	return xerr
}

// sourceText is a workspace source for a person.
func sourceText(s workspace.Source) string {
	t := s.Location
	if t == "" {
		t = "-"
	}
	if s.Ref != "" {
		t += " @ " + s.Ref
	}
	return t
}

// checkpointText is a checkpoint for a person.
func checkpointText(c workspace.Checkpoint) string {
	var parts []string
	if c.Commit != "" {
		parts = append(parts, "commit "+c.Commit)
	}
	if c.Tree != "" {
		parts = append(parts, "tree "+c.Tree)
	}
	if len(parts) == 0 {
		return "no checkpoint"
	}
	return strings.Join(parts, ", ")
}

// workspaceFiles returns where workspace ls|get|put act, and its name for
// a person: inside the workspace wsID (or the lease's one live workspace
// when wsID is "" and the lease has exactly one), or, with workdir or
// without a workspace, the lease's working directory (lease.Manager.Files).
func workspaceFiles(ctx context.Context, g *globals, sys *system, sub, id, wsID string, workdir bool) (drivers.Files, string, error) {
	var ws *workspace.Workspace
	if !workdir {
		recs, err := sys.Workspaces().Show(ctx, g.as, id)
		if err != nil {
			return nil, "", err
		}
		for _, w := range recs {
			switch {
			case wsID != "" && w.ID == wsID:
				ws = w
			case wsID == "" && w.State != workspace.StateEnded:
				if ws != nil { // several: the working directory, unless named
					return nil, "", fmt.Errorf("lease %s holds several live workspaces (%s, %s): name one with --workspace ID, or --workdir", id, ws.ID, w.ID)
				}
				ws = w
			}
		}
		if wsID != "" && ws == nil {
			return nil, "", &errcode.Error{Code: errcode.NotFound, Op: "workspace " + sub, Target: "lease " + id, Field: "workspace",
				Message: fmt.Sprintf("Could not find workspace %s in lease %s: 'envctl workspace show %s' lists its workspaces.", wsID, id, id),
				Err:     fmt.Errorf("workspace %s of lease %s: %w", wsID, id, errcode.ErrNotFound)}
		}
	}
	if ws == nil {
		f, err := sys.Leases().Files(ctx, g.as, id)
		return f, "lease " + id, err
	}
	where := fmt.Sprintf("workspace %s (%s) of lease %s", ws.Key, ws.ID, id)
	h, err := sys.Leases().Open(ctx, g.as, id)
	if err != nil {
		if sub == "ls" && errors.Is(err, errcode.ErrDenied) {
			// A board member lists but may not open the lease.
			return sys.Workspaces().Files(g.as, nil, ws.ID), where, nil
		}
		return nil, "", err
	}
	return sys.Workspaces().Files(g.as, h, ws.ID), where, nil
}

// showEntry is one workspace of 'workspace show --json': its record and
// what changed since its checkpoint (a ready one, when the lease could be
// opened).
type showEntry struct {
	Workspace *workspace.Workspace `json:"workspace"`
	Changes   *workspace.Receipt   `json:"changes,omitempty"`
	// ChangesError says why Changes is missing for a ready workspace.
	ChangesError string `json:"changesError,omitempty"`
}

// workspaceShow prints the workspaces of the lease id.
func workspaceShow(ctx context.Context, g *globals, id string) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	recs, err := sys.Workspaces().Show(ctx, g.as, id)
	if err != nil {
		return fmt.Errorf("workspace show %s: %w", id, err)
	}
	if len(recs) == 0 {
		// Show lists what --as may read: a lease it may not read is not
		// found, as everywhere.
		if _, err := sys.Leases().Get(ctx, g.as, id); err != nil {
			return fmt.Errorf("workspace show %s: %w", id, err)
		}
	}
	var h *lease.Handle
	var herr error
	out := make([]showEntry, 0, len(recs))
	for _, w := range recs {
		e := showEntry{Workspace: w}
		if w.State == workspace.StateReady {
			if h == nil && herr == nil {
				h, herr = sys.Leases().Open(ctx, g.as, id)
			}
			if herr != nil {
				e.ChangesError = errcode.MessageOf(herr)
			} else if e.Changes, err = sys.Workspaces().Collect(ctx, g.as, h, workspace.CollectRequest{Workspace: w.ID}); err != nil {
				e.ChangesError = errcode.MessageOf(err)
			}
		}
		out = append(out, e)
	}
	if g.json {
		return writeJSON(g.stdout, out)
	}
	if len(out) == 0 {
		fmt.Fprintf(g.stdout, "lease %s holds no workspace\n", id)
	}
	for i, e := range out {
		w := e.Workspace
		if i > 0 {
			fmt.Fprintln(g.stdout)
		}
		fmt.Fprintf(g.stdout, "workspace %s (key %s)\n", w.ID, w.Key)
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 1, ' ', 0)
		fmt.Fprintf(tw, "  owner:\tcompany %s, project %s\n", w.Company, dash(w.Project))
		fmt.Fprintf(tw, "  source:\t%s %s\n", w.Source.Kind, sourceText(w.Source))
		fmt.Fprintf(tw, "  directory:\t%s\n", w.Dir)
		fmt.Fprintf(tw, "  state:\t%s\n", w.State)
		fmt.Fprintf(tw, "  checkpoint:\t%s\n", checkpointText(w.Checkpoint))
		if w.End != nil {
			fmt.Fprintf(tw, "  ended:\t%s, %s, %s", w.End.Reason, w.End.Outcome, w.End.At.Format(time.RFC3339))
			if w.End.Detail != "" {
				fmt.Fprintf(tw, " (%s)", w.End.Detail)
			}
			fmt.Fprintln(tw)
		}
		switch {
		case e.Changes != nil:
			fmt.Fprintf(tw, "  head:\t%s\n", checkpointText(e.Changes.Head))
			fmt.Fprintf(tw, "  changed:\t%s\n", listText(e.Changes.Changed))
			fmt.Fprintf(tw, "  deleted:\t%s\n", listText(e.Changes.Deleted))
		case e.ChangesError != "":
			fmt.Fprintf(tw, "  changes:\tnot read: %s\n", e.ChangesError)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// listText is a list of paths for a person ("-" for none).
func listText(paths []string) string {
	if len(paths) == 0 {
		return "-"
	}
	return strings.Join(paths, " ")
}

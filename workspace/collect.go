package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/lease"
)

// CollectRequest says which workspace to collect and where its changes go.
type CollectRequest struct {
	// Workspace is the record's id (Workspace.ID). Required.
	Workspace string
	// Files, if not nil, receives a tar stream of the entries added or
	// changed since the checkpoint, named relative to the workspace's
	// directory, as the sandbox holds them (regular files, directories
	// and symbolic links only; setuid, setgid and sticky bits cleared):
	// the sandbox's to forge, so unpack it with tarsafe.Extract. nil: only
	// the receipt.
	Files io.Writer
	// Bundle, if not nil, receives for a Git workspace whose repository
	// went into the sandbox the agent's commits since the checkpoint's
	// commit, as a Git bundle with that commit as its prerequisite (fetch
	// it into the source repository: git fetch BUNDLE HEAD); nothing
	// when there are none. Diff, if not nil, receives the uncommitted
	// changes against HEAD, untracked files included, as a binary git
	// diff. Each is at most 256 MiB.
	Bundle, Diff io.Writer
}

// Receipt is what a Collect returned: the checkpoint it compared with,
// the tree it found, and the paths that differ. berth never pushes
// anything anywhere: the host decides what to do with them.
type Receipt struct {
	Workspace string `json:"workspace"`
	Lease     string `json:"lease"`
	// Base is the workspace's checkpoint; Head the tree as collected and,
	// for a Git workspace whose repository is in the sandbox, its HEAD
	// commit (else no commit: the files alone name none).
	Base Checkpoint `json:"base"`
	Head Checkpoint `json:"head"`
	// Changed lists the paths added or changed (their content, type,
	// permission bits or link target), Deleted those gone, each sorted.
	Changed []string  `json:"changed,omitempty"`
	Deleted []string  `json:"deleted,omitempty"`
	At      time.Time `json:"at"`
}

// maxBase bounds the base manifest read back from the sandbox.
const maxBase = maxFacts

// Collect returns what changed in the workspace req.Workspace since its
// checkpoint: the receipt, and the changed entries as a tar stream to
// req.Files. The base it compares with is the manifest its prepare left
// beside the directory, read back and checked against the checkpoint's
// tree hash (a manifest the task changed is refused, reason
// tree_mismatch). h must be the workspace's lease; p needs
// authz.ActionLease on it.
func (m *Manager) Collect(ctx context.Context, p authz.Principal, h *lease.Handle, req CollectRequest) (*Receipt, error) {
	w, err := m.store.GetWorkspace(ctx, req.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: collect %s: %w", req.Workspace, err)
	}
	if err := m.authorize(ctx, p, authz.ActionLease, w.Lease, w.Company); err != nil {
		if m.authorize(ctx, p, authz.ActionRead, w.Lease, w.Company) != nil {
			return nil, fmt.Errorf("workspace %s: %w", req.Workspace, errcode.ErrNotFound)
		}
		return nil, err
	}
	if h.ID() != w.Lease {
		return nil, errOwner(h.ID(), fmt.Sprintf("workspace %s lives in lease %s", w.ID, w.Lease))
	}
	if w.State != StateReady {
		return nil, fmt.Errorf("workspace %s is %s; only a ready workspace is collected: %w", w.ID, w.State, errcode.ErrConflict)
	}
	fs, err := leasehook.Files(h)
	if err != nil {
		return nil, fmt.Errorf("workspace: collect %s: %w", w.ID, err)
	}
	now, _, err := m.facts(ctx, h, w.rel())
	if err != nil {
		return nil, err
	}
	now = w.files(now)
	base, err := m.base(ctx, fs, w)
	if err != nil {
		return nil, err
	}
	r := &Receipt{Workspace: w.ID, Lease: w.Lease, Base: w.Checkpoint, Head: Checkpoint{Tree: hashStream(now.stream())}, At: m.now().UTC()}
	old := make(map[string]entry, len(base))
	for _, e := range base {
		old[e.path] = e
	}
	changed := map[string]bool{}
	for _, e := range now {
		if o, ok := old[e.path]; !ok || !o.sameContent(e) {
			r.Changed = append(r.Changed, e.path)
			changed[e.path] = true
		}
		delete(old, e.path)
	}
	for _, e := range base {
		if _, gone := old[e.path]; gone {
			r.Deleted = append(r.Deleted, e.path)
		}
	}
	if req.Files != nil {
		var err error
		if len(r.Changed) <= fewChanges {
			err = copyEach(ctx, fs, w, now, r.Changed, req.Files)
		} else {
			err = copyChanged(ctx, fs, w, changed, req.Files)
		}
		if err != nil {
			return nil, err
		}
	}
	if w.Source.Kind == SourceGit && w.Checkpoint.Commit != "" && m.hasGit(ctx, h) {
		if err := collectGit(ctx, h, w, r, req); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// base reads back and checks the base manifest of w.
func (m *Manager) base(ctx context.Context, fs drivers.Files, w *Workspace) (manifest, error) {
	var buf bytes.Buffer
	if err := fs.GetArchive(ctx, ".berth/ws/"+baseName(w.Key, w.Dir), &limited{w: &buf, n: maxBase + 64<<10}); err != nil {
		return nil, fmt.Errorf("workspace %s: reading its base manifest: %w", w.ID, err)
	}
	tr := tar.NewReader(&buf)
	var data []byte
	if _, err := tr.Next(); err == nil {
		data, err = io.ReadAll(io.LimitReader(tr, maxBase))
		if err != nil {
			return nil, fmt.Errorf("workspace %s: reading its base manifest: %w", w.ID, err)
		}
	}
	if hashStream(data) != w.Checkpoint.Tree {
		return nil, &errcode.Error{Code: errcode.Conflict, Reason: "tree_mismatch", Op: "collect workspace", Target: "workspace " + w.Key,
			Message: fmt.Sprintf("The record of workspace %s's checkpoint in the sandbox was changed: prepare the workspace again.", w.Key),
			Err:     fmt.Errorf("workspace %s: the base manifest does not hash to %s", w.ID, w.Checkpoint.Tree)}
	}
	return parseStream(data)
}

// fewChanges is the most changed entries Collect gets one by one; past
// it, it reads the whole directory's archive once and keeps the changed
// entries.
const fewChanges = 64

// copyEach writes the changed entries of w's directory to out as one tar
// stream, getting each regular file and link by itself (a directory's
// header is written from the manifest): a small change moves little.
func copyEach(ctx context.Context, fs drivers.Files, w *Workspace, now manifest, paths []string, out io.Writer) error {
	byPath := make(map[string]entry, len(paths))
	for _, e := range now {
		byPath[e.path] = e
	}
	tw := tar.NewWriter(out)
	for _, p := range paths {
		e := byPath[p]
		if e.typ == "d" {
			perm, _ := strconv.ParseInt(e.perm, 8, 64)
			if err := tw.WriteHeader(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir, Mode: perm & 0o777}); err != nil {
				return err
			}
			continue
		}
		if e.typ != "f" && e.typ != "l" {
			continue
		}
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			tr := tar.NewReader(pr)
			err := func() error {
				hdr, err := tr.Next()
				if err != nil {
					return err
				}
				if want := map[string]byte{"f": tar.TypeReg, "l": tar.TypeSymlink}[e.typ]; hdr.Typeflag != want {
					return fmt.Errorf("the entry %q changed type while it was collected", p)
				}
				hdr.Name, hdr.Typeflag, hdr.Mode = p, map[string]byte{"f": tar.TypeReg, "l": tar.TypeSymlink}[e.typ], hdr.Mode&0o777
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				_, err = io.Copy(tw, tr)
				return err
			}()
			if err == nil {
				_, _ = io.Copy(io.Discard, pr)
			}
			pr.CloseWithError(cmpErr(err))
			done <- err
		}()
		err := fs.GetArchive(ctx, path.Join(w.rel(), p), pw)
		pw.CloseWithError(err)
		if cerr := <-done; err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("workspace %s: collecting %q: %w", w.ID, p, err)
		}
	}
	return tw.Close()
}

// copyChanged copies the entries of w's directory named in changed from
// the sandbox's archive to out, as one tar stream.
func copyChanged(ctx context.Context, fs drivers.Files, w *Workspace, changed map[string]bool, out io.Writer) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		tr, tw := tar.NewReader(pr), tar.NewWriter(out)
		err := func() error {
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					return tw.Close()
				}
				if err != nil {
					return err
				}
				if !changed[strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")] {
					continue
				}
				switch hdr.Typeflag {
				case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
				default:
					continue // no hard link, device or fifo: the facts list none as changed content
				}
				hdr.Mode &= 0o777 // no setuid, setgid or sticky bit
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				if _, err := io.Copy(tw, tr); err != nil {
					return err
				}
			}
		}()
		if err == nil {
			_, _ = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(cmpErr(err))
		done <- err
	}()
	err := fs.GetArchive(ctx, w.rel(), pw)
	pw.CloseWithError(err)
	if cerr := <-done; err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("workspace %s: collecting its changed files: %w", w.ID, err)
	}
	return nil
}

func cmpErr(err error) error {
	if err == nil {
		return errors.New("collect ended")
	}
	return err
}

// limited writes at most n bytes to w, then fails.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(b []byte) (int, error) {
	if len(b) > l.n {
		return 0, errors.New("workspace: the base manifest is too large")
	}
	l.n -= len(b)
	return l.w.Write(b)
}

// Show returns the workspace records of the lease leaseID that p may read
// (authz.ActionRead on the lease), live and ended, oldest first.
func (m *Manager) Show(ctx context.Context, p authz.Principal, leaseID string) ([]*Workspace, error) {
	ws, err := m.store.ListWorkspaces(ctx, workspacehook.Filter{Lease: leaseID})
	if err != nil {
		return nil, fmt.Errorf("workspace: show lease %s: %w", leaseID, err)
	}
	out := []*Workspace{}
	for _, w := range ws {
		if m.authorize(ctx, p, authz.ActionRead, w.Lease, w.Company) == nil {
			out = append(out, w)
		}
	}
	return out, nil
}

// Find returns the live workspace of an owner's key (company, project,
// key: exactly that owner, never another's), so that a next turn finds
// the lease that holds it (Workspace.Lease), or an error wrapping
// errcode.ErrNotFound, also when p may not read that lease
// (authz.ActionRead).
func (m *Manager) Find(ctx context.Context, p authz.Principal, company, project, key string) (*Workspace, error) {
	w, err := m.store.FindWorkspace(ctx, company, project, key)
	if err == nil && m.authorize(ctx, p, authz.ActionRead, w.Lease, w.Company) != nil {
		err = errcode.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("workspace: find %s: %w", key, err)
	}
	return w, nil
}

// leaseEnded ends the live records of l unless l still holds its sandbox.
func (m *Manager) leaseEnded(ctx context.Context, l *lease.Lease) {
	if leaseLive(l) {
		return
	}
	ws, err := m.store.ListWorkspaces(ctx, workspacehook.Filter{Lease: l.ID})
	if err != nil {
		m.log.Warn("workspace: the records of an ended lease", "lease", l.ID, "err", err)
		return
	}
	for _, w := range ws {
		if w.State != StateEnded {
			m.endWithLease(ctx, w, l)
		}
	}
}

// endWithLease ends w, whose lease l has ended (nil: not found).
func (m *Manager) endWithLease(ctx context.Context, w *Workspace, l *lease.Lease) {
	reason, outcome, detail := EndReleased, OutcomeClean, "its lease was released; its files went with the sandbox"
	host := false
	if l != nil && m.drivers != nil {
		if d, err := m.drivers.Lookup(l.Provider); err == nil {
			host = d.Capabilities().Kind == drivers.KindHost
		}
	}
	switch {
	case l == nil:
		outcome, detail = OutcomeIndeterminate, "its lease record is gone"
	case l.Status == lease.StatusPendingCleanup || l.Cleanup != "confirmed":
		outcome, detail = OutcomeIndeterminate, "its lease ended without proof that its sandbox is gone ("+string(l.Status)+")"
	case host:
		detail = "its lease was released; its directory stays on the host target under its key, checked by its checkpoint before a reuse"
	}
	if w.State == StatePreparing {
		reason, outcome = EndSwept, OutcomeIndeterminate
		detail = "it was still preparing when its lease ended (a crash during the prepare); its files may be partly in place"
	}
	m.end(ctx, w, reason, outcome, detail)
}

// sweep ends the records whose lease no longer lives.
func (m *Manager) sweep(ctx context.Context, p authz.Principal) (int, error) {
	if err := m.authz.Authorize(ctx, p, authz.ActionSweep, authz.Resource{Kind: authz.ResourceKindLease}); err != nil {
		return 0, fmt.Errorf("workspace: sweep: %w", err)
	}
	n := 0
	for _, s := range []State{StatePreparing, StateReady} {
		ws, err := m.store.ListWorkspaces(ctx, workspacehook.Filter{State: string(s)})
		if err != nil {
			return n, fmt.Errorf("workspace: sweep: %w", err)
		}
		for _, w := range ws {
			l, err := m.leases.GetLease(ctx, w.Lease)
			switch {
			case errors.Is(err, errcode.ErrNotFound):
				l = nil
			case err != nil:
				return n, fmt.Errorf("workspace: sweep: lease %s: %w", w.Lease, err)
			case leaseLive(l):
				continue
			}
			m.endWithLease(ctx, w, l)
			n++
		}
	}
	return n, nil
}

// maxGitOut bounds a bundle or a diff read from the sandbox.
const maxGitOut = 256 << 20

// collectGit reads the HEAD of w's repository into r.Head.Commit and
// writes the agent's commits and uncommitted diff to req's writers. A
// workspace prepared without its repository (the target had no git then)
// has no .git: r.Head.Commit stays empty.
func collectGit(ctx context.Context, h *lease.Handle, w *Workspace, r *Receipt, req CollectRequest) error {
	out, err := sandboxGit(ctx, h, w, 1<<10, "if [ -d .git ]; then git rev-parse HEAD; fi")
	if err != nil {
		return err
	}
	head := strings.TrimSpace(string(out))
	r.Head.Commit = head
	if head == "" {
		return nil
	}
	if req.Bundle != nil && head != w.Checkpoint.Commit {
		b, err := sandboxGit(ctx, h, w, maxGitOut, `t=$(mktemp) && git bundle create -q "$t" "$2..HEAD" && cat "$t"; rc=$?; rm -f "$t"; exit $rc`, w.Checkpoint.Commit)
		if err != nil {
			return err
		}
		if _, err := req.Bundle.Write(b); err != nil {
			return err
		}
	}
	if req.Diff != nil {
		d, err := sandboxGit(ctx, h, w, maxGitOut, `t=$(mktemp) && cp .git/index "$t" && GIT_INDEX_FILE="$t" git add -A && GIT_INDEX_FILE="$t" git diff --cached --binary HEAD; rc=$?; rm -f "$t"; exit $rc`)
		if err != nil {
			return err
		}
		if _, err := req.Diff.Write(d); err != nil {
			return err
		}
	}
	return nil
}

package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/internal/wsscript"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/tarsafe"
)

func init() {
	workspacehook.New = func(src workspacehook.Sources) any { return newManager(src) }
	workspacehook.LeaseEnded = func(mgr any, ctx context.Context, l any) { mgr.(*Manager).leaseEnded(ctx, l.(*lease.Lease)) }
	workspacehook.Sweep = func(mgr any, ctx context.Context, p authz.Principal) (int, error) {
		return mgr.(*Manager).sweep(ctx, p)
	}
	workspacehook.Seal = func(s any) any { return sealedStore{s.(records)} }
	workspacehook.Unseal = func(s any) any { return unseal(s) }
	workspacehook.NewMemoryStore = func() any { return Store(sealedStore{newMemoryStore()}) }
	workspacehook.Validate = func(w any) error { return w.(*Workspace).validate() }
	workspacehook.Follows = func(w, prev any) error { return w.(*Workspace).follows(prev.(*Workspace)) }
	workspacehook.TreeHash = treeHash
}

// Manager prepares workspaces in leases' sandboxes and collects what the
// agent changed, keeping their write-ahead records (System.Workspaces).
// Each method acts for a principal: Prepare and Collect need
// authz.ActionLease on the lease (its holder), Show authz.ActionRead. A
// lease's release ends its workspace records with a receipt, and
// System.Sweep ends those whose lease ended otherwise (a crash).
type Manager struct {
	store   records
	leases  lease.Store
	lm      *lease.Manager // Files with no handle
	drivers *drivers.Registry
	authz   authz.Authorizer
	log     *slog.Logger
	now     func() time.Time
}

func newManager(src workspacehook.Sources) *Manager {
	m := &Manager{store: unseal(src.Store), leases: src.Leases.(lease.Store), drivers: src.Drivers,
		authz: src.Authorizer, log: src.Logger, now: time.Now}
	m.lm, _ = src.LeaseManager.(*lease.Manager)
	if m.authz == nil {
		m.authz = authz.DefaultPolicy{}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// PrepareRequest says what to put into a lease's sandbox, for whom.
type PrepareRequest struct {
	// Company, Project and Key name the workspace's owner and the
	// owner's name for it. Company must be the lease's; Key is 1 to 128
	// of A-Z a-z 0-9 . _ -. Project may be empty.
	Company, Project, Key string
	// Source is what to put in: a directory on this host (Location, read
	// through tarsafe.Create: links go in as links, Exclude left out) or
	// an archive stream (Archive).
	Source Source
	// Archive is the tar stream of a SourceArchive, read to its end; its
	// entries are extracted in the sandbox without following a link, and
	// checked as PutArchive checks an upload (bounded; files,
	// directories and links with names that stay inside).
	Archive io.Reader
	// Exclude is what a SourceDir or SourceGit leaves out
	// (tarsafe.Options.Exclude); nil means tarsafe.DefaultExclude (of
	// which a Git source's own .git/config, written by berth without a
	// remote, still goes in).
	Exclude []string
	// Depth is how many commits of a Git source's history go in: 0 means
	// 1 (shallow), a negative value all of it.
	Depth int
}

// errOwner is the refusal of another owner's lease or workspace.
func errOwner(lease, what string) error {
	return &errcode.Error{Code: errcode.Denied, Reason: "workspace_owner", Op: "prepare workspace", Target: fmt.Sprintf("lease %s", lease),
		Message: fmt.Sprintf("The lease %s holds another owner's workspace: acquire a lease of your own for this workspace.", lease),
		Err:     fmt.Errorf("workspace: lease %s: %s: %w", lease, what, errcode.ErrDenied)}
}

// authorize decides a on the lease id of company for p.
func (m *Manager) authorize(ctx context.Context, p authz.Principal, a authz.Action, id, company string) error {
	return m.authz.Authorize(ctx, p, a, authz.Resource{Kind: authz.ResourceKindLease, ID: id, Company: company})
}

// Prepare puts req's source into a directory of its own under the
// sandbox's working directory of h's lease (<workdir>/.berth/ws/<key>-<owner>)
// and returns its record, ready at its checkpoint: the tree hash of what
// is there, computed in the sandbox (a script through Exec) and, for a
// directory source, checked equal to the host's (treeHash of the source,
// as tarsafe.Create walks it). The record is inserted preparing before
// anything is put in (write-ahead) and ends failed if the prepare fails.
//
// A workspace is its owner's: a lease of another company, or one that
// holds another company's or project's live workspace, is refused with
// reason workspace_owner (errcode.ErrDenied). When the owner's key is
// live on this lease already, or its directory is there from an earlier
// lease of a host target, its directory is checked first: a tree equal to
// the one this source makes (a directory source) is kept as it is, and
// anything else is removed and prepared again, never handed over (the
// old record ends reprepared). p needs authz.ActionLease on the lease,
// and for a directory or Git source, which berth reads with the host's
// own identity, authz.ActionReadHost (operators under
// authz.DefaultPolicy; Resource.Name is the source's location).
func (m *Manager) Prepare(ctx context.Context, p authz.Principal, h *lease.Handle, req PrepareRequest) (*Workspace, error) {
	l := h.Lease()
	if err := m.authorize(ctx, p, authz.ActionLease, l.ID, l.Company); err != nil {
		return nil, err
	}
	if req.Company != l.Company {
		return nil, errOwner(l.ID, fmt.Sprintf("the lease is company %q's, not %q's", l.Company, req.Company))
	}
	if req.Source.Kind == SourceDir || req.Source.Kind == SourceGit {
		// berth reads it with the host's own identity.
		if err := m.authz.Authorize(ctx, p, authz.ActionReadHost, authz.Resource{Kind: authz.ResourceKindLease, ID: l.ID, Name: req.Source.Location, Company: l.Company}); err != nil {
			return nil, err
		}
	}
	if req.Source.Kind == SourceArchive && req.Archive == nil {
		return nil, fmt.Errorf("workspace: prepare %s: an archive source without its Archive stream: %w", req.Key, errcode.ErrInvalid)
	}
	now := m.now().UTC()
	w := &Workspace{ID: "ws-" + randomHex(8), Company: req.Company, Project: req.Project, Key: req.Key, Source: req.Source,
		Lease: l.ID, Dir: "/unknown", State: StatePreparing, CreatedAt: now, UpdatedAt: now, Revision: 1}
	if err := w.validate(); err != nil { // before anything is read or written
		return nil, err
	}
	live, err := m.store.ListWorkspaces(ctx, workspacehook.Filter{Lease: l.ID})
	if err != nil {
		return nil, fmt.Errorf("workspace: prepare %s: %w", req.Key, err)
	}
	var prev *Workspace
	for _, w := range live {
		if w.State == StateEnded {
			continue
		}
		if w.Company != req.Company || w.Project != req.Project {
			return nil, errOwner(l.ID, fmt.Sprintf("it holds workspace %s of another owner", w.ID))
		}
		if w.Key == req.Key {
			prev = w
		}
	}
	if prev == nil {
		// The owner's key live on another lease: that lease must have
		// ended (its record ends now), or the key is in use.
		other, err := m.store.FindWorkspace(ctx, req.Company, req.Project, req.Key)
		switch {
		case errors.Is(err, errcode.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("workspace: prepare %s: %w", req.Key, err)
		default:
			ol, lerr := m.leases.GetLease(ctx, other.Lease)
			switch {
			case errors.Is(lerr, errcode.ErrNotFound):
				ol = nil
			case lerr != nil:
				return nil, fmt.Errorf("workspace: prepare %s: lease %s: %w", req.Key, other.Lease, lerr)
			}
			if ol != nil && leaseLive(ol) {
				return nil, &errcode.Error{Code: errcode.Conflict, Reason: "workspace_in_use", Op: "prepare workspace", Target: "workspace " + req.Key,
					Message: fmt.Sprintf("The workspace %s is prepared in the live lease %s: use that lease, or release it first.", req.Key, other.Lease),
					Err:     fmt.Errorf("workspace %s: live in lease %s: %w", other.ID, other.Lease, errcode.ErrConflict)}
			}
			m.endWithLease(ctx, other, ol) // its lease ended without ending it (a crash)
		}
	}
	fs, err := leasehook.Files(h)
	if err != nil {
		return nil, fmt.Errorf("workspace: prepare %s in lease %s: %w", req.Key, l.ID, err)
	}
	wd, err := workdir(ctx, h)
	if err != nil {
		return nil, err
	}
	w.Dir = dirFor(wd, req.Company, req.Project, req.Key)
	if err := w.validate(); err != nil {
		return nil, err
	}
	// The source's own tree hash, when the host can compute it.
	var want string
	var src *os.Root
	srcDir, isGit := req.Source.Location, req.Source.Kind == SourceGit
	withRepo := false
	if isGit {
		withRepo = m.hasGit(ctx, h)
		dir, commit, err := gitCheckout(ctx, req)
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		srcDir, w.Checkpoint.Commit = dir, commit
		req.Exclude = gitExclude(req, withRepo)
	}
	if req.Source.Kind == SourceDir || isGit {
		if src, err = os.OpenRoot(srcDir); err != nil {
			return nil, &errcode.Error{Code: errcode.Invalid, Op: "prepare workspace", Target: "workspace " + req.Key, Field: "source",
				Message: fmt.Sprintf("Could not open the source directory %s: name a directory this host can read.", req.Source.Location), Err: err}
		}
		defer src.Close()
		if prev != nil { // else put hashes it while it goes in
			if want, err = sourceHash(src, req.Exclude, isGit); err != nil {
				return nil, fmt.Errorf("workspace: prepare %s: %w", req.Key, err)
			}
		}
	}
	if prev != nil {
		if want != "" && prev.Checkpoint.Tree == want && prev.Checkpoint.Commit == w.Checkpoint.Commit && prev.Source == req.Source {
			if got, _, err := m.facts(ctx, h, w.rel()); err == nil && hashStream(w.files(got).stream()) == want && m.headIs(ctx, h, prev, withRepo) {
				return prev, nil // the same tree (and HEAD), unchanged: reused
			}
		}
		m.end(ctx, prev, EndReprepared, OutcomeClean, "prepared again: its directory did not match the source's tree")
	}
	if err := m.store.InsertWorkspace(ctx, w); err != nil { // write-ahead
		return nil, fmt.Errorf("workspace: prepare %s: %w", req.Key, err)
	}
	if err := m.put(ctx, h, fs, w, req, src, want, withRepo); err != nil {
		m.end(ctx, w, EndFailed, OutcomeIndeterminate, "preparing it failed: "+errcode.MessageOf(err))
		return nil, err
	}
	return w, nil
}

// put does Prepare's work after the write-ahead record: an empty
// directory, the source in it, the facts, the base manifest, ready.
func (m *Manager) put(ctx context.Context, h *lease.Handle, fs drivers.Files, w *Workspace, req PrepareRequest, src *os.Root, want string, withRepo bool) error {
	rel := w.rel()
	// A directory an earlier lease of a host target left under this key
	// is kept when it holds exactly the source's tree (and HEAD, clean):
	// found by its checkpoint, nothing moves.
	if src != nil {
		if mf, _, err := m.facts(ctx, h, rel); err == nil {
			if want == "" {
				if want, err = sourceHash(src, req.Exclude, w.Source.Kind == SourceGit); err != nil {
					return fmt.Errorf("workspace %s: %w", w.ID, err)
				}
			}
			if hashStream(w.files(mf).stream()) == want && m.headIs(ctx, h, w, withRepo) {
				return m.ready(ctx, fs, w, w.files(mf).stream())
			}
		}
	}
	if _, err := m.run(ctx, h, "remove workspace", wsscript.Remove, rel, 0); err != nil {
		return err
	}
	if err := fs.PutArchive(ctx, ".", dirsArchive(".berth/", ".berth/ws/", rel+"/")); err != nil {
		return fmt.Errorf("workspace %s: making its directory: %w", w.ID, err)
	}
	switch req.Source.Kind {
	case SourceDir, SourceGit:
		// One walk of the source: the archive goes in and is hashed on
		// its way (the host's side of the check below).
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarsafe.Create(pw, src, tarsafe.Options{Exclude: req.Exclude})) }()
		hr, hw := io.Pipe()
		type hashed struct {
			m   manifest
			err error
		}
		done := make(chan hashed, 1)
		go func() {
			mf, err := manifestOfArchive(hr)
			if err == nil {
				_, _ = io.Copy(io.Discard, hr)
			}
			hr.CloseWithError(cmpErr(err))
			done <- hashed{mf, err}
		}()
		tee := io.TeeReader(pr, hw)
		err := fs.PutArchive(ctx, rel, tee)
		if err == nil {
			_, err = io.Copy(io.Discard, tee) // what the driver left of the stream, for the hash
		}
		hw.CloseWithError(err)
		pr.CloseWithError(errors.New("put ended"))
		src := <-done
		if err != nil {
			return fmt.Errorf("workspace %s: putting %s in: %w", w.ID, req.Source.Location, err)
		}
		if src.err != nil {
			return fmt.Errorf("workspace %s: hashing %s: %w", w.ID, req.Source.Location, src.err)
		}
		want = hashStream(w.files(src.m).stream())
	case SourceArchive:
		if err := putChecked(ctx, fs, rel, req.Archive); err != nil {
			return fmt.Errorf("workspace %s: putting the archive in: %w", w.ID, err)
		}
	}
	mf, _, err := m.facts(ctx, h, rel)
	if err != nil {
		return err
	}
	stream := w.files(mf).stream()
	tree := hashStream(stream)
	if want != "" && tree != want {
		return &errcode.Error{Code: errcode.Internal, Reason: "tree_mismatch", Op: "prepare workspace", Target: "workspace " + w.Key,
			Message: fmt.Sprintf("The files of workspace %s in the sandbox differ from the source directory: check that the target keeps file modes (its tar, its file system).", w.Key),
			Err:     fmt.Errorf("workspace %s: tree hash in the sandbox %s, of the source %s", w.ID, tree, want)}
	}
	return m.ready(ctx, fs, w, stream)
}

// ready writes the base manifest stream beside w's directory and records
// w ready at its tree hash.
func (m *Manager) ready(ctx context.Context, fs drivers.Files, w *Workspace, stream []byte) error {
	if err := fs.PutArchive(ctx, ".berth/ws", singleFile(baseName(w.Key, w.Dir), stream)); err != nil {
		return fmt.Errorf("workspace %s: writing its base manifest: %w", w.ID, err)
	}
	w.Checkpoint.Tree = hashStream(stream)
	return m.update(ctx, w, StateReady, nil)
}

// files returns the part of a manifest of w's directory its tree hash is
// of: a Git workspace's working files, without .git.
func (w *Workspace) files(m manifest) manifest {
	if w.Source.Kind == SourceGit {
		return withoutGit(m)
	}
	return m
}

// rel is the workspace's directory relative to the working directory.
func (w *Workspace) rel() string { return ".berth/ws/" + path.Base(w.Dir) }

// baseName is the base manifest's file name beside the directory.
func baseName(_, dir string) string { return path.Base(dir) + ".base" }

// update moves w to state with end, one revision on.
func (m *Manager) update(ctx context.Context, w *Workspace, state State, end *End) error {
	n := w.clone()
	n.State, n.End, n.Revision, n.UpdatedAt = state, end, w.Revision+1, m.now().UTC()
	if err := m.store.UpdateWorkspace(ctx, n); err != nil {
		return fmt.Errorf("workspace %s: recording it %s: %w", w.ID, state, err)
	}
	*w = *n
	return nil
}

// end ends w with a receipt; a failure is logged (a sweep retries).
func (m *Manager) end(ctx context.Context, w *Workspace, r EndReason, o Outcome, detail string) {
	if err := m.update(context.WithoutCancel(ctx), w, StateEnded, &End{Reason: r, Outcome: o, Detail: detail, At: m.now().UTC()}); err != nil {
		m.log.Warn("workspace: ending a record", "workspace", w.ID, "err", err)
	}
}

// run runs script with arg as $1 and returns its stdout (at most limit
// bytes, 0: 1 MiB; more is an error).
func (m *Manager) run(ctx context.Context, h *lease.Handle, op, script, arg string, limit int64) ([]byte, error) {
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", script, "berth-ws", arg}, OutputLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("workspace: %s in lease %s: %w", op, h.ID(), err)
	}
	target := fmt.Sprintf("%q in lease %s", arg, h.ID())
	switch res.ExitCode {
	case 0:
		if res.Truncated {
			return nil, &errcode.Error{Code: errcode.Invalid, Op: op, Target: target,
				Message: fmt.Sprintf("The workspace %s holds too many files to list (over %d MiB of facts).", arg, limit>>20),
				Err:     errors.New("output truncated")}
		}
		return res.Stdout, nil
	case wsscript.ExitNotFound:
		return nil, fmt.Errorf("workspace: %s %s: %w", op, target, errcode.ErrNotFound)
	case wsscript.ExitLink:
		return nil, &errcode.Error{Code: errcode.Invalid, Reason: "unsafe_archive", Op: op, Target: target,
			Message: fmt.Sprintf("A symbolic link was planted on the workspace's path %s in the sandbox; it is not followed.", arg),
			Err:     errors.New("a symbolic link on the path")}
	case wsscript.ExitNewline:
		return nil, &errcode.Error{Code: errcode.Invalid, Op: op, Target: target,
			Message: fmt.Sprintf("A file name in the workspace %s holds a newline, which its tree hash cannot carry: rename it.", arg),
			Err:     errors.New("a name with a newline")}
	}
	return nil, &errcode.Error{Op: op, Target: target,
		Message: fmt.Sprintf("The sandbox could not %s (exit status %d): check that the target has sh, find, stat, sha256sum and readlink.", op, res.ExitCode),
		Err:     fmt.Errorf("exit status %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))}
}

// maxFacts bounds the facts of one tree: 64 MiB, some 300,000 entries of
// ordinary names, three times tarsafe's default entry limit.
const maxFacts = 64 << 20

// facts computes the manifest of the tree at rel in the sandbox.
func (m *Manager) facts(ctx context.Context, h *lease.Handle, rel string) (manifest, []byte, error) {
	out, err := m.run(ctx, h, "compute the tree hash", wsscript.Facts, rel, maxFacts)
	if err != nil {
		return nil, nil, err
	}
	mf, err := parseFacts(out)
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: %q in lease %s: %w", rel, h.ID(), err)
	}
	return mf, out, nil
}

// hasGit reports whether the sandbox has a git command.
func (m *Manager) hasGit(ctx context.Context, h *lease.Handle) bool {
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", wsscript.HasGit}})
	return err == nil && res.ExitCode == 0
}

// headIs reports whether w's repository in the sandbox is at its
// checkpoint's commit with a clean status (true when no repository went
// in).
func (m *Manager) headIs(ctx context.Context, h *lease.Handle, w *Workspace, withRepo bool) bool {
	if !withRepo || w.Checkpoint.Commit == "" {
		return true
	}
	out, err := sandboxGit(ctx, h, w, 1<<10, `test -z "$(git status --porcelain)" && git rev-parse HEAD`)
	return err == nil && strings.TrimSpace(string(out)) == w.Checkpoint.Commit
}

// workdir returns the sandbox's working directory (pwd).
func workdir(ctx context.Context, h *lease.Handle) (string, error) {
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"pwd"}})
	if err != nil {
		return "", fmt.Errorf("workspace: the working directory of lease %s: %w", h.ID(), err)
	}
	wd := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 || !path.IsAbs(wd) || path.Clean(wd) != wd {
		return "", fmt.Errorf("workspace: the working directory of lease %s: pwd said %q (exit status %d)", h.ID(), wd, res.ExitCode)
	}
	return wd, nil
}

// sourceHash is the tree hash of what tarsafe.Create puts in of src:
// the tree without the excluded entries (and without sockets, fifos and
// devices, which Create leaves out).
func sourceHash(src *os.Root, exclude []string, git bool) (string, error) {
	// Create's own walk decides what goes in: hash its archive.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarsafe.Create(pw, src, tarsafe.Options{Exclude: exclude})) }()
	mf, err := manifestOfArchive(pr)
	pr.CloseWithError(errors.New("hash ended"))
	if err != nil {
		return "", err
	}
	if git {
		mf = withoutGit(mf)
	}
	return hashStream(mf.stream()), nil
}

// dirsArchive is a tar stream of the directories names, mode 0700.
func dirsArchive(names ...string) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o700})
	}
	_ = tw.Close()
	return &b
}

// singleFile is a tar stream of one file, mode 0600.
func singleFile(name string, data []byte) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(data))})
	_, _ = tw.Write(data)
	_ = tw.Close()
	return &b
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// leaseLive reports whether l still holds its sandbox for a holder or a
// later reuse: starting, active, pooled, retained (kept), or released
// with its stopped sandbox resumable.
func leaseLive(l *lease.Lease) bool {
	switch l.Status {
	case lease.StatusStarting, lease.StatusActive, lease.StatusRetained, lease.StatusPooled:
		return true
	case lease.StatusReleased:
		return l.ReuseKey != ""
	}
	return false
}

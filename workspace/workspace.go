package workspace

import (
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/workspacehook"
)

// SourceKind is what a workspace is made from.
type SourceKind string

// The kinds of source.
const (
	// SourceDir is a directory on the host: Location is its path.
	SourceDir SourceKind = "dir"
	// SourceGit is a Git repository the host can read: Location is its
	// local path or URL (without credentials), Ref the ref brought in.
	SourceGit SourceKind = "git"
	// SourceArchive is an archive stream the host hands over: Location
	// optionally names it (a file name), for a person.
	SourceArchive SourceKind = "archive"
)

// Source identifies what a workspace was made from. It never holds a
// credential: Validate refuses a URL with a password, or with any user
// information over HTTP(S) (a token in the URL).
type Source struct {
	Kind     SourceKind `json:"kind"`
	Location string     `json:"location,omitempty"`
	// Ref is the Git ref asked for (a branch, tag or commit); empty for
	// other kinds, and for a Git source meaning its HEAD.
	Ref string `json:"ref,omitempty"`
}

// State is where a workspace is in its life: preparing, then ready, then
// ended (or ended straight from preparing).
type State string

// The states.
const (
	// StatePreparing: the record is written, its files may be partly in
	// the sandbox (write-ahead).
	StatePreparing State = "preparing"
	// StateReady: prepared; Checkpoint says at what.
	StateReady State = "ready"
	// StateEnded: over; End is the receipt. An ended record never changes.
	StateEnded State = "ended"
)

// Checkpoint is the identity a workspace was prepared at: the commit of a
// Git source, the tree hash of its files (the package doc), or both. A ready
// workspace has at least one.
type Checkpoint struct {
	// Commit is a Git commit's full hex name (40 or 64 digits).
	Commit string `json:"commit,omitempty"`
	// Tree is a tree hash ("sha256:" and 64 hex digits).
	Tree string `json:"tree,omitempty"`
}

// EndReason is why a workspace ended.
type EndReason string

// The reasons.
const (
	// EndReleased: its lease was released.
	EndReleased EndReason = "released"
	// EndReprepared: its checkpoint did not match what the directory held
	// (before reuse or after a restart), and it was prepared again as a
	// new record.
	EndReprepared EndReason = "reprepared"
	// EndSwept: a sweep found it preparing after a crash.
	EndSwept EndReason = "swept"
	// EndFailed: preparing it failed.
	EndFailed EndReason = "failed"
)

// Outcome is how an end went.
type Outcome string

// The outcomes.
const (
	// OutcomeClean: what the workspace put in its directory is gone or was
	// left by intent.
	OutcomeClean Outcome = "clean"
	// OutcomeFailed: removing it failed; Detail says how.
	OutcomeFailed Outcome = "failed"
	// OutcomeIndeterminate: whether anything is left is unknown (the
	// sandbox could not be reached, or a crash interrupted the prepare).
	OutcomeIndeterminate Outcome = "indeterminate"
)

// End is the receipt of an ended workspace.
type End struct {
	Reason  EndReason `json:"reason"`
	Outcome Outcome   `json:"outcome"`
	// Detail is a sentence for a person; empty when nothing needs saying.
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// Workspace is the write-ahead record of one workspace. Company and Key
// are required; Project may be empty, and then only an empty project
// finds it.
type Workspace struct {
	// ID names the record; the caller chooses it (unique per store).
	ID      string `json:"id"`
	Company string `json:"company"`
	Project string `json:"project,omitempty"`
	// Key is the owner's name for the workspace: 1 to 128 of A-Z a-z
	// 0-9 . _ -, not "." or "..".
	Key    string `json:"key"`
	Source Source `json:"source"`
	// Lease is the id of the lease whose sandbox holds it.
	Lease string `json:"lease"`
	// Dir is its directory in the target: absolute, clean, never "/";
	// <workdir>/.berth/ws/<key>-<owner> (see the package doc).
	Dir        string     `json:"dir"`
	Checkpoint Checkpoint `json:"checkpoint"`
	State      State      `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	// Revision is 1 on insert and one more on each update (compare and set).
	Revision int64 `json:"revision"`
	// End is the receipt; set exactly when State is StateEnded.
	End *End `json:"end,omitempty"`
}

// Store holds workspace records: a lease's workspaces, their owners,
// checkpoints and receipts. The records move with the workspace flow, so
// it is sealed, like store.RunnerStore: only berth's stores implement it
// (store.Memory's, store/sqlite's and store/postgres's
// Stores().Workspaces), workspace/workspacetest is their conformance
// suite, and a host passes the one its store constructor returns. A
// store of another author sets it from store.Memory() (workspace records
// then live in this process). Every store keeps at most one live record
// of an owner's key, across the replicas of a SQL store too.
type Store interface {
	workspaceStore()
}

// records is the store inside a Store.
type records = workspacehook.Records[*Workspace]

// sealedStore is the one implementation of Store.
type sealedStore struct{ records }

func (sealedStore) workspaceStore() {}

// unseal returns the records inside s.
func unseal(s any) records {
	if s, ok := s.(sealedStore); ok {
		return s.records
	}
	return nil
}

// validate reports, wrapping errcode.ErrInvalid, the first way w is not a
// record a store keeps (workspacehook.Validate).
func (w *Workspace) validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("workspace %q: %s: %w", w.ID, fmt.Sprintf(f, a...), errcode.ErrInvalid)
	}
	if w == nil {
		return fmt.Errorf("workspace: nil record: %w", errcode.ErrInvalid)
	}
	switch {
	case w.ID == "":
		return bad("missing id")
	case w.Company == "":
		return bad("missing company")
	case !validKey(w.Key):
		return bad("key %q is not 1 to 128 of A-Z a-z 0-9 . _ -", w.Key)
	case w.Lease == "":
		return bad("missing lease")
	case w.Dir == "" || !path.IsAbs(w.Dir) || path.Clean(w.Dir) != w.Dir || w.Dir == "/":
		return bad("directory %q is not an absolute, clean path other than /", w.Dir)
	case w.Revision < 1:
		return bad("revision %d, want 1 or more", w.Revision)
	}
	if err := w.Source.validate(); err != nil {
		return bad("%v", err)
	}
	if err := w.Checkpoint.validate(); err != nil {
		return bad("%v", err)
	}
	switch w.State {
	case StatePreparing:
	case StateReady:
		if w.Checkpoint == (Checkpoint{}) {
			return bad("ready without a checkpoint")
		}
	case StateEnded:
		if w.End == nil {
			return bad("ended without a receipt")
		}
		switch w.End.Reason {
		case EndReleased, EndReprepared, EndSwept, EndFailed:
		default:
			return bad("end reason %q is not released, reprepared, swept or failed", w.End.Reason)
		}
		switch w.End.Outcome {
		case OutcomeClean, OutcomeFailed, OutcomeIndeterminate:
		default:
			return bad("end outcome %q is not clean, failed or indeterminate", w.End.Outcome)
		}
	default:
		return bad("state %q is not preparing, ready or ended", w.State)
	}
	if w.State != StateEnded && w.End != nil {
		return bad("a receipt on a %s record", w.State)
	}
	return nil
}

// clone returns a deep copy of w.
func (w *Workspace) clone() *Workspace {
	c := *w
	if w.End != nil {
		e := *w.End
		c.End = &e
	}
	return &c
}

// follows reports, wrapping errcode.ErrConflict, why w cannot replace
// prev: a revision that does not follow, another owner, key or creation
// time, or a state that does not move forward (workspacehook.Follows).
func (w *Workspace) follows(prev *Workspace) error {
	switch {
	case w.Revision != prev.Revision+1:
		return fmt.Errorf("workspace %s: revision %d does not follow stored revision %d: %w", w.ID, w.Revision, prev.Revision, errcode.ErrConflict)
	case w.Company != prev.Company || w.Project != prev.Project || w.Key != prev.Key || !w.CreatedAt.Equal(prev.CreatedAt):
		return fmt.Errorf("workspace %s: its owner, key and creation time do not change: %w", w.ID, errcode.ErrConflict)
	case !slices.Contains(priorStates(w.State), prev.State):
		return fmt.Errorf("workspace %s: state %s cannot follow %s: %w", w.ID, w.State, prev.State, errcode.ErrConflict)
	}
	return nil
}

// priorStates returns the states a record may be in before an update
// puts it in s: preparing before preparing; preparing or ready before
// ready or ended. None leads anywhere from ended.
func priorStates(s State) []State {
	switch s {
	case StatePreparing:
		return []State{StatePreparing}
	case StateReady, StateEnded:
		return []State{StatePreparing, StateReady}
	}
	return nil
}

func validKey(k string) bool {
	if k == "" || len(k) > 128 || k == "." || k == ".." {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (s Source) validate() error {
	switch s.Kind {
	case SourceDir:
		if s.Location == "" {
			return fmt.Errorf("a directory source without its path")
		}
	case SourceGit:
		if s.Location == "" {
			return fmt.Errorf("a git source without its path or URL")
		}
		if u, err := url.Parse(s.Location); err == nil && u.User != nil {
			if _, pw := u.User.Password(); pw || u.Scheme == "http" || u.Scheme == "https" {
				return fmt.Errorf("the source URL holds a credential; name the repository without one")
			}
		}
	case SourceArchive:
	default:
		return fmt.Errorf("source kind %q is not dir, git or archive", s.Kind)
	}
	if s.Ref != "" && s.Kind != SourceGit {
		return fmt.Errorf("a ref on a %s source", s.Kind)
	}
	if strings.ContainsAny(s.Location+s.Ref, "\x00\n") {
		return fmt.Errorf("a NUL or newline in the source")
	}
	return nil
}

func (c Checkpoint) validate() error {
	if c.Commit != "" && (len(c.Commit) != 40 && len(c.Commit) != 64 || !isHex(c.Commit)) {
		return fmt.Errorf("checkpoint commit %q is not 40 or 64 hex digits", c.Commit)
	}
	if c.Tree != "" {
		h, ok := strings.CutPrefix(c.Tree, "sha256:")
		if !ok || len(h) != 64 || !isHex(h) {
			return fmt.Errorf("checkpoint tree %q is not sha256: and 64 hex digits", c.Tree)
		}
	}
	return nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

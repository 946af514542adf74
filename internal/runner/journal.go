package runner

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/berthdev/berth/internal/prpwire"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berthdev/berth/internal/prp"
)

// journalEntry is one line of the command journal. The last line for a
// command id is its state.
type journalEntry struct {
	Seq    uint64           `json:"seq"`
	ID     string           `json:"id,omitempty"`
	Digest string           `json:"digest,omitempty"`
	Kind   prp.CommandKind  `json:"kind,omitempty"`
	TaskID string           `json:"task_id,omitempty"`
	State  prp.JournalState `json:"state,omitempty"`
	PGID   int              `json:"pgid,omitempty"`
	// Secrets marks a task.start that needs secret values (which are
	// never journaled: only this flag is).
	Secrets bool        `json:"secrets,omitempty"`
	Since   uint64      `json:"since,omitempty"`
	Result  *prp.Result `json:"result,omitempty"`
	At      time.Time   `json:"at"`
}

// journal is the runner's command journal (PRP-4): an append-only file of
// lines in the state directory, fsynced after every state change, so
// that a command's state survives a runner kill -9 and a command never runs
// twice. Each line is "<mac> <entry as JSON>": mac is the base64url
// HMAC-SHA-256, under the session's state key (memory only), of the
// previous line's mac and the JSON, so that a line a task wrote, changed
// or removed in the state directory fails its check (issue 22).
type journal struct {
	mu      sync.Mutex
	f       *os.File
	key     []byte
	prevMAC []byte
	byID    map[string]journalEntry
	lastSeq uint64
}

// journalMAC is the mac of a journal line: HMAC(key, prev || body).
func journalMAC(key, prev, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(prev)
	m.Write(body)
	return m.Sum(nil)
}

const journalFile = "journal.jsonl"

// openJournal opens (or creates) the journal in dir and replays it. Every
// command found executing becomes indeterminate (journaled before
// openJournal returns); those entries are returned so that the runner can
// report them and clean up after them.
//
// A line that fails its check is never acted on: the command it names (if
// it names one) becomes indeterminate (never run again), and its seq still
// counts for the resume cursor, so that the controller does not send its
// command again.
func openJournal(dir string, key []byte) (*journal, []journalEntry, error) {
	path := filepath.Join(dir, journalFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("runner: journal %s: %w", path, err)
	}
	j := &journal{f: f, key: key, byID: map[string]journalEntry{}}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("runner: journal %s: %w", path, err)
	}
	// Only complete lines count: a torn last line (no newline) is cut.
	good := int64(bytes.LastIndexByte(b, '\n') + 1)
	tainted := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b[:good]))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		macText, body, _ := bytes.Cut(sc.Bytes(), []byte(" "))
		mac, derr := base64.RawURLEncoding.DecodeString(string(macText))
		var e journalEntry
		uerr := json.Unmarshal(body, &e)
		if derr != nil || uerr != nil || !hmac.Equal(mac, journalMAC(key, j.prevMAC, body)) {
			// Unauthenticated: what it names is never acted on.
			j.lastSeq = max(j.lastSeq, e.Seq)
			if e.ID != "" {
				tainted[e.ID] = true
			}
			j.prevMAC = mac
			continue
		}
		j.prevMAC = mac
		j.apply(e)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("runner: journal %s: truncate torn tail: %w", path, err)
	}
	var interrupted []journalEntry
	for id := range tainted {
		e := j.byID[id]
		if e.State.Terminal() && e.Result != nil && e.Result.Code == prpwire.CodeJournalUnauthenticated {
			continue // answered so by an earlier runner already
		}
		e.ID = id
		e.State = prp.JournalIndeterminate
		e.Result = &prp.Result{CommandID: id, Status: prp.ResultIndeterminate, Code: prpwire.CodeJournalUnauthenticated,
			Message: "a journal record of the command failed its authentication; the command is not run again"}
		e.At = time.Now().UTC()
		if err := j.appendLocked(e, true); err != nil {
			f.Close()
			return nil, nil, err
		}
		interrupted = append(interrupted, e)
	}
	for _, e := range j.byID {
		if tainted[e.ID] {
			continue
		}
		switch {
		case e.State == prp.JournalExecuting:
			e.State = prp.JournalIndeterminate
			e.Result = &prp.Result{CommandID: e.ID, Status: prp.ResultIndeterminate, Code: prpwire.CodeInterrupted,
				Message: "the runner restarted while the command was executing; it is not run again"}
		case e.State == prp.JournalReceived && e.Secrets:
			// Its secret values lived in the dead runner's memory only:
			// it never runs without them.
			e.State = prp.JournalDone
			e.Result = &prp.Result{CommandID: e.ID, Status: prp.ResultRejected, Code: prpwire.CodeSecretsMissing,
				Message: "the runner restarted after it received the command and before it started it; its secret values are gone and nothing ran"}
		case e.State == prp.JournalReceived:
			// Received and never started: its body lived in the dead
			// runner's queue and the resume cursor (the last seq
			// journaled) keeps the controller from sending it again, so
			// it is answered here, never left without a result.
			e.State = prp.JournalDone
			e.Result = &prp.Result{CommandID: e.ID, Status: prp.ResultRejected, Code: prpwire.CodeInterrupted,
				Message: "the runner restarted after it received the command and before it started it; nothing ran"}
		default:
			continue
		}
		e.At = time.Now().UTC()
		if err := j.appendLocked(e, true); err != nil {
			f.Close()
			return nil, nil, err
		}
		interrupted = append(interrupted, e)
	}
	return j, interrupted, nil
}

func (j *journal) apply(e journalEntry) {
	j.lastSeq = max(j.lastSeq, e.Seq)
	if e.ID == "" {
		return
	}
	if old, ok := j.byID[e.ID]; ok {
		// Later lines of one command keep what earlier lines said.
		if e.Digest == "" {
			e.Digest = old.Digest
		}
		if e.Kind == "" {
			e.Kind, e.TaskID = old.Kind, old.TaskID
		}
		if e.PGID == 0 {
			e.PGID, e.Since = old.PGID, old.Since
		}
		e.Secrets = e.Secrets || old.Secrets
		e.Seq = max(e.Seq, old.Seq)
	}
	j.byID[e.ID] = e
}

// record appends e and syncs it to disk before returning.
func (j *journal) record(e journalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(e, true)
}

// recordUnsynced appends e without a sync: for the received state, which
// the executing or done state, synced before anything happens, follows
// (one sync covers both lines), and for every line of a stop, which is
// idempotent. A line lost in a machine crash (a runner kill -9 loses
// none) leaves a command the controller sends again, since the runner's
// resume cursor no longer counts it.
func (j *journal) recordUnsynced(e journalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.appendLocked(e, false)
}

func (j *journal) appendLocked(e journalEntry, sync bool) error {
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("runner: journal: %w", err)
	}
	mac := journalMAC(j.key, j.prevMAC, b)
	line := make([]byte, 0, base64.RawURLEncoding.EncodedLen(len(mac))+len(b)+2)
	line = base64.RawURLEncoding.AppendEncode(line, mac)
	line = append(append(append(line, ' '), b...), '\n')
	if _, err := j.f.Write(line); err != nil {
		return fmt.Errorf("runner: journal %s: write: %w", j.f.Name(), err)
	}
	j.prevMAC = mac
	if sync {
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("runner: journal %s: sync: %w", j.f.Name(), err)
		}
	}
	j.apply(e)
	return nil
}

// lookup returns the journaled state of command id.
func (j *journal) lookup(id string) (journalEntry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.byID[id]
	return e, ok
}

// taskStart returns the first journaled (lowest seq) task.start command
// of task id: the one that may have run; later ones for the same task are
// refused as task_exists. (Map order must not pick a later one: a second
// command for the task would then find itself and run the task again.)
func (j *journal) taskStart(id string) (journalEntry, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var first journalEntry
	found := false
	for _, e := range j.byID {
		if e.Kind == prp.CommandTaskStart && e.TaskID == id && (!found || e.Seq < first.Seq) {
			first, found = e, true
		}
	}
	return first, found
}

// last returns the highest command seq journaled.
func (j *journal) last() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lastSeq
}

func (j *journal) close() error {
	if j == nil || j.f == nil {
		return nil
	}
	return errors.Join(j.f.Sync(), j.f.Close())
}

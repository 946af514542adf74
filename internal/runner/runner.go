package runner

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// Runner is the runner side of PRP: it connects to the controller, reports
// itself in a hello, executes the commands it is sent and streams events
// back, resuming across reconnects and restarts from its state directory.
// Create it with New and drive it with Run.
type Runner struct {
	base string
	dir  string
	opts Options
	log  *slog.Logger
	id   string

	j   *journal
	out *outbox

	mu          sync.Mutex
	cred        credentials
	haveCred    bool
	tasks       map[string]*task
	leaders     map[int]bool
	welcome     prpwire.Welcome
	welcomed    bool
	connected   bool
	orphanTimer *time.Timer
	interrupted []journalEntry
	// secrets holds the values of secrets frames until their task.start
	// is handled (memory only: never journaled, logged or emitted).
	secrets map[string]prpwire.SecretValues

	queue *cmdQueue
	// lastQueued is the highest command seq received on any connection of
	// this process (journaled or still queued); the hello's resume cursor,
	// so that a reconnect does not fetch queued commands again.
	lastQueued uint64
	// ackNudge wakes the writer after a command was journaled, so that it
	// acks the command even when no event is due.
	ackNudge chan struct{}
	// wsTransport dials the WebSocket connections: opts.HTTPClient's
	// transport with its writes coalesced (coalescingTransport).
	wsTransport http.RoundTripper
	// chld is closed and replaced at every SIGCHLD (watchChildren).
	chld chan struct{}
}

// New returns a Runner for the controller's PRP base URL (http, https, ws
// or wss; "exchange" and "connect" are resolved against it), or for
// "unix:" and the absolute path of a unix socket at which the controller
// serves its PRP endpoints at the root (a sandbox's runner ingress), keeping its
// journal and outbox in stateDir (created 0700); its token and state key it
// keeps in memory only. It connects nothing before Run, which first
// exchanges the ticket and then opens the journal and outbox with the
// session's state key (marking commands interrupted by a previous
// runner's death, or named by records that fail their check,
// indeterminate).
func New(controllerURL, stateDir string, opts *Options) (*Runner, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if controllerURL == "" {
		return nil, errors.New("runner: controller URL is empty")
	}
	base := controllerURL
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	switch {
	case strings.HasPrefix(controllerURL, unixScheme):
		path := strings.TrimPrefix(controllerURL, unixScheme)
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("runner: controller URL %q: want %s followed by an absolute socket path", controllerURL, unixScheme)
		}
		if opts != nil && opts.HTTPClient != nil {
			return nil, fmt.Errorf("runner: controller URL %q: a unix socket and Options.HTTPClient exclude each other", controllerURL)
		}
		o.HTTPClient = unixClient(path)
		base = "http://berth-controller/"
	case strings.HasPrefix(base, "ws://"):
		base = "http://" + strings.TrimPrefix(base, "ws://")
	case strings.HasPrefix(base, "wss://"):
		base = "https://" + strings.TrimPrefix(base, "wss://")
	case strings.HasPrefix(base, "http://"), strings.HasPrefix(base, "https://"):
	default:
		return nil, fmt.Errorf("runner: controller URL %q: want http, https, ws, wss or %s", controllerURL, unixScheme)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("runner: state directory %s: %w", stateDir, err)
	}
	r := &Runner{base: base, dir: stateDir, opts: o, log: o.Logger, tasks: map[string]*task{}, secrets: map[string]prpwire.SecretValues{}, leaders: map[int]bool{}, queue: newCmdQueue(), ackNudge: make(chan struct{}, 1), chld: make(chan struct{}),
		wsTransport: coalescingTransport(o.HTTPClient.Transport, coalesceDelay)}
	if r.id, err = runnerID(stateDir); err != nil {
		return nil, err
	}
	if o.Ticket == "" {
		return nil, errors.New("runner: no ticket was given (a runner restarted on its state directory needs a resume ticket)")
	}
	// Older runners kept their token here, where a task could read it.
	if err := os.Remove(filepath.Join(stateDir, legacyCredFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("runner: remove the stored token of an older runner: %w", err)
	}
	if o.Subreaper {
		if err := becomeSubreaper(); err != nil {
			r.log.Warn("runner: cannot become a child subreaper; orphaned task processes are reaped by init", "err", err)
			r.opts.Subreaper = false
		}
	}
	return r, nil
}

// runnerID returns the runner's stable id from the state directory,
// creating it on first use; task tags carry it.
func runnerID(dir string) (string, error) {
	path := filepath.Join(dir, "id")
	if b, err := os.ReadFile(path); err == nil && prpwire.ValidID(strings.TrimSpace(string(b))) {
		return strings.TrimSpace(string(b)), nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("runner: id: %w", err)
	}
	id := "r" + hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(id), 0o600); err != nil {
		return "", fmt.Errorf("runner: id in %s: %w", dir, err)
	}
	return id, nil
}

// Tag returns the TagEnv entry ("BERTH_TASK_TAG=<runner id>:<task id>")
// that every process of task taskID carries.
func (r *Runner) Tag(taskID string) string { return TagEnv + "=" + r.id + ":" + taskID }

// Run connects, serves commands and reconnects with backoff until ctx ends,
// the controller refuses the runner (ErrRefused, or the token expired), or
// the state directory is gone when a connection ends (ErrStateDirGone:
// removed with the lease directory by a host lease's release).
// While disconnected longer than the welcome's orphan grace, the runner
// stops its tasks itself and keeps the proofs for the next connection. When
// Run returns it has stopped every task it started (proofs in the outbox)
// and closed its files; a Runner runs once.
func (r *Runner) Run(ctx context.Context) error {
	defer r.close()
	// One runner per state directory: a runner launched while another
	// serves the directory (a host that took a disconnected runner for
	// gone) asks that one to reconnect now and exchanges nothing.
	unlock, dirGone, err := lockStateDir(r.dir)
	if err != nil {
		return err
	}
	defer unlock()
	// The state key comes with the exchange: the journal and outbox are
	// opened (and their records checked) only then.
	cred, err := r.bootstrap(ctx)
	if err != nil {
		return err
	}
	if err := r.claimStateDir(cred); err != nil {
		return err
	}
	if err := r.openState(cred.StateKey); err != nil {
		return err
	}
	defer r.watchChildren()()
	// Tasks and their events outlive ctx until the shutdown below: output
	// still in the pipes goes to the outbox, not away.
	taskCtx, cancelTasks := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTasks()
	var wg sync.WaitGroup
	wg.Go(func() { r.commandLoop(ctx, taskCtx) })
	r.reportInterrupted(taskCtx)

	// nudgeable: a nudge may end the wait before the next reconnect. A
	// runner takes one nudge per disconnection (until a connection is
	// welcomed again): the nudge file is a task's to write too, and a task
	// that writes it over and over must not turn the backoff into a
	// reconnect storm.
	nudgeable := true
	for attempt := 0; ; attempt++ {
		var welcomed bool
		welcomed, err = r.session(ctx)
		if welcomed {
			attempt, nudgeable = 0, true
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
		var p permanent
		if errors.As(err, &p) {
			break
		}
		if dirGone() {
			// The lease's release removed the lease directory (host
			// leases), or a task removed the lock: nothing can resume
			// this runner's state, so it stops instead of reconnecting.
			err = fmt.Errorf("%w: %s (%w)", ErrStateDirGone, r.dir, err)
			r.log.Info("runner: the state directory is gone; stopping", "err", err)
			break
		}
		r.log.Info("runner: disconnected; reconnecting", "err", err, "attempt", attempt)
		r.armOrphanTimer(taskCtx)
		if r.waitBackoff(ctx, r.opts.Backoff(attempt), nudgeable) {
			// Another runner's launch nudged this one: it reconnects now,
			// and waits out its backoff from then on.
			nudgeable = false
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
	}
	// Shut down: stop what runs and wait for the tasks to be journaled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killWait+r.opts.StopGrace+5*time.Second)
	defer cancel()
	r.stopAll(sctx, "the runner is shutting down")
	r.waitTasks(sctx)
	cancelTasks()
	r.queue.close()
	wg.Wait()
	return err
}

// bootstrap exchanges the ticket, retrying with backoff until the
// controller answers or ctx ends; a refusal is final.
func (r *Runner) bootstrap(ctx context.Context) (credentials, error) {
	for attempt := 0; ; attempt++ {
		c, err := r.credentialsFor(ctx)
		if err == nil {
			if len(c.StateKey) != prpwire.StateKeyLen {
				return credentials{}, fmt.Errorf("%w: the exchange sent no state key", ErrRefused)
			}
			return c, nil
		}
		var p permanent
		if errors.As(err, &p) {
			return credentials{}, err
		}
		r.log.Info("runner: exchange failed; retrying", "err", err, "attempt", attempt)
		select {
		case <-ctx.Done():
			return credentials{}, ctx.Err()
		case <-time.After(r.opts.Backoff(attempt)):
		}
	}
}

// sessionFile names the session whose journal and outbox the state
// directory holds: "<session> <mac>", the mac an HMAC of the session id
// under its state key.
const sessionFile = "session"

// lockFile is the state directory's lock (lockStateDir); nudgeFile, when
// it appears, asks the runner that holds the lock to reconnect at once
// (a runner launched on the directory while this one was disconnected
// leaves it, then exits).
const (
	lockFile  = "lock"
	nudgeFile = "reconnect"
)

// ErrStateDirBusy is Run's error when another live runner serves the
// state directory: that runner was asked to reconnect at once, and this
// one ran nothing (its ticket is not exchanged).
var ErrStateDirBusy = errcode.New(errcode.Conflict, "runner: another runner serves the state directory")

// ErrStateDirGone is Run's error when, as a connection ended, the state
// directory's lock file had no link left: the directory was removed (a
// host lease's release removes the lease directory, runner state
// included) or a task removed the lock. Nothing could resume the runner's
// state, so it stops its tasks and returns instead of reconnecting.
var ErrStateDirGone = errcode.New(errcode.NotFound, "runner: the state directory was removed")

// nudgePoll is how often a runner waiting to reconnect looks for a nudge.
const nudgePoll = 50 * time.Millisecond

// waitBackoff waits d, or until ctx ends or, when nudgeable, a nudge
// appears in the state directory (which it removes), and reports whether
// it was nudged.
func (r *Runner) waitBackoff(ctx context.Context, d time.Duration, nudgeable bool) bool {
	done := time.NewTimer(d)
	defer done.Stop()
	poll := time.NewTicker(nudgePoll)
	defer poll.Stop()
	if !nudgeable {
		poll.Stop()
	}
	path := filepath.Join(r.dir, nudgeFile)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-done.C:
			return false
		case <-poll.C:
			if os.Remove(path) == nil {
				r.log.Info("runner: another runner was launched on the state directory; reconnecting now")
				return true
			}
		}
	}
}

// claimStateDir checks, for a resume, that the state directory holds the
// resumed session (its session file's mac verifies under the state key):
// a runner without its session's journal would run the commands the
// controller sends again. A fresh session's runner writes the file.
func (r *Runner) claimStateDir(c credentials) error {
	m := hmac.New(sha256.New, c.StateKey)
	m.Write([]byte("berth runner state directory\x00" + c.Session))
	want := c.Session + " " + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	path := filepath.Join(r.dir, sessionFile)
	if c.Resume {
		b, err := os.ReadFile(path)
		if err != nil || !hmac.Equal([]byte(strings.TrimSpace(string(b))), []byte(want)) {
			return permanent{fmt.Errorf("%w: a resume ticket of session %s, but the state directory %s does not hold that session's journal", ErrRefused, c.Session, r.dir)}
		}
		return nil
	}
	if err := os.WriteFile(path, []byte(want+"\n"), 0o600); err != nil {
		return fmt.Errorf("runner: state directory %s: %w", r.dir, err)
	}
	return nil
}

// openState opens the journal and the outbox with the session's state
// key, marking commands interrupted by a previous runner's death (or named
// by records that fail their check) indeterminate.
func (r *Runner) openState(key []byte) error {
	j, interrupted, err := openJournal(r.dir, key)
	if err != nil {
		return err
	}
	out, err := openOutbox(r.dir, r.opts.MaxUnackedBytes, key)
	if err != nil {
		j.close()
		return err
	}
	r.mu.Lock()
	r.j, r.interrupted, r.out = j, interrupted, out
	r.lastQueued = j.last()
	r.mu.Unlock()
	return nil
}

// armOrphanTimer starts the orphan grace once per disconnection.
func (r *Runner) armOrphanTimer(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.orphanTimer != nil || !r.welcomed {
		return
	}
	r.orphanTimer = time.AfterFunc(r.welcome.OrphanGrace, func() {
		r.mu.Lock()
		connected := r.connected
		r.mu.Unlock()
		if !connected {
			r.stopAll(ctx, "the controller was away longer than the orphan grace")
		}
	})
}

func (r *Runner) disarmOrphanTimer() {
	if r.orphanTimer != nil {
		r.orphanTimer.Stop()
		r.orphanTimer = nil
	}
}

// stopAll stops every running task and appends each proof to the outbox.
func (r *Runner) stopAll(ctx context.Context, why string) {
	r.mu.Lock()
	var ts []*task
	for _, t := range r.tasks {
		ts = append(ts, t)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(func() {
			r.log.Info("runner: stopping task", "task", t.id, "why", why)
			proof := r.stopTask(ctx, t.id, t.pgid, t.since, r.opts.StopGrace)
			r.emit(ctx, prp.Event{Kind: prp.EventProof, TaskID: t.id, Proof: &proof})
		})
	}
	wg.Wait()
}

func (r *Runner) stopTask(ctx context.Context, taskID string, pgid int, since uint64, grace time.Duration) prp.StopProof {
	var exited <-chan struct{}
	r.mu.Lock()
	t := r.tasks[taskID]
	if t != nil && t.pgid == pgid {
		exited = t.exited
	}
	r.mu.Unlock()
	if t != nil && t.cancel != nil { // simulated (Options.SimulateTask)
		t.cancel()
		select {
		case <-t.exited:
		case <-ctx.Done():
		}
	}
	return r.stopTree(ctx, taskID, pgid, since, grace, exited)
}

// leaderSet returns a copy of the task leaders' pids (os/exec reaps them).
func (r *Runner) leaderSet() map[int]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	leaders := make(map[int]bool, len(r.leaders))
	for pid := range r.leaders {
		leaders[pid] = true
	}
	return leaders
}

// reap collects zombie orphans when the runner is a subreaper (a /proc
// scan).
func (r *Runner) reap() {
	if r.opts.Subreaper {
		reapOrphans(r.leaderSet())
	}
}

// reapGroup reaps the runner's zombie orphans in group pgid when it is a
// subreaper, without a /proc scan, unless a task leader os/exec still waits
// for heads the group (startTask registers a leader under r.mu with its
// start, so that none can appear meanwhile).
func (r *Runner) reapGroup(pgid int) {
	if !r.opts.Subreaper {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.leaders[pgid] {
		reapGroup(pgid)
	}
}

// childEvents returns a channel closed at the next SIGCHLD the runner gets
// (while Run runs).
func (r *Runner) childEvents() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.chld
}

// watchChildren turns SIGCHLD into closes of the childEvents channel
// until stop is called.
func (r *Runner) watchChildren() (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sig {
			r.mu.Lock()
			close(r.chld)
			r.chld = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	return func() {
		signal.Stop(sig)
		close(sig)
		<-done
	}
}

func (r *Runner) waitTasks(ctx context.Context) {
	for {
		r.mu.Lock()
		var t *task
		for _, x := range r.tasks {
			t = x
			break
		}
		r.mu.Unlock()
		if t == nil {
			return
		}
		select {
		case <-t.done:
		case <-ctx.Done():
			return
		}
	}
}

// reportInterrupted reports the commands a previous runner left executing
// (now indeterminate) and stops what is left of their tasks.
func (r *Runner) reportInterrupted(ctx context.Context) {
	for _, e := range r.interrupted {
		if e.Kind == prp.CommandTaskStart && e.TaskID != "" && e.Result.Status == prp.ResultIndeterminate {
			proof := r.stopTask(ctx, e.TaskID, e.PGID, e.Since, r.opts.StopGrace)
			r.emit(ctx, prp.Event{Kind: prp.EventProof, TaskID: e.TaskID, Proof: &proof})
		}
		r.emit(ctx, prp.Event{Kind: prp.EventResult, Result: e.Result})
	}
	r.interrupted = nil
}

// emit appends ev to the outbox; it blocks while the outbox is full.
func (r *Runner) emit(ctx context.Context, ev prp.Event) {
	if _, err := r.out.Append(ctx, ev); err != nil {
		r.log.Error("runner: outbox append failed", "kind", ev.Kind, "task", ev.TaskID, "err", err)
	}
}

func (r *Runner) close() {
	r.mu.Lock()
	r.disarmOrphanTimer()
	r.mu.Unlock()
	if r.out == nil {
		return
	}
	if err := errors.Join(r.out.close(), r.j.close()); err != nil {
		r.log.Error("runner: close state", "err", err)
	}
}

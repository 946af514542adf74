package runner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// task is a running task: its leader process heads its own process group,
// and every process of it carries the task's tag in its environment.
type task struct {
	id       string
	cmdID    string
	pgid     int
	since    uint64 // the leader's start, clock ticks after boot
	done     chan struct{}
	exited   chan struct{} // closed once the leader was reaped
	timedOut atomic.Bool
	// cancel ends a simulated task (Options.SimulateTask; pgid 0).
	cancel context.CancelFunc
}

// startTask runs a task.start command (PRP-6): journaled executing (synced)
// before the process starts; the result follows when the task ends.
func (r *Runner) startTask(ctx context.Context, c prp.Command, secretValues []string) {
	ts := c.TaskStart
	r.mu.Lock()
	_, running := r.tasks[ts.TaskID]
	r.mu.Unlock()
	if prev, ok := r.j.taskStart(ts.TaskID); running || (ok && prev.ID != c.ID) {
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeTaskExists, Message: "task " + ts.TaskID + " was started before"})
		return
	}
	if err := r.j.record(journalEntry{ID: c.ID, State: prp.JournalExecuting}); err != nil {
		r.log.Error("runner: journal", "command", c.ID, "err", err)
		return
	}
	if r.opts.SimulateTask != nil {
		r.simulateTask(ctx, c)
		return
	}
	secretEnv, files, err := placeSecrets(ts, secretValues)
	if err != nil {
		code := prpwire.CodeStartFailed
		if errors.Is(err, errSecretFile) {
			code = prpwire.CodeSecretFile
		}
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: code, Message: "task " + ts.TaskID + ": " + err.Error()})
		return
	}
	dir, leaveDir := ts.Cwd, func() {}
	if r.opts.TaskDir != nil {
		if dir, leaveDir, err = r.opts.TaskDir(ts.Cwd); err != nil {
			removeSecretFiles(files)
			r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeStartFailed, Message: "task " + ts.TaskID + ": " + err.Error()})
			return
		}
	}
	cmd := exec.Command(ts.Argv[0], ts.Argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(r.taskEnv(ts), secretEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if len(ts.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(ts.Stdin)
	}
	stdout, err1 := cmd.StdoutPipe()
	stderr, err2 := cmd.StderrPipe()
	if err := errors.Join(err1, err2); err != nil {
		removeSecretFiles(files)
		leaveDir()
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeStartFailed, Message: err.Error()})
		return
	}
	r.mu.Lock() // leaders is read by the reaper: register the pid before it can be a zombie
	err = cmd.Start()
	var t *task
	if err == nil {
		t = &task{id: ts.TaskID, cmdID: c.ID, pgid: cmd.Process.Pid, since: startTicks(cmd.Process.Pid), done: make(chan struct{}), exited: make(chan struct{})}
		r.tasks[t.id] = t
		r.leaders[t.pgid] = true
	}
	r.mu.Unlock()
	if err != nil {
		removeSecretFiles(files)
		leaveDir()
		r.finish(ctx, c, prp.Result{Status: prp.ResultRejected, Code: prpwire.CodeStartFailed, Message: "task " + ts.TaskID + ": " + err.Error()})
		return
	}
	if err := r.j.record(journalEntry{ID: c.ID, State: prp.JournalExecuting, PGID: t.pgid, Since: t.since}); err != nil {
		r.log.Error("runner: journal", "command", c.ID, "err", err)
	}
	r.emit(ctx, prp.Event{Kind: prp.EventStarted, TaskID: t.id, PID: t.pgid})

	var deadline *time.Timer
	if !ts.Deadline.IsZero() {
		deadline = time.AfterFunc(time.Until(ts.Deadline), func() {
			t.timedOut.Store(true)
			proof := r.stopTask(ctx, t.id, t.pgid, t.since, r.opts.StopGrace)
			r.emit(ctx, prp.Event{Kind: prp.EventProof, TaskID: t.id, Proof: &proof})
		})
	}
	go func() {
		defer close(t.done)
		var budget atomic.Int64
		budget.Store(ts.OutputLimit)
		var truncated atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() { r.pump(ctx, t.id, prp.Stdout, stdout, ts.OutputLimit > 0, &budget, &truncated) })
		wg.Go(func() { r.pump(ctx, t.id, prp.Stderr, stderr, ts.OutputLimit > 0, &budget, &truncated) })
		wg.Wait()
		werr := cmd.Wait()
		removeSecretFiles(files)
		leaveDir()
		r.mu.Lock()
		delete(r.leaders, t.pgid) // reaped: its group's orphans may be reaped by group
		r.mu.Unlock()
		close(t.exited)
		if deadline != nil {
			deadline.Stop()
		}
		ex := exitOf(cmd, werr)
		ex.Truncated, ex.TimedOut = truncated.Load(), t.timedOut.Load()
		r.mu.Lock()
		delete(r.tasks, t.id)
		r.mu.Unlock()
		r.emit(ctx, prp.Event{Kind: prp.EventExit, TaskID: t.id, Exit: &ex})
		r.finish(ctx, c, prp.Result{Status: prp.ResultDone, Exit: &ex})
	}()
}

// simulateTask runs c's task by Options.SimulateTask in this process:
// started (the runner's pid), its stdout pumped to the outbox as a
// process's would be (back-pressure included: a full outbox blocks the
// simulated writer), then exit and result. Its pgid is 0, so a stop
// kills nothing: it ends the simulation's ctx (stopTask).
func (r *Runner) simulateTask(ctx context.Context, c prp.Command) {
	ts := c.TaskStart
	sctx, cancel := context.WithCancel(ctx)
	t := &task{id: ts.TaskID, cmdID: c.ID, done: make(chan struct{}), exited: make(chan struct{}), cancel: cancel}
	r.mu.Lock()
	r.tasks[t.id] = t
	r.mu.Unlock()
	r.emit(ctx, prp.Event{Kind: prp.EventStarted, TaskID: t.id, PID: os.Getpid()})
	go func() {
		defer close(t.done)
		defer cancel()
		pr, pw := io.Pipe()
		var budget atomic.Int64
		budget.Store(ts.OutputLimit)
		var truncated atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() { r.pump(ctx, t.id, prp.Stdout, pr, ts.OutputLimit > 0, &budget, &truncated) })
		code := r.opts.SimulateTask(sctx, *ts, pw)
		stopped := sctx.Err() != nil && ctx.Err() == nil
		pw.Close()
		wg.Wait()
		close(t.exited)
		ex := prp.Exit{Code: code}
		if stopped {
			ex = prp.Exit{Code: -1, Signal: "killed"}
		}
		ex.Truncated = truncated.Load()
		r.mu.Lock()
		delete(r.tasks, t.id)
		r.mu.Unlock()
		r.emit(ctx, prp.Event{Kind: prp.EventExit, TaskID: t.id, Exit: &ex})
		r.finish(ctx, c, prp.Result{Status: prp.ResultDone, Exit: &ex})
	}()
}

// taskEnv is the base environment, then the task's env, then the tag; the
// ticket variable is never passed on.
func (r *Runner) taskEnv(ts *prp.TaskStart) []string {
	env := make([]string, 0, len(r.opts.BaseEnv)+len(ts.Env)+1)
	env = append(env, r.opts.BaseEnv...)
	keys := make([]string, 0, len(ts.Env))
	for k := range ts.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != TicketEnv && k != TagEnv {
			env = append(env, k+"="+ts.Env[k])
		}
	}
	return append(env, r.Tag(ts.TaskID))
}

// pump reads one stream in chunks of up to the welcome's max output chunk
// (what the pipe holds when it reads, see pipeReader) and appends each to
// the outbox. Append blocks while the outbox is full, and
// then pump does not read: the child blocks on its pipe (backpressure);
// nothing is dropped. Past the output limit it reads and discards, marking
// the task truncated.
func (r *Runner) pump(ctx context.Context, taskID string, stream prp.Stream, rd io.Reader, limited bool, budget *atomic.Int64, truncated *atomic.Bool) {
	r.mu.Lock()
	chunk := r.welcome.MaxOutputChunk
	r.mu.Unlock()
	if chunk <= 0 {
		chunk = prpwire.DefaultMaxOutputChunk
	}
	read := rd.Read
	if f, ok := rd.(*os.File); ok {
		growPipe(f)
		read = pipeReader(f)
	}
	buf := make([]byte, chunk)
	var off int64
	for {
		n, err := read(buf)
		if n > 0 {
			data := buf[:n]
			if limited {
				left := budget.Add(-int64(n)) + int64(n)
				if left < int64(n) {
					data = data[:max(left, 0)]
					truncated.Store(true)
				}
			}
			if len(data) > 0 {
				// The outbox copies data into its record: buf is reused.
				if _, err := r.out.AppendOutput(ctx, taskID, stream, off, data); err != nil {
					r.log.Error("runner: outbox append failed", "kind", prp.EventOutput, "task", taskID, "err", err)
				}
				off += int64(len(data))
			}
		}
		if err != nil {
			return
		}
	}
}

func exitOf(cmd *exec.Cmd, err error) prp.Exit {
	st := cmd.ProcessState
	if st == nil {
		msg := "unknown"
		if err != nil {
			msg = err.Error()
		}
		return prp.Exit{Code: -1, Error: msg}
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return prp.Exit{Code: -1, Signal: ws.Signal().String()}
	}
	return prp.Exit{Code: st.ExitCode()}
}

package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
)

// Command is a command for the lease's sandbox: a task that Handle.Run
// runs through berth's runner, or a process of the driver's that
// Handle.Exec runs. Argv, Env, Dir, Stdin, OutputLimit and Deadline serve
// both; TaskID, Secrets and StopGrace are a task's own (Exec refuses
// Secrets). The zero Command is refused (no Argv).
type Command struct {
	// Argv is the program and its arguments; Argv[0] is looked up in PATH.
	// Required.
	Argv []string
	// Env adds variables to the task's environment. Default none.
	Env map[string]string
	// Dir is the working directory; "" means the runner's (the sandbox's
	// default).
	Dir string
	// Stdin, if not nil, is read to its end (at most 1 MiB for Run, which
	// sends it whole with the start command, else Run fails with an error
	// wrapping errcode.ErrInvalid and starts nothing) and given to the task
	// as its standard input. Default nil: an empty standard input.
	Stdin io.Reader
	// OutputLimit caps the output: for Run the bytes stored of the task
	// (both streams; past it the output is counted and discarded, the exit
	// says Truncated, the task is not stopped; 0 means no cap but the
	// controller's per-session one, 1 GiB by default); for Exec the bytes
	// kept of stdout and of stderr each (0 means 1 MiB; Result.Truncated).
	OutputLimit int64
	// Deadline, if not zero, is when the command is ended: a task by the
	// runner (Exit.TimedOut), Exec's process as at ctx's deadline. Default
	// none.
	Deadline time.Time
	// TaskID names the task. Run with a TaskID that ran before on the
	// lease returns that task and starts nothing again (a retry after an
	// error, or after the host restarted). Default "": a new id.
	TaskID string
	// Secrets are references to the secret values the task needs: an
	// environment's secret as an environment variable or a file, or a
	// managed account for the run's projects (SecretUse). Their values
	// go to the runner in a separate frame, never in the command; a
	// refused reference fails Run and starts nothing. Default none.
	Secrets []SecretUse
	// StopGrace is how long Task.Stop lets the task's processes exit
	// after SIGTERM before SIGKILL. Default 5 seconds.
	StopGrace time.Duration
}

// OutputChunk is a piece of a task's stored output (Task.Output).
type OutputChunk struct {
	// Seq is the chunk's place in the lease's runner session: pass the
	// last chunk's Seq to the next Task.Output call.
	Seq uint64
	// Stream is "stdout" or "stderr".
	Stream string
	// Offset is where Data starts in Stream.
	Offset int64
	// Data is the output.
	Data []byte
	// Truncated counts bytes of the chunk discarded past an output limit.
	Truncated int64
}

// SecretSource says where the value of a SecretUse comes from.
type SecretSource string

// The secret sources.
const (
	// SecretFromEnvironment: Ref is a key of the secret env map (the
	// config.KindSecretMap field, such as docker's and daytona's
	// config.env) of the environment the lease was made from.
	SecretFromEnvironment SecretSource = "environment"
	// SecretFromManagedAccount: Ref is a managed-account reference (a
	// secret reference "secret:ID@vN" in the host's secret store), handed
	// over only while a project auth check matches exactly (package
	// handover, AUTH-2).
	SecretFromManagedAccount SecretSource = "managed_account"
)

// SecretUse is a reference to one secret value a task needs
// (Command.Secrets): where the value comes from and where the task gets
// it, as the environment variable Env or the file File (written with mode
// 0600 before the task starts, removed when it ends; a relative path is
// relative to the task's directory). Exactly one of Env and File is set.
// The runner gets the values in a separate frame, delivered once right
// before the task starts; they are never journaled, stored or echoed.
type SecretUse struct {
	Source SecretSource `json:"source"`
	Ref    string       `json:"ref"`
	Env    string       `json:"env,omitempty"`
	File   string       `json:"file,omitempty"`
	// Projects are the project ids of the run the managed account is
	// handed to; they are compared, sorted, with the project auth check's
	// (AUTH-2). Only for SecretFromManagedAccount.
	Projects []string `json:"projects,omitempty"`
}

// Validate checks u as Run does: a known source, a reference of at most
// 256 printable characters, exactly one of a valid env name (not a BERTH_
// name: those are the runner's) and a clean file path, and projects only
// for a managed account.
func (u *SecretUse) Validate() error {
	w := prp.SecretUse{Source: prp.SecretSource(u.Source), Ref: u.Ref, Env: u.Env, File: u.File, Projects: u.Projects}
	return w.Validate()
}

// Exit is how a task ended (Task.Wait). Code is -1 when a signal ended
// it (Signal names it); Error says why the runner could not run it as
// asked; Truncated says an output limit cut the stored output; TimedOut
// says Command.Deadline ended it.
type Exit struct {
	Code      int    `json:"code"`
	Signal    string `json:"signal,omitempty"`
	Error     string `json:"error,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
}

// StopProof is the runner's evidence that a task's processes are gone
// (Task.Stop, PRP-6): its word (drivers.EvidenceRunnerAttested), which a
// lease's release checks from outside before it counts. Methods are the
// checks that ran: "process_group" (kill(-pgid, 0) found no process) and
// "proc_tag_scan" (no process in /proc carries the task's tag); a check
// that could not run is in Failed. Complete is true only when every method
// ran and found no survivor (Survivors lists the process ids found).
type StopProof struct {
	TaskID     string    `json:"task_id"`
	Methods    []string  `json:"methods"`
	Failed     []string  `json:"failed,omitempty"`
	Survivors  []int     `json:"survivors"`
	VerifiedAt time.Time `json:"verified_at"`
	Complete   bool      `json:"complete"`
}

// taskRunner is what a TaskStopper may also be (the runner controller's
// is): RunTask connects the runner of h's lease (once per lease in this
// process; a warm-pool member's runner is taken over) and starts cmd on
// it for p, the principal h was acquired for. It returns a value with the
// methods of taskControl. It is the manager's hook for Handle.Run, not an
// entry point.
type taskRunner interface {
	RunTask(ctx context.Context, p authz.Principal, h *Handle, cmd Command) (any, error)
	// ReattachTask connects the runner of h's lease as RunTask does (a
	// runner gone with the process that served it is relaunched with a
	// resume ticket) and returns task id of the lease's own session.
	ReattachTask(ctx context.Context, p authz.Principal, h *Handle, id string) (any, error)
	// FindTask returns task id of lease's own runner session for p
	// without connecting the runner (Manager.Task), or an error wrapping
	// errcode.ErrNotFound while the lease has no such session.
	FindTask(ctx context.Context, p authz.Principal, lease, id string) (any, error)
}

// taskControl is what RunTask returns: the runner controller's task,
// acting for the principal it was started for.
type taskControl interface {
	ID() string
	Wait(ctx context.Context) (Exit, error)
	Output(ctx context.Context, after uint64) ([]OutputChunk, error)
	Stop(ctx context.Context) (StopProof, error)
}

// Run starts cmd as a task through berth's runner in the sandbox and
// returns its Task: the lease must have been acquired with a runner
// (AcquireRequest.WithRunner or Runner), else the error wraps
// drivers.ErrUnsupported. The first Run of a lease in this process
// installs and connects its runner (a runner pool's member is connected
// already); later ones reuse it. Run acts with the authority Acquire
// granted (as every Handle method): the principal the handle was acquired
// for is asked again, not a second one. The task keeps running when ctx
// ends: ctx bounds only the start. A task whose secrets are refused, or
// that the instance settings refuse, starts nothing.
//
// Use Run for an agent's tasks: output is stored and can be read from any
// offset, a task survives a lost connection, and Stop proves what it
// stopped. Exec and Start are the driver's own processes, for targets
// without a runner and short checks.
func (h *Handle) Run(ctx context.Context, cmd Command) (*Task, error) {
	fail := func(err error) (*Task, error) {
		return nil, fmt.Errorf("lease %s: run %q: %w", h.lease.ID, argv0(cmd.Argv), err)
	}
	if len(cmd.Argv) == 0 {
		return fail(fmt.Errorf("field Argv is empty: %w", errcode.ErrInvalid))
	}
	tr, err := h.taskRunner()
	if err != nil {
		return fail(err)
	}
	return h.task(tr.RunTask(ctx, h.p, h, cmd))
}

// taskRunner returns the controller that runs h's tasks, or why there is
// none: a lease without a runner, a handle of no principal, a manager
// berth.New did not wire.
func (h *Handle) taskRunner() (taskRunner, error) {
	if h.lease.Runner == nil {
		return nil, fmt.Errorf("the lease was acquired without a runner (AcquireRequest.WithRunner): %w", drivers.ErrUnsupported)
	}
	if !h.acquired {
		return nil, fmt.Errorf("the handle was made for no principal (Manager.Acquire or Open make handles that run tasks): %w", drivers.ErrUnsupported)
	}
	tr, ok := h.m.tasks.(taskRunner)
	if !ok {
		return nil, fmt.Errorf("the lease manager has no runner controller (berth.New wires one): %w", drivers.ErrUnsupported)
	}
	return tr, nil
}

// task wraps what the controller's RunTask or ReattachTask returned.
func (h *Handle) task(v any, err error) (*Task, error) {
	if err != nil {
		return nil, err
	}
	tc, ok := v.(taskControl)
	if !ok {
		return nil, fmt.Errorf("lease %s: the runner controller returned no task", h.lease.ID)
	}
	return &Task{c: tc, lease: h.lease.ID}, nil
}

// Reattach returns the Task id that Run started on the lease, in this
// process or another (a host that restarted, or another replica: open the
// lease with Manager.Open first). It connects the lease's runner as Run
// does: the runner's ingress is served from this process, and a runner
// that lost the process it reached (killed with it) is relaunched with a
// resume ticket of the lease's runner session, so that it replays its
// state directory; a runner still alive on its state directory reconnects
// instead, and no second runner stays. The task's output is read on from
// any chunk (Task.Output's after), byte for byte as stored, and Stop
// still gives the runner's proof. It reads nothing of the task: an id
// that never ran shows in Wait and Output as a task that never ends. ctx
// bounds the connection. A lease acquired without a runner is an error
// wrapping drivers.ErrUnsupported.
func (h *Handle) Reattach(ctx context.Context, taskID string) (*Task, error) {
	fail := func(err error) (*Task, error) {
		return nil, fmt.Errorf("lease %s: reattach task %q: %w", h.lease.ID, taskID, err)
	}
	if taskID == "" {
		return fail(fmt.Errorf("the task id is empty: %w", errcode.ErrInvalid))
	}
	tr, err := h.taskRunner()
	if err != nil {
		return fail(err)
	}
	return h.task(tr.ReattachTask(ctx, h.p, h, taskID))
}

// Task returns the Task taskID that Handle.Run started on lease leaseID,
// in this process or another (a replica), for p, without taking the lease
// or connecting its runner: the process that holds the lease serves the
// runner, and replicas share the runners' store (Stores.Runners) and
// output directory (berth.Options.RunnerDir). Its Output, Stream and Wait
// read what is stored; Stop has the holder's connection deliver the
// stop. p needs authz.ActionRead on the lease, and each call of the Task
// is authorized as p. A lease acquired without a runner is an error
// wrapping drivers.ErrUnsupported; one whose runner was not connected yet
// (no runner session) an error wrapping errcode.ErrNotFound. It reads
// nothing of the task: an id that never ran shows in Wait and Output as a
// task that never ends.
func (m *Manager) Task(ctx context.Context, p authz.Principal, leaseID, taskID string) (*Task, error) {
	fail := func(err error) (*Task, error) {
		return nil, fmt.Errorf("lease %s: task %q: %w", leaseID, taskID, err)
	}
	if taskID == "" {
		return fail(fmt.Errorf("the task id is empty: %w", errcode.ErrInvalid))
	}
	l, err := m.load(ctx, p, authz.ActionRead, leaseID)
	if err != nil {
		return nil, err
	}
	if l.Runner == nil {
		return fail(fmt.Errorf("the lease was acquired without a runner (AcquireRequest.WithRunner): %w", drivers.ErrUnsupported))
	}
	tr, ok := m.tasks.(taskRunner)
	if !ok {
		return fail(fmt.Errorf("the lease manager has no runner controller (berth.New wires one): %w", drivers.ErrUnsupported))
	}
	v, err := tr.FindTask(ctx, p, leaseID, taskID)
	if err != nil {
		return nil, err
	}
	tc, ok := v.(taskControl)
	if !ok {
		return fail(errors.New("the runner controller returned no task"))
	}
	return &Task{c: tc, lease: leaseID}, nil
}

func argv0(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// Task is a task running through berth's runner in a lease's sandbox
// (Handle.Run). Its methods take no principal: they act with the
// authority of the principal the lease was acquired for. The task's output
// is stored as it comes: Output and Stream read it from any point, whether
// or not someone is in Wait, and several readers may follow it. It is safe
// for concurrent use.
type Task struct {
	c     taskControl
	lease string
}

// ID returns the task's id (Command.TaskID, or the one Run made).
func (t *Task) ID() string { return t.c.ID() }

// Lease returns the id of the task's lease.
func (t *Task) Lease() string { return t.lease }

// Wait waits until the task ended and returns how: Exit.Code, or -1 and
// Exit.Signal; Exit.Truncated when output was discarded past a limit,
// Exit.TimedOut when Command.Deadline ended it. It does not stop the task
// when ctx ends (an error wrapping ctx.Err()). A task the runner did not
// run (refused, or unknown after a crash of the runner) is an error
// naming why.
func (t *Task) Wait(ctx context.Context) (Exit, error) { return t.c.Wait(ctx) }

// Output returns the task's stored output chunks (both streams, in the
// order they were stored) after the chunk whose Seq is after (0: from the
// start), at most 256 of them; it waits until there is at least one. Once
// the task ended and every chunk was returned it returns io.EOF. A reader
// that comes back later (another process, after a restart) passes the Seq
// of the last chunk it got and misses nothing. ctx bounds the wait.
func (t *Task) Output(ctx context.Context, after uint64) ([]OutputChunk, error) {
	return t.c.Output(ctx, after)
}

// Stream returns a reader of the task's output, stdout and stderr in the
// order they were stored, from the start; it blocks for more while the
// task runs and returns io.EOF once the task ended and all of its output
// was read. It does not need Wait, and Wait does not consume it. ctx
// bounds every Read (a Read after ctx ended returns its error).
func (t *Task) Stream(ctx context.Context) io.Reader {
	return &taskStream{ctx: ctx, t: t}
}

// Stop stops the task's whole process tree (SIGTERM, Command.StopGrace,
// SIGKILL) and returns the runner's stop proof. The proof is the runner's
// word (attested, drivers.EvidenceRunnerAttested): releasing the lease
// checks from outside before it counts. A proof that is incomplete, names
// a survivor or a check that could not run is returned with an error.
// Stopping again returns the same proof. ctx bounds the wait for the
// runner.
func (t *Task) Stop(ctx context.Context) (StopProof, error) { return t.c.Stop(ctx) }

// taskStream is Task.Stream's reader.
type taskStream struct {
	ctx  context.Context
	t    *Task
	seq  uint64
	buf  []byte
	rest []OutputChunk
	err  error
}

func (s *taskStream) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if len(s.rest) > 0 {
			s.buf, s.seq, s.rest = s.rest[0].Data, s.rest[0].Seq, s.rest[1:]
			continue
		}
		if s.err != nil {
			return 0, s.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		cs, err := s.t.c.Output(s.ctx, s.seq)
		switch {
		case errors.Is(err, io.EOF):
			s.err = io.EOF
		case err != nil:
			return 0, err // not sticky: a later Read with time left goes on
		}
		s.rest = cs
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// systemRunners returns the runner binaries of AcquireRequest.WithRunner
// (leasehook.Sources.PoolRunners).
func (m *Manager) systemRunners() (*drivers.RunnerSet, error) {
	if m.o.poolRunners == nil {
		return nil, fmt.Errorf("lease: acquire with a runner: the manager has no runner binaries (berth.Options.RunnerBinary): %w", drivers.ErrUnsupported)
	}
	set, err := m.o.poolRunners()
	if err != nil {
		return nil, fmt.Errorf("lease: acquire with a runner: %w", err)
	}
	return set, nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/prp"
	"github.com/berthdev/berth/prp/controller"
)

// RunnerBinaryEnv is the environment variable envctl reads for the runner
// binary when --runner-binary is not given (the library reads none).
const RunnerBinaryEnv = "BERTH_RUNNER_BINARY"

// runnerBuildHint says how to build a runner binary.
const runnerBuildHint = "CGO_ENABLED=0 go build -o berth-runner ./examples/runner"

const runUsage = `usage: envctl run ENV --company C [--workspace W] [--run R] [--runner-binary PATH] [--json] -- ARGV...
       envctl run --company C [--workspace W] [--project P] [--agent A] [...] -- ARGV...

run executes ARGV in a leased sandbox through berth's runner: it leases ENV
(by id or name; without ENV through the binding of the scope), installs and
starts the runner there (a progress line on stderr while it installs and
connects), starts the task, and streams its stdout and stderr live to this
process's stdout and stderr, byte for byte. Ctrl-C stops the task: the
runner ends its whole process tree and proves it (the proof is printed).
Then the lease is released (destroy), which stops and verifies every task
of the lease again before the sandbox goes, and its receipt is printed to
stderr. envctl exits with the task's exit code (128+N for a task a signal
N ended, 130 after Ctrl-C, 1 when envctl itself failed).

--runner-binary (default $BERTH_RUNNER_BINARY) is a static Linux build of
the runner for the sandbox's architecture:

    ` + runnerBuildHint + `

--json prints, instead of the live output, the task's event log (every
stored event, output bytes base64-encoded), the stop proofs and the lease
receipt as one JSON object on stdout.
`

// exitStatus is the exit code of a task that envctl passes on (main
// exits with it and prints nothing more).
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("task exited %d", e.code) }

func runRun(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(g.stderr, runUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print the event log as JSON")
	company := fs.String("company", "", "company the lease is for (required)")
	workspace := fs.String("workspace", "", "workspace of the scope (and working directory hint)")
	runID := fs.String("run", "", "run id of the lease")
	project := fs.String("project", "", "project of the scope (lease through its binding)")
	agent := fs.String("agent", "", "agent of the scope (lease through its binding)")
	binary := fs.String("runner-binary", os.Getenv(RunnerBinaryEnv), "runner binary on this host (default $"+RunnerBinaryEnv+")")
	pos, err := parseInterleaved(fs, args)
	dash := indexOf(args, "--")
	if err != nil || dash < 0 || len(args[dash+1:]) == 0 {
		fmt.Fprint(g.stderr, runUsage)
		return errUsage
	}
	argv := args[dash+1:]
	pos = pos[:len(pos)-len(argv)]
	if len(pos) > 1 || len(pos) == 1 && (*project != "" || *agent != "") {
		fmt.Fprint(g.stderr, runUsage)
		return errUsage
	}
	req := lease.AcquireRequest{Company: *company, Run: *runID, Workspace: *workspace}
	what := ""
	if len(pos) == 1 {
		what = pos[0]
	} else {
		req.Scope = &environment.Scope{Company: *company, Workspace: *workspace, Project: *project, Agent: *agent}
		what = "through the binding of " + req.Scope.String()
	}
	if *company == "" {
		return fmt.Errorf("run %s: flag --company is required (a lease belongs to a company)", what)
	}
	if *binary == "" {
		return fmt.Errorf("run %s: no runner binary: pass --runner-binary PATH or set $%s; build one with: %s", what, RunnerBinaryEnv, runnerBuildHint)
	}
	g.runnerBinary = *binary
	return runTask(ctx, g, what, pos, req, argv)
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// runReport is what --json prints.
type runReport struct {
	Lease    string                   `json:"lease"`
	Session  string                   `json:"session"`
	Task     string                   `json:"task"`
	Runner   string                   `json:"runner"`
	Events   []controller.StoredEvent `json:"events"`
	Exit     *prp.Exit                `json:"exit,omitempty"`
	Stopped  bool                     `json:"stopped"`
	Proofs   []prp.StopProof          `json:"proofs,omitempty"`
	Receipt  *lease.Lease             `json:"receipt,omitempty"`
	ExitCode int                      `json:"exitCode"`
}

func runTask(ctx context.Context, g *globals, what string, pos []string, req lease.AcquireRequest, argv []string) (err error) {
	progress := func(format string, a ...any) {
		if !g.json {
			fmt.Fprintf(g.stderr, "envctl: "+format+"\n", a...)
		}
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	spec, err := sys.RunnerSpec()
	if err != nil {
		return fmt.Errorf("run %s: flag --runner-binary: %w (build one with: %s)", what, err, runnerBuildHint)
	}
	if len(pos) == 1 {
		if req.EnvironmentID, err = lookupID(ctx, g, sys.Catalog, pos[0]); err != nil {
			return err
		}
	}
	req.Runner = &spec
	progress("leasing %s for company %s", what, req.Company)
	h, err := sys.Leases.Acquire(ctx, g.as, req)
	if err != nil {
		return fmt.Errorf("run %s: %w", what, err)
	}
	rep := &runReport{Lease: h.ID()}
	// Whatever happens from here, the lease is released (its task hook
	// stops and verifies every task first) and its receipt printed.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		l, rerr := h.Release(rctx, lease.ReleaseOptions{Disposition: drivers.Destroy})
		rep.Receipt = l
		if l != nil && !g.json {
			fmt.Fprintf(g.stderr, "envctl: lease %s %s, cleanup %s", l.ID, l.Status, dash(string(l.Cleanup)))
			if l.CleanupEvidence != "" {
				fmt.Fprintf(g.stderr, " (%s)", l.CleanupEvidence)
			}
			if l.FailureReason != "" {
				fmt.Fprintf(g.stderr, "; reason: %s", l.FailureReason)
			}
			fmt.Fprintln(g.stderr)
		}
		if g.json && rep.Session != "" {
			if jerr := writeJSON(g.stdout, rep); jerr != nil && err == nil {
				err = jerr
			}
		}
		if rerr != nil && (err == nil || errors.As(err, new(*exitStatus))) {
			err = fmt.Errorf("run %s: release lease %s: %w", what, h.ID(), rerr)
		}
	}()
	progress("lease %s (%s, sandbox %s)", h.ID(), h.Provider(), h.SandboxID())
	att, err := sys.Runners.Attach(ctx, g.as, h, controller.AttachRequest{Runner: spec, Progress: func(s controller.AttachStage) {
		switch s {
		case controller.AttachInstalling:
			progress("installing the runner (sha256 %s)...", spec.SHA256[:12])
		case controller.AttachLaunching:
			progress("launching the runner...")
		case controller.AttachConnecting:
			progress("connecting...")
		}
	}})
	if err != nil {
		return fmt.Errorf("run %s: %w", what, err)
	}
	rep.Session, rep.Runner = att.Session, att.Hello.RunnerVersion
	progress("runner %s connected (%s)", att.Hello.RunnerVersion, att.Hello.Platform)
	task, err := prp.NewID("task")
	if err != nil {
		return err
	}
	rep.Task = task
	startID := "start_" + strings.TrimPrefix(task, "task_")
	if _, err := sys.Runners.StartTask(ctx, g.as, att.Session, startID, prp.TaskStart{TaskID: task, Argv: argv}); err != nil {
		return fmt.Errorf("run %s: start the task: %w", what, err)
	}

	// Follow the task until it exits; Ctrl-C (ctx ends) stops it with
	// proof and keeps following until its exit is stored.
	fctx, stopFollow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollow()
	type outcome struct {
		exit *prp.Exit
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		errDone := errors.New("done")
		ferr := sys.Runners.Follow(fctx, g.as, att.Session, 0, func(se controller.StoredEvent) error {
			ev := se.Event
			if g.json {
				rep.Events = append(rep.Events, se)
			}
			switch {
			case ev.Kind == prp.EventOutput && ev.TaskID == task && !g.json:
				w := g.stdout
				if ev.Output.Stream == prp.Stderr {
					w = g.stderr
				}
				if _, err := w.Write(ev.Output.Data); err != nil {
					return err
				}
			case ev.Kind == prp.EventStarted && ev.TaskID == task:
				progress("task %s started (pid %d)", task, ev.PID)
			case ev.Kind == prp.EventExit && ev.TaskID == task:
				o.exit = ev.Exit
				return errDone
			case ev.Kind == prp.EventResult && ev.Result != nil && ev.Result.CommandID == startID && ev.Result.Exit == nil &&
				ev.Result.Status != prp.ResultDone:
				o.err = fmt.Errorf("the runner did not run the task: %s (%s): %s", ev.Result.Status, ev.Result.Code, ev.Result.Message)
				return errDone
			case ev.Kind == controller.EventEventsLost:
				o.err = fmt.Errorf("events of the task were lost: %s", ev.Result.Message)
				return errDone
			}
			return nil
		})
		if !errors.Is(ferr, errDone) && o.err == nil {
			o.err = ferr
		}
		done <- o
	}()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		rep.Stopped = true
		progress("interrupted: stopping task %s...", task)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		proofs, serr := sys.Runners.StopAndVerify(sctx, g.as, att.Session, 2*time.Second)
		cancel()
		rep.Proofs = proofs
		for _, p := range proofs {
			if !g.json {
				fmt.Fprintf(g.stderr, "envctl: stop proof of task %s: complete %t, methods %s, survivors %v", p.TaskID, p.Complete, strings.Join(p.Methods, "+"), p.Survivors)
				if len(p.Failed) > 0 {
					fmt.Fprintf(g.stderr, ", checks that could not run %v", p.Failed)
				}
				fmt.Fprintln(g.stderr)
			}
		}
		if serr != nil {
			return fmt.Errorf("run %s: stop task %s: %w", what, task, serr)
		}
		select {
		case o = <-done:
		case <-time.After(30 * time.Second):
			o.err = fmt.Errorf("task %s was stopped with proof but its exit was not stored within 30s", task)
		}
		rep.ExitCode = 130
		rep.Exit = o.exit
		return &exitStatus{code: 130}
	}
	if o.err != nil {
		return fmt.Errorf("run %s: task %s: %w", what, task, o.err)
	}
	rep.Exit = o.exit
	code := o.exit.Code
	if code < 0 {
		code = 128 + signalNumber(o.exit.Signal)
	}
	if o.exit.Error != "" {
		progress("task %s: %s", task, o.exit.Error)
	}
	rep.ExitCode = code
	if code != 0 {
		return &exitStatus{code: code}
	}
	return nil
}

// signalNumber maps the runner's signal names to their numbers (SIGKILL
// when unknown: the task was killed).
func signalNumber(name string) int {
	switch strings.TrimPrefix(strings.ToUpper(name), "SIG") {
	case "HUP", "HANGUP":
		return 1
	case "INT", "INTERRUPT":
		return 2
	case "QUIT":
		return 3
	case "TERM", "TERMINATED":
		return 15
	case "PIPE", "BROKEN PIPE":
		return 13
	}
	return 9
}

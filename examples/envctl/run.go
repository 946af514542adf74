package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/workspace"
)

// RunnerBinaryEnv is the environment variable envctl reads for the runner
// binary when --runner-binary is not given (the library reads none).
const RunnerBinaryEnv = "BERTH_RUNNER_BINARY"

// runnerBuildHint says how to build a runner binary.
const runnerBuildHint = "CGO_ENABLED=0 go build -o berth-runner ./cmd/berth-runner"

// ManagedAccountFileEnv is the environment variable in which envctl run
// --managed-account tells the task where its managed account's file is.
const ManagedAccountFileEnv = "MANAGED_ACCOUNT_FILE"

const runUsage = `usage: envctl run ENV --company C [--workspace W] [--run R] [--runner-binary PATH] [--connect-timeout D] [--json]
                 [--hold] [--managed-account REF [--account-file PATH] [--project P]...]
                 [--workspace-dir DIR | --workspace-git REPO[@REF]] [--collect DEST] -- ARGV...
       envctl run --company C [--workspace W] [--project P] [--agent A] [--hold] [...] -- ARGV...
       envctl run --lease LEASE [--connect-timeout D] [--json] [--managed-account REF ...] [--collect DEST] -- ARGV...

run executes ARGV in a leased sandbox through berth's runner: it leases ENV
(by id or name; without ENV through the binding of the scope) with a
runner, runs the task on the lease (installing, starting and connecting
the runner first: a progress line on stderr), and streams its stdout and
stderr live to this process's stdout and stderr, byte for byte. Ctrl-C stops the task: the
runner ends its whole process tree and proves it (the proof is printed).
Then the lease is released (destroy), which stops and verifies every task
of the lease again before the sandbox goes, and its receipt is printed to
stderr. envctl exits with the task's exit code (128+N for a task a signal
N ended, 130 after Ctrl-C, 1 when envctl itself failed).

--runner-binary (default $BERTH_RUNNER_BINARY) is a static Linux build of
the runner for the sandbox's architecture:

    ` + runnerBuildHint + `

Without one, envctl builds the runner from the module's own source with
the go command for the architecture the target reports (once per source
and architecture, into the user's cache; a progress line on stderr). A
binary install of envctl (no go command, or built without its source)
needs --runner-binary.

--connect-timeout (default 2m) bounds the wait for the runner to install,
start and connect; a runner that does not connect in time fails the run
with the tail of its log, and the lease is released.

--managed-account REF hands the managed account REF (a secret reference
secret:ID@vN in envctl's secret store, see 'envctl auth-check record
--account-file') to the task: resolved from the secret store when the task
is dispatched, sent to the runner over its authenticated connection in the
secret-values frame (never in the task's argv, env, events, logs or
records) and written with mode 0600 at --account-file (an absolute path in
the sandbox, or relative to the task's working directory; default
/tmp/berth-managed-account-TASK, a name no other task shares, outside the
working directory so that an agent cannot commit it), removed when the
task ends. The task finds the path in $` + ManagedAccountFileEnv + `. It is
handed over only while the project auth check of the company and account
matches exactly: version 1, succeeded, the lease's config fingerprint and
provider, and the project set (the --project flags: with ENV any number,
without ENV the scope's one project). Otherwise the task is refused before
it runs: envctl prints the code that names the part that did not match
(auth_check_missing, _version, _status, _fingerprint, _provider,
_projects), releases the lease and exits 1.

--hold keeps the lease after the task instead of releasing it (what the
task left running is stopped with the runner's proof, so that a later
release owes it nothing), and prints its id on stderr ("envctl: lease ID held ..."; with --json the
report's lease and held): the next turn of the agent finds the first
turn's files in it. With --workspace W it leases with the policy
reuse_by_workspace, whose reuse key is the company, the environment, the
project and W: a later 'run ... --workspace W --hold' of the same company
and project resumes the same lease (another project's or company's never
does). --lease LEASE runs the task in a held lease (the principal --as
must be allowed to lease it: its company's agents and the operators) and
keeps it held. 'envctl lease release LEASE' ends it. A held lease of a
sandbox driver (docker, daytona) is reached from any envctl process; an
ssh lease once the holder's claim expired (30s after the holding envctl
exited); a local lease only in the process that acquired it, so --hold
on local keeps nothing past the process (a sweep ends it).

--workspace-dir DIR or --workspace-git REPO[@REF] puts the agent's
project into the sandbox before the task (package workspace: Prepare):
a directory of this host (links go in as links; .env, .env.*, *.pem,
id_* and .git/config left out), or a Git repository this host's git
reads (a path or URL, at REF: a branch, tag or commit; default its HEAD),
shallow, as a repository where the target has git. Its key is --workspace
W (else a fresh one), its owner the company and the scope's project
(--project without ENV; with ENV none). The
task runs with its working directory in the workspace (a progress line
names it and its checkpoint). --collect DEST, after the task whatever its
exit, unpacks the files the task added or changed since the checkpoint
into the directory DEST (tarsafe.Extract: nothing outside it) and, for a
Git source, writes the agent's commits as a bundle DEST.bundle (fetch it:
git fetch DEST.bundle HEAD) and its uncommitted changes as DEST.diff
(git apply), each only when not empty; the progress line counts the
changed and deleted paths ('envctl workspace show LEASE' lists them
while the lease lives). envctl still exits with the task's code; a failed
collect exits 1. A held lease keeps its workspace: 'run --lease LEASE'
runs in its one live workspace and takes --collect. berth reads a host's
directory or repository only for a principal allowed to (authz
ActionReadHost: operators, envctl's default --as); an agent (--as
agent:ID@C) is refused both: its files go in as an archive ('envctl
workspace put' into a workspace, or the server's workspace route).

The one flow of an agent's turn: acquire (ENV, or a scope's binding) ->
prepare the workspace -> run the task in it -> stream its output ->
collect its changes -> release, or --hold for the next turn.

--json prints, instead of the live output, the task's stored output (its
chunks in order, each naming its stream, bytes base64-encoded), its exit,
the stop proofs, the lease receipt, the workspace record and the
collect's receipt as one JSON object on stdout.
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
	wsName := fs.String("workspace", "", "workspace of the scope (and working directory hint)")
	runID := fs.String("run", "", "run id of the lease")
	var projects projectList
	fs.Var(&projects, "project", "project of the scope (lease through its binding); with ENV, a project of the managed account's project set (repeatable)")
	account := fs.String("managed-account", "", "managed account reference (secret:ID@vN) to hand to the task")
	accountFile := fs.String("account-file", "", "where the task gets the managed account (default /tmp/berth-managed-account-TASK)")
	agent := fs.String("agent", "", "agent of the scope (lease through its binding)")
	binary := fs.String("runner-binary", os.Getenv(RunnerBinaryEnv), "runner binary on this host (default $"+RunnerBinaryEnv+")")
	connectTimeout := fs.Duration("connect-timeout", 2*time.Minute, "how long to wait for the runner to install, start and connect")
	hold := fs.Bool("hold", false, "keep the lease after the task (reuse_by_workspace with --workspace) and print its id")
	heldID := fs.String("lease", "", "run in this held lease (and keep it held)")
	wsDir := fs.String("workspace-dir", "", "prepare a workspace from this directory of the host before the task, which runs in it")
	wsGit := fs.String("workspace-git", "", "prepare a workspace from this Git repository (REPO[@REF]) before the task, which runs in it")
	collect := fs.String("collect", "", "after the task, unpack what it changed in its workspace into this directory (Git: DEST.bundle, DEST.diff beside it)")
	pos, err := parseInterleaved(fs, args)
	dash := slices.Index(args, "--")
	if err != nil || dash < 0 || len(args[dash+1:]) == 0 {
		fmt.Fprint(g.stderr, runUsage)
		return errUsage
	}
	argv := args[dash+1:]
	pos = pos[:len(pos)-len(argv)]
	if len(pos) > 1 || len(pos) == 1 && *agent != "" {
		fmt.Fprint(g.stderr, runUsage)
		return errUsage
	}
	project := ""
	switch {
	case *heldID != "": // --project names the managed account's projects
	case len(pos) == 1 && len(projects) > 0 && *account == "":
		return fmt.Errorf("run %s: flag --project with ENV names the managed account's projects: it needs --managed-account", pos[0])
	case len(pos) == 0 && len(projects) > 1:
		return fmt.Errorf("run: flag --project: a scope has one project, got %d (name ENV to run for a project set)", len(projects))
	case len(pos) == 0 && len(projects) == 1:
		project = projects[0]
	}
	if *accountFile != "" && *account == "" {
		return errors.New("run: flag --account-file needs --managed-account")
	}
	if *heldID != "" {
		if len(pos) > 0 || *company != "" || *wsName != "" || *agent != "" || *runID != "" || *hold || len(projects) > 0 && *account == "" {
			return fmt.Errorf("run --lease %s: the held lease names its environment, company and workspace: leave out ENV and --company, --workspace, --project, --agent, --run and --hold", *heldID)
		}
	}
	var src *workspace.Source
	switch {
	case *wsDir != "" && *wsGit != "":
		return errors.New("run: flags --workspace-dir and --workspace-git: name one source")
	case (*wsDir != "" || *wsGit != "") && *heldID != "":
		return fmt.Errorf("run --lease %s: the held lease's workspace was prepared by its first run: leave out --workspace-dir and --workspace-git", *heldID)
	case *wsDir != "":
		abs, err := filepath.Abs(*wsDir)
		if err != nil {
			return fmt.Errorf("run: flag --workspace-dir: %w", err)
		}
		src = &workspace.Source{Kind: workspace.SourceDir, Location: abs}
	case *wsGit != "":
		loc, ref := splitGitRef(*wsGit)
		if fi, err := os.Stat(loc); err == nil && fi.IsDir() {
			loc, _ = filepath.Abs(loc)
		}
		src = &workspace.Source{Kind: workspace.SourceGit, Location: loc, Ref: ref}
	}
	if *collect != "" && src == nil && *heldID == "" {
		return errors.New("run: flag --collect needs a workspace: --workspace-dir, --workspace-git, or --lease of a lease that holds one")
	}
	req := lease.AcquireRequest{Company: *company, Run: *runID, Workspace: *wsName, Project: project}
	if *hold && *wsName != "" {
		req.Policy = lease.ReuseByWorkspace
	}
	what := ""
	if *heldID != "" {
		what = "in held lease " + *heldID
	} else if len(pos) == 1 {
		what = pos[0]
	} else {
		req.Scope = &authz.Scope{Company: *company, Workspace: *wsName, Project: project, Agent: *agent}
		what = "through the binding of " + req.Scope.String()
	}
	if *company == "" && *heldID == "" {
		return fmt.Errorf("run %s: flag --company is required (a lease belongs to a company)", what)
	}
	g.runnerBinary = *binary
	g.connectTimeout = *connectTimeout
	var acct *accountUse
	if *account != "" {
		acct = &accountUse{ref: *account, file: *accountFile, projects: projects}
		// Refuse a malformed reference or path before leasing.
		if _, err := managedAccountSecret(acct.ref, cmp.Or(acct.file, "/tmp/f"), acct.projects); err != nil {
			return fmt.Errorf("run %s: flag --managed-account: %w", what, err)
		}
	}
	var ws *wsUse
	if src != nil || *collect != "" {
		ws = &wsUse{src: src, collect: *collect}
	}
	return runTask(ctx, g, what, pos, req, argv, acct, held{id: *heldID, keep: *hold || *heldID != ""}, ws)
}

// wsUse is the workspace of envctl run: the source prepared before the
// task (nil: the held lease's one live workspace) and where its changes
// are collected ("" for nowhere).
type wsUse struct {
	src     *workspace.Source
	collect string
}

// splitGitRef splits REPO[@REF] at its last "@" when what follows names a
// ref (no ":") and what precedes is not a URL's user (git@host:path keeps
// its "@").
func splitGitRef(s string) (repo, ref string) {
	i := strings.LastIndex(s, "@")
	if i <= 0 || i == len(s)-1 || strings.Contains(s[i+1:], ":") {
		return s, ""
	}
	before := s[:i]
	if j := strings.Index(before, "://"); j >= 0 && !strings.Contains(before[j+3:], "/") {
		return s, "" // https://user@host/repo
	}
	return before, s[i+1:]
}

// held says which held lease a run uses (id, envctl run --lease) and
// whether the lease is kept after the task (--hold, --lease).
type held struct {
	id   string
	keep bool
}

// accountUse is the managed account of envctl run --managed-account.
type accountUse struct {
	ref      string
	file     string // "" for the default
	projects []string
}

// runReport is what --json prints.
type runReport struct {
	Lease   string              `json:"lease"`
	Task    string              `json:"task"`
	Runner  string              `json:"runner"` // the runner binary's SHA-256
	Output  []lease.OutputChunk `json:"output"`
	Exit    *lease.Exit         `json:"exit,omitempty"`
	Stopped bool                `json:"stopped"`
	Proofs  []lease.StopProof   `json:"proofs,omitempty"`
	Receipt *lease.Lease        `json:"receipt,omitempty"`
	// Held says the lease was kept after the task (--hold, --lease).
	Held bool `json:"held,omitempty"`
	// Workspace is the workspace the task ran in (--workspace-dir,
	// --workspace-git, or the held lease's), Collected the receipt of
	// --collect.
	Workspace *workspace.Workspace `json:"workspace,omitempty"`
	Collected *workspace.Receipt   `json:"collected,omitempty"`
	ExitCode  int                  `json:"exitCode"`
}

// runTask leases the target with a runner and runs argv through
// lease.Handle.Run: the handle carries g.as's authority, so no principal
// is passed again and no controller call is made here.
func runTask(ctx context.Context, g *globals, what string, pos []string, req lease.AcquireRequest, argv []string, acct *accountUse, hd held, wsu *wsUse) (err error) {
	progress := func(format string, a ...any) {
		if !g.json {
			fmt.Fprintf(g.stderr, "envctl: "+format+"\n", a...)
		}
	}
	if hd.id == "" {
		if req.Runner, err = runnerSet(g, progress); err != nil {
			return fmt.Errorf("run %s: %w", what, err)
		}
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	if len(pos) == 1 {
		if req.EnvironmentID, err = lookupID(ctx, g, sys.Catalog(), pos[0]); err != nil {
			return err
		}
	}
	var h *lease.Handle
	if hd.id != "" {
		// The held lease's runner binary is the one it was acquired for
		// (Lease.Runner); Open authorizes --as on the lease.
		progress("opening held lease %s", hd.id)
		h, err = sys.Leases().Open(ctx, g.as, hd.id)
	} else {
		progress("leasing %s for company %s", what, req.Company)
		h, err = sys.Leases().Acquire(ctx, g.as, req)
	}
	if err != nil {
		return fmt.Errorf("run %s: %w", what, err)
	}
	rep := &runReport{Lease: h.ID(), Held: hd.keep}
	// Whatever happens from here, the lease is released (its task hook
	// stops and verifies every task first) and its receipt printed, or,
	// held, kept and its id printed.
	defer func() {
		if hd.keep {
			if jerr := holdRun(g, h, rep); jerr != nil && err == nil {
				err = jerr
			}
			return
		}
		rerr, jerr := releaseRun(ctx, g, h, rep)
		if jerr != nil && err == nil {
			err = jerr
		}
		if rerr != nil && (err == nil || errors.As(err, new(*exitStatus))) {
			err = fmt.Errorf("run %s: release lease %s: %w", what, h.ID(), rerr)
		}
	}()
	progress("lease %s (%s, sandbox %s)", h.ID(), h.Lease().Provider, h.SandboxID())
	if r := h.Lease().Runner; r != nil {
		rep.Runner = r.SHA256
	}
	cmd := lease.Command{Argv: argv, StopGrace: 2 * time.Second}
	if cmd.TaskID, err = newID("task"); err != nil {
		return err
	}
	rep.Task = cmd.TaskID
	var ws *workspace.Workspace
	if wsu != nil || hd.id != "" {
		if ws, err = taskWorkspace(ctx, g, sys, h, req, wsu, progress); err != nil {
			return fmt.Errorf("run %s: %w", what, err)
		}
		if ws != nil {
			cmd.Dir, rep.Workspace = ws.Dir, ws
		}
	}
	if acct != nil {
		file := cmp.Or(acct.file, "/tmp/berth-managed-account-"+strings.TrimPrefix(rep.Task, "task_"))
		use, err := managedAccountSecret(acct.ref, file, acct.projects)
		if err != nil {
			return fmt.Errorf("run %s: flag --managed-account: %w", what, err)
		}
		cmd.Secrets = []lease.SecretUse{use}
		cmd.Env = map[string]string{ManagedAccountFileEnv: file}
	}
	progress("starting the runner (sha256 %s) and the task...", shortSum(rep.Runner))
	actx, acancel := context.WithTimeout(ctx, cmp.Or(g.connectTimeout, 2*time.Minute))
	task, err := h.Run(actx, cmd)
	acancel()
	if err != nil {
		if reason := secretRefusal(err); acct != nil && reason != "" {
			return fmt.Errorf("run %s: managed account %s refused (%s): %w", what, acct.ref, reason, err)
		}
		return fmt.Errorf("run %s: start the task: %w", what, err)
	}
	progress("task %s started on the runner", task.ID())

	// The output is streamed (or, with --json, collected) from the store as
	// it comes, stdout and stderr each to its own, byte for byte; Wait
	// returns the exit. Ctrl-C (ctx ends) stops the task with proof and
	// keeps reading until its exit is stored.
	type outcome struct {
		exit lease.Exit
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		exit, err := task.Wait(context.WithoutCancel(ctx))
		done <- outcome{exit, err}
	}()
	streamed := make(chan error, 1)
	go func() { streamed <- copyOutput(context.WithoutCancel(ctx), g, task, rep) }()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		rep.Stopped, rep.ExitCode = true, 130
		progress("interrupted: stopping task %s...", task.ID())
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		p, serr := task.Stop(sctx)
		cancel()
		if p.TaskID != "" {
			rep.Proofs = []lease.StopProof{p}
			printProof(g, p)
		}
		if serr != nil {
			return fmt.Errorf("run %s: stop task %s: %w", what, task.ID(), serr)
		}
		select {
		case o = <-done:
			if o.err == nil {
				rep.Exit = &o.exit
			}
			<-streamed
		case <-time.After(30 * time.Second): // stopped with proof; its exit was not stored
		}
		return &exitStatus{code: 130}
	}
	if o.err != nil {
		return fmt.Errorf("run %s: task %s: %w", what, task.ID(), o.err)
	}
	if err := <-streamed; err != nil {
		return fmt.Errorf("run %s: output of task %s: %w", what, task.ID(), err)
	}
	rep.Exit = &o.exit
	if hd.keep {
		// The turn ends with its task's processes, proven by the runner
		// (a background process the task left is stopped too): a later
		// release of the held lease, from any process, then owes this
		// task nothing and needs no runner connected.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		p, serr := task.Stop(sctx)
		cancel()
		if serr != nil {
			return fmt.Errorf("run %s: task %s exited; stopping what it left: %w", what, task.ID(), serr)
		}
		rep.Proofs = append(rep.Proofs, p)
	}
	code := o.exit.Code
	if code < 0 {
		code = 128 + signalNumber(o.exit.Signal)
	}
	if wsu != nil && wsu.collect != "" {
		// After the task, whatever its exit: its changes are for the
		// host to decide on. A failed collect fails envctl (exit 1).
		if rep.Collected, err = collectWorkspace(ctx, g, sys, h, ws, wsu.collect, progress); err != nil {
			return fmt.Errorf("run %s: task %s exited %d; collecting its workspace: %w", what, task.ID(), code, err)
		}
	}
	if o.exit.Error != "" {
		progress("task %s: %s", task.ID(), o.exit.Error)
	}
	rep.ExitCode = code
	if code != 0 {
		return &exitStatus{code: code}
	}
	return nil
}

// newID returns prefix, "_" and 16 random bytes in hex: a task id as
// berth makes them.
func newID(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return prefix + "_" + hex.EncodeToString(b[:]), nil
}

// secretRefusal returns the reason (docs/errors.md) for which a task's
// secrets were refused at dispatch: a managed account whose project auth
// check does not match (handover.ErrMismatch), an unknown secret env key,
// or a lease that is not the session's; "" for another error.
func secretRefusal(err error) string {
	r := errcode.ReasonOf(err)
	if errors.Is(err, handover.ErrMismatch) || r == "secret_unknown" || r == "lease_mismatch" {
		return r
	}
	return ""
}

// copyOutput reads the task's stored output until it ended: each chunk to
// envctl's stdout or stderr as the task wrote it, or, with --json, into
// the report.
func copyOutput(ctx context.Context, g *globals, task *lease.Task, rep *runReport) error {
	for after := uint64(0); ; {
		cs, err := task.Output(ctx, after)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range cs {
			after = c.Seq
			if g.json {
				rep.Output = append(rep.Output, c)
				continue
			}
			w := g.stdout
			if c.Stream == "stderr" {
				w = g.stderr
			}
			if _, err := w.Write(c.Data); err != nil {
				return err
			}
		}
	}
}

// shortSum returns the first 12 digits of a SHA-256, or "?".
func shortSum(sum string) string {
	if len(sum) < 12 {
		return "?"
	}
	return sum[:12]
}

// printProof prints the runner's stop proof: its word (runner_attested),
// never "verified": the lease's release checks from outside.
func printProof(g *globals, p lease.StopProof) {
	if g.json {
		return
	}
	fmt.Fprintf(g.stderr, "envctl: stop proof of task %s, attested by the runner (%s): complete %t, methods %s, survivors %v",
		p.TaskID, drivers.EvidenceRunnerAttested, p.Complete, strings.Join(p.Methods, "+"), p.Survivors)
	if len(p.Failed) > 0 {
		fmt.Fprintf(g.stderr, ", checks that could not run %v", p.Failed)
	}
	fmt.Fprintln(g.stderr)
}

// releaseRun releases the lease of envctl run (destroy) and prints its
// receipt, or with --json the report; it returns the release's error and
// the report's.
func releaseRun(ctx context.Context, g *globals, h *lease.Handle, rep *runReport) (rerr, jerr error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	l, rerr := h.Release(rctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	rep.Receipt = l
	if l != nil && !g.json {
		fmt.Fprintf(g.stderr, "envctl: lease %s %s, cleanup %s", l.ID, l.Status, dash(string(l.Cleanup)))
		if l.CleanupEvidenceKind != drivers.EvidenceNone {
			fmt.Fprintf(g.stderr, " by %s", l.CleanupEvidenceKind)
		}
		if l.CleanupEvidence != "" {
			fmt.Fprintf(g.stderr, " (%s)", l.CleanupEvidence)
		}
		if l.FailureReason != "" {
			fmt.Fprintf(g.stderr, "; reason: %s", l.FailureReason)
		}
		fmt.Fprintln(g.stderr)
	}
	if g.json && rep.Task != "" {
		jerr = writeJSON(g.stdout, rep)
	}
	return rerr, jerr
}

// holdRun keeps the lease of envctl run --hold or --lease and says how
// to use and end it; with --json it prints the report.
func holdRun(g *globals, h *lease.Handle, rep *runReport) error {
	if g.json {
		if rep.Task != "" {
			return writeJSON(g.stdout, rep)
		}
		return nil
	}
	fmt.Fprintf(g.stderr, "envctl: lease %s held: run in it with 'envctl run --lease %s -- ARGV', end it with 'envctl lease release %s'\n", h.ID(), h.ID(), h.ID())
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

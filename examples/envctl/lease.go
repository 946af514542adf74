package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/templates"
)

const leaseUsage = `usage: envctl lease COMMAND [FLAGS]

  acquire ENV --company C [--run R] [--workspace W] [--require CAP,...] [--policy P]
  acquire --company C [--workspace W] [--project P] [--agent A] [--run R]
          [--require CAP,...] [--policy P]
          P: ephemeral|reuse_by_environment|reuse_by_workspace|retain_on_failure
  release LEASE [--disposition keep|stop|destroy] [--failed] [--reason S]
  list [--env ENV] [--company C] [--status S]
  sweep [--claim-grace D] [--retention DURATION]

--claim-grace (acquire and sweep; default 1m) is the grace this process
adds to the startup budget when it claims an acquisition in progress: a
sweep takes over an acquisition, as abandoned by a crashed process, only
once that claim has run out (LEASE-9).

With ENV the environment is leased by id or name (instance admins and local
operators); without it, through the binding of the scope (company,
workspace, project, agent), which is how agents lease. berth authorizes
every lease command as --as; a company never leases an environment bound to
another company, and lease records show config and metadata only to those
who may read configs.

envctl ends after each command; the lease outlives it as a record. For host
drivers (local, ssh) the session lives in the envctl process that acquired
it (its holder). A later 'lease release' has no live session: while the
holder's claim lasts (three heartbeats, 30s) it records pending_cleanup
naming the holder; after that it ends the lease only by a check on the host
(kill the processes tagged with the lease id, verify none is left), and
stays pending_cleanup if it cannot check. For sandbox drivers (docker, daytona)
the sandbox keeps running until 'lease release' destroys (or stops) it by
its provider id. The fake driver's sandboxes live in the envctl process
only.

release defaults to --disposition destroy. A release or cleanup the provider
did not confirm leaves the lease pending_cleanup; 'lease sweep' retries it,
expires leases past their expiry and destroys orphan sandboxes labelled by
this instance. It then prunes the records of leases that ended more than
--retention ago (default 30 days; their cleanup receipts are kept until
then).
`

func runLease(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(g.stderr, leaseUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("lease "+sub, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	if sub == "acquire" || sub == "sweep" {
		fs.DurationVar(&g.claimGrace, "claim-grace", g.claimGrace, "grace added to the startup budget in acquisition claims (default 1m)")
	}
	switch sub {
	case "acquire":
		company := fs.String("company", "", "company the lease is for (required)")
		runID := fs.String("run", "", "run id (the same run acquiring again gets the same lease)")
		workspace := fs.String("workspace", "", "workspace (working directory hint; reuse key of reuse_by_workspace)")
		pol := fs.String("policy", string(lease.Ephemeral), "lease policy")
		require := fs.String("require", "", "required capabilities, comma separated (exec,terminal,...)")
		project := fs.String("project", "", "project of the scope (lease through its binding)")
		agent := fs.String("agent", "", "agent of the scope (lease through its binding)")
		pos, err := parseInterleaved(fs, args)
		if err != nil || len(pos) > 1 || len(pos) == 1 && (*project != "" || *agent != "") {
			fmt.Fprint(g.stderr, leaseUsage)
			return errUsage
		}
		req := lease.AcquireRequest{Company: *company, Run: *runID, Workspace: *workspace, Policy: lease.Policy(*pol)}
		envArg := ""
		if len(pos) == 1 {
			envArg = pos[0]
		} else {
			req.Scope = &authz.Scope{Company: *company, Workspace: *workspace, Project: *project, Agent: *agent}
		}
		return leaseAcquire(ctx, g, envArg, req, *require)
	case "release":
		disp := fs.String("disposition", "destroy", "policy, keep, stop or destroy")
		failed := fs.Bool("failed", false, "the run failed (a retain_on_failure lease is kept)")
		reason := fs.String("reason", "", "failure reason recorded with --failed")
		pos, err := parseInterleaved(fs, args)
		if err != nil || len(pos) != 1 {
			fmt.Fprint(g.stderr, leaseUsage)
			return errUsage
		}
		d := lease.Disposition(*disp)
		switch d {
		case "", lease.ByPolicy, lease.Keep, lease.Stop, lease.Destroy:
		default:
			return fmt.Errorf("lease release %s: flag --disposition: %q is not policy, keep, stop or destroy", pos[0], *disp)
		}
		return leaseRelease(ctx, g, pos[0], lease.ReleaseOptions{Disposition: d, RunFailed: *failed, Reason: *reason})
	case "list":
		env := fs.String("env", "", "only leases of this environment (id or name)")
		company := fs.String("company", "", "only leases of this company")
		status := fs.String("status", "", "only leases in this status")
		pos, err := parseInterleaved(fs, args)
		if err != nil || len(pos) != 0 {
			fmt.Fprint(g.stderr, leaseUsage)
			return errUsage
		}
		return leaseList(ctx, g, *env, *company, *status)
	case "sweep":
		fs.DurationVar(&g.leaseRetention, "retention", 0, "keep records of ended leases this long, then prune them (0: 30 days; negative: forever)")
		pos, err := parseInterleaved(fs, args)
		if err != nil || len(pos) != 0 {
			fmt.Fprint(g.stderr, leaseUsage)
			return errUsage
		}
		return leaseSweep(ctx, g)
	}
	fmt.Fprint(g.stderr, leaseUsage)
	return errUsage
}

func leaseAcquire(ctx context.Context, g *globals, envArg string, req lease.AcquireRequest, require string) error {
	what := envArg
	if req.Scope != nil {
		what = "through the binding of " + req.Scope.String()
	}
	if req.Company == "" {
		return fmt.Errorf("lease acquire %s: flag --company is required (a lease belongs to a company)", what)
	}
	switch req.Policy {
	case lease.Ephemeral, lease.ReuseByEnvironment, lease.ReuseByWorkspace, lease.RetainOnFailure:
	default:
		return fmt.Errorf("lease acquire %s: flag --policy: %q is not one of ephemeral, reuse_by_environment, reuse_by_workspace, retain_on_failure", what, req.Policy)
	}
	var err error
	if req.Required, err = parseCaps(require); err != nil {
		return fmt.Errorf("lease acquire %s: flag --require: %w", what, err)
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	if envArg != "" {
		if req.EnvironmentID, err = lookupID(ctx, g, sys.Catalog(), envArg); err != nil {
			return err
		}
	}
	h, err := sys.Leases().Acquire(ctx, g.as, req)
	if err != nil {
		return fmt.Errorf("lease acquire %s: %w", what, err)
	}
	l, err := sys.Leases().Get(ctx, g.as, h.ID())
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, l)
	}
	verb := "acquired"
	if h.Resumed() {
		verb = "resumed"
	}
	fmt.Fprintf(g.stdout, "lease %s %s: environment %s, driver %s", l.ID, verb, l.Environment, l.Provider)
	if l.ProviderLeaseID != "" {
		fmt.Fprintf(g.stdout, ", provider lease %s", l.ProviderLeaseID)
	}
	fmt.Fprintln(g.stdout)
	printLeaseDetails(g.stdout, l)
	if d, err := sys.Drivers().Lookup(l.Provider); err == nil && d.Capabilities().Kind == drivers.KindHost {
		fmt.Fprintln(g.stdout, "  note: this host session ends when envctl exits; 'envctl lease release "+l.ID+"' ends the lease by a check on the host once this process's claim expired (30s)")
	}
	return nil
}

func leaseRelease(ctx context.Context, g *globals, id string, opts lease.ReleaseOptions) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	l, err := sys.Leases().Release(ctx, g.as, id, opts)
	if l != nil {
		if perr := printLease(g, l); perr != nil {
			return perr
		}
	}
	return err
}

func leaseList(ctx context.Context, g *globals, envArg, company, status string) error {
	f := lease.Filter{Company: company}
	if status != "" {
		st := lease.Status(status)
		if status == "pending" {
			st = lease.StatusStarting
		}
		switch st {
		case lease.StatusStarting, lease.StatusActive, lease.StatusReleased, lease.StatusExpired, lease.StatusFailed,
			lease.StatusRetained, lease.StatusPendingCleanup, lease.StatusPooled:
		default:
			return fmt.Errorf("lease list: flag --status: %q is not a lease status (starting, active, released, expired, failed, retained, pending_cleanup)", status)
		}
		f.Statuses = []lease.Status{st}
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	if envArg != "" {
		if f.Environment, err = lookupID(ctx, g, sys.Catalog(), envArg); err != nil {
			return fmt.Errorf("lease list: flag --env: %w", err)
		}
	}
	ls, err := sys.Leases().List(ctx, g.as, f)
	if err != nil {
		return fmt.Errorf("lease list: %w", err)
	}
	if g.json {
		return writeJSON(g.stdout, ls)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tSTATUS\tCOMPANY\tENVIRONMENT\tDRIVER\tPROVIDER LEASE\tPOLICY\tCLEANUP\tACQUIRED")
	for _, l := range ls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, l.Status, l.Company, l.Environment, l.Provider,
			dash(l.ProviderLeaseID), l.Policy, dash(string(l.Cleanup)), l.AcquiredAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func leaseSweep(ctx context.Context, g *globals) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	// System.Sweep: setup sessions past their TTL (their sandboxes
	// destroyed), the lease store, wanted template deletions. The JSON
	// keeps the lease report's fields at the top.
	all, err := sys.Sweep(ctx, g.as)
	rep := all.Leases
	if g.json {
		out := struct {
			lease.SweepReport
			Sessions         templates.SessionSweepReport `json:"sessions"`
			TemplatesDeleted int                          `json:"templatesDeleted"`
		}{rep, all.Sessions, all.TemplatesDeleted}
		if jerr := writeJSON(g.stdout, out); jerr != nil {
			return jerr
		}
	} else {
		printSweep(g.stdout, rep)
		fmt.Fprintf(g.stdout, "  %d setup sessions past their TTL ended\n  %d setup sandboxes of ended sessions destroyed\n  %d templates deleted at the provider\n",
			all.Sessions.TimedOut, all.Sessions.SandboxesDestroyed, all.TemplatesDeleted)
	}
	if err != nil {
		return fmt.Errorf("lease sweep: %w", err)
	}
	return nil
}

// printSweep prints a SweepReport one fact per line.
func printSweep(w io.Writer, rep lease.SweepReport) {
	fmt.Fprintf(w, "sweep: %d leases claimed\n", rep.Claimed)
	for _, l := range []struct {
		n    int
		what string
	}{
		{rep.Expired, "leases past their expiry, sandbox destroyed"},
		{rep.Interrupted, "acquisitions whose acquirer vanished"},
		{rep.CleanedUp, "pending cleanups now confirmed by the provider"},
		{rep.StillPending, "cleanups still not confirmed (retried by the next sweep)"},
		{rep.OrphansDestroyed, "orphan sandboxes of this instance destroyed"},
		{rep.OrphansFailed, "orphan sandboxes whose destroy was not confirmed"},
		{rep.EnvironmentsSkipped, "environments without orphan search (host drivers, or listing failed)"},
		{rep.Pruned, "records of ended leases pruned after the retention period"},
	} {
		fmt.Fprintf(w, "  %d %s\n", l.n, l.what)
	}
}

func printLease(g *globals, l *lease.Lease) error {
	if g.json {
		return writeJSON(g.stdout, l)
	}
	fmt.Fprintf(g.stdout, "lease %s: %s, environment %s, driver %s", l.ID, l.Status, l.Environment, l.Provider)
	if l.ProviderLeaseID != "" {
		fmt.Fprintf(g.stdout, ", provider lease %s", l.ProviderLeaseID)
	}
	fmt.Fprintln(g.stdout)
	printLeaseDetails(g.stdout, l)
	return nil
}

func printLeaseDetails(w io.Writer, l *lease.Lease) {
	fmt.Fprintf(w, "  status: %s  policy: %s  company: %s\n", l.Status, l.Policy, l.Company)
	if l.Run != "" || l.Workspace != "" {
		fmt.Fprintf(w, "  run: %s  workspace: %s\n", dash(l.Run), dash(l.Workspace))
	}
	if !l.ExpiresAt.IsZero() {
		fmt.Fprintf(w, "  expires: %s\n", l.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if l.Replaces != "" {
		fmt.Fprintf(w, "  replaces: lease %s (%s)\n", l.Replaces, l.ReplaceReason)
	}
	if l.Cleanup != "" {
		fmt.Fprintf(w, "  cleanup: %s", l.Cleanup)
		if l.CleanupEvidenceKind != drivers.EvidenceNone {
			fmt.Fprintf(w, " by %s", l.CleanupEvidenceKind)
		}
		if l.CleanupEvidence != "" {
			fmt.Fprintf(w, " (%s)", l.CleanupEvidence)
		}
		fmt.Fprintln(w)
	}
	if l.FailureReason != "" {
		fmt.Fprintf(w, "  reason: %s\n", l.FailureReason)
	}
}

// parseCaps parses "exec,terminal" into a capability set.
func parseCaps(s string) (drivers.Set, error) {
	var set drivers.Set
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		var c drivers.Capability
		if err := c.UnmarshalText([]byte(name)); err != nil {
			return 0, err
		}
		set |= drivers.NewSet(c)
	}
	return set, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

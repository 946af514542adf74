package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/lease"
)

const authCheckUsage = `usage:
  envctl auth-check record ENV --company C (--account REF | --account-file FILE) [--project P]... --status succeeded|failed [--message S]
  envctl auth-check show [--company C] [--account REF]
  envctl auth-check clear --company C --account REF

A managed account is a credential the host hands into a sandbox with a task
(AUTH-2). record prepares it for the saved environment ENV (id or name),
the company and the project set: any earlier record of the company and
account is replaced by a pending one for the environment's current config
fingerprint and provider, and then the result of the project auth check
the operator ran is stored (--status). --account-file stores the account
(the file's bytes) in envctl's secret store first and prints only its
reference. A task gets the account only while the record matches exactly:
version 1, succeeded, the lease's fingerprint and provider, the same
projects. show lists records (the values never); clear removes one.
`

// projectList is a repeatable --project flag.
type projectList []string

func (l *projectList) String() string { return strings.Join(*l, ",") }

func (l *projectList) Set(s string) error {
	if s == "" {
		return errors.New("a project id is not empty")
	}
	*l = append(*l, s)
	return nil
}

func runAuthCheck(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(g.stderr, authCheckUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("auth-check "+args[0], flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() { fmt.Fprint(g.stderr, authCheckUsage) }
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	company := fs.String("company", "", "the company the account is used for")
	account := fs.String("account", "", "the managed account's secret reference (secret:ID@vN)")
	var projects projectList
	switch args[0] {
	case "record":
		accountFile := fs.String("account-file", "", "a file holding the account; stored as a new secret")
		status := fs.String("status", "", "the project auth check's result: succeeded or failed")
		message := fs.String("message", "", "why the check failed (no secrets)")
		fs.Var(&projects, "project", "a project id of the run (repeatable)")
		pos, err := parseInterleaved(fs, args[1:])
		if err != nil || len(pos) != 1 {
			fmt.Fprint(g.stderr, authCheckUsage)
			return errUsage
		}
		st := handover.Status(*status)
		switch {
		case *company == "":
			return errors.New("auth-check record: flag --company is required")
		case (*account == "") == (*accountFile == ""):
			return errors.New("auth-check record: exactly one of --account and --account-file is required")
		case st != handover.StatusSucceeded && st != handover.StatusFailed:
			return fmt.Errorf("auth-check record: flag --status %q: want succeeded or failed", *status)
		}
		return authCheckRecord(ctx, g, pos[0], *company, *account, *accountFile, projects, st, *message)
	case "show":
		pos, err := parseInterleaved(fs, args[1:])
		if err != nil || len(pos) != 0 {
			fmt.Fprint(g.stderr, authCheckUsage)
			return errUsage
		}
		return authCheckShow(ctx, g, *company, *account)
	case "clear":
		pos, err := parseInterleaved(fs, args[1:])
		if err != nil || len(pos) != 0 {
			fmt.Fprint(g.stderr, authCheckUsage)
			return errUsage
		}
		if *company == "" || *account == "" {
			return errors.New("auth-check clear: flags --company and --account are required")
		}
		sys, err := openSystem(ctx, g)
		if err != nil {
			return err
		}
		defer sys.Close()
		if err := sys.Handover().Clear(ctx, g.as, *company, *account); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "cleared the project auth check of %s for company %q\n", *account, *company)
		return nil
	}
	fmt.Fprint(g.stderr, authCheckUsage)
	return errUsage
}

func authCheckRecord(ctx context.Context, g *globals, envArg, company, account, accountFile string, projects []string, st handover.Status, message string) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	id, err := lookupID(ctx, g, sys.Catalog(), envArg)
	if err != nil {
		return fmt.Errorf("auth-check record: %w", err)
	}
	if accountFile != "" {
		b, err := os.ReadFile(accountFile)
		if err != nil {
			return fmt.Errorf("auth-check record: --account-file: %w", err)
		}
		ref, err := sys.Secrets().Put(ctx, "managed-account", "account", string(b))
		if err != nil {
			return fmt.Errorf("auth-check record: store the account: %w", err)
		}
		account = ref.String()
		fmt.Fprintf(g.stderr, "stored the managed account as %s\n", account)
	}
	rec, err := sys.Handover().PrepareManagedAccount(ctx, g.as, company, account, id, projects)
	if err != nil {
		return err
	}
	rec, err = sys.Handover().RecordResult(ctx, g.as, company, account, rec.Preparation, st, message)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, rec)
	}
	printAuthCheck(g, rec)
	return nil
}

func authCheckShow(ctx context.Context, g *globals, company, account string) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	var recs []handover.AuthCheck
	if account != "" {
		if company == "" {
			return errors.New("auth-check show: --account needs --company")
		}
		rec, err := sys.Handover().Get(ctx, g.as, company, account)
		if err != nil {
			return err
		}
		recs = []handover.AuthCheck{rec}
	} else if recs, err = sys.Handover().List(ctx, g.as, company); err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, recs)
	}
	if len(recs) == 0 {
		fmt.Fprintln(g.stdout, "no project auth checks")
	}
	for _, r := range recs {
		printAuthCheck(g, r)
	}
	return nil
}

func printAuthCheck(g *globals, r handover.AuthCheck) {
	checked := "not yet"
	if !r.CheckedAt.IsZero() {
		checked = r.CheckedAt.Format(time.RFC3339) + " by " + r.CheckedBy
	}
	fmt.Fprintf(g.stdout, "%s for company %q: %s (version %d), environment %s, provider %s, projects [%s], fingerprint %s, checked %s",
		r.AccountRef, r.Company, r.Status, r.Version, r.Environment, r.Provider.Driver+"/"+r.Provider.Account, strings.Join(r.Projects, ","), r.Fingerprint, checked)
	if r.Message != "" {
		fmt.Fprintf(g.stdout, ": %s", r.Message)
	}
	fmt.Fprintln(g.stdout)
}

// managedAccountSecret is the secret use a task carries to get managed
// account ref written (0600) at path for projects: what `envctl run
// --managed-account REF` puts into its task (lease.Command.Secrets).
// Handle.Run resolves it through System.Handover at dispatch and
// delivery, only while the project auth check matches exactly.
func managedAccountSecret(ref, path string, projects []string) (lease.SecretUse, error) {
	if _, err := handover.ParseAccountRef(ref); err != nil {
		return lease.SecretUse{}, err
	}
	u := lease.SecretUse{Source: lease.SecretFromManagedAccount, Ref: ref, File: path, Projects: projects}
	if err := u.Validate(); err != nil {
		return lease.SecretUse{}, fmt.Errorf("managed account %s: %w", ref, err)
	}
	return u, nil
}

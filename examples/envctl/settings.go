package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/instance"
)

const settingsUsage = `usage:
  envctl settings show [--json]
  envctl settings set [--enable-environments=BOOL] [--managed-sandbox-only=BOOL]
                      [--minimum-isolation LEVEL] [--quota-per-company N]
                      [--quota-per-company-env N] [--revision N] [--json]

The instance settings (CFG-9). With enableEnvironments off, no
environment can be resolved, probed, leased or run (releases, sweeps and
catalog reads and edits go on); with enableManagedSandboxOnly on, host drivers
(local, ssh) are unavailable as targets (managed_sandbox_only) while their
saved environments stay readable, and any other target must declare container
isolation at least (isolation_below_minimum). --minimum-isolation (none, container,
gvisor, microvm) refuses, for every principal, a target whose driver declares
less isolation (isolation_below_minimum): gvisor admits Docker with runtime
runsc only. --quota-per-company and
--quota-per-company-env are the lease quotas every process of the instance
enforces (live leases of one company, and of one company on one
environment; 0: no limit). Never written, environments are enabled, host
drivers allowed and the quotas 8 and 4. set changes only the flags it is given; with
--revision it writes only over that revision (a stale one is a conflict),
else over whatever is stored. Only instance admins and local operators may
set; every role may show.
`

// optBool is a flag that remembers whether it was given; --name alone
// means true.
type optBool struct{ v *bool }

func (b *optBool) String() string {
	if b == nil || b.v == nil {
		return ""
	}
	return strconv.FormatBool(*b.v)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false, not %q", s)
	}
	b.v = &v
	return nil
}

func (b *optBool) IsBoolFlag() bool { return true }

// optInt is a flag that remembers whether it was given.
type optInt struct{ v *int }

func (n *optInt) String() string {
	if n == nil || n.v == nil {
		return ""
	}
	return strconv.Itoa(*n.v)
}

func (n *optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return fmt.Errorf("want a number of leases, 0 or more, not %q", s)
	}
	n.v = &v
	return nil
}

func runSettings(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(g.stderr, settingsUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("settings "+args[0], flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() { fmt.Fprint(g.stderr, settingsUsage) }
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	var enable, managed optBool
	var perCompany, perEnv optInt
	var minimum *drivers.Isolation
	revision := instance.AnyRevision
	switch args[0] {
	case "show":
	case "set":
		fs.Var(&enable, "enable-environments", "let environments be working targets (true or false)")
		fs.Var(&managed, "managed-sandbox-only", "allow managed sandboxes only, no host drivers (true or false)")
		fs.Func("minimum-isolation", "the least isolation every target must declare: none, container, gvisor or microvm", func(s string) error {
			var l drivers.Isolation
			if err := l.UnmarshalText([]byte(s)); err != nil {
				return err
			}
			minimum = &l
			return nil
		})
		fs.Var(&perCompany, "quota-per-company", "live leases one company may hold (0: no limit)")
		fs.Var(&perEnv, "quota-per-company-env", "live leases one company may hold on one environment (0: no limit)")
		fs.Int64Var(&revision, "revision", instance.AnyRevision, "the revision the change is based on (default: whatever is stored)")
	default:
		fmt.Fprint(g.stderr, settingsUsage)
		return errUsage
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil || len(pos) != 0 {
		fmt.Fprint(g.stderr, settingsUsage)
		return errUsage
	}
	if args[0] == "set" && enable.v == nil && managed.v == nil && minimum == nil && perCompany.v == nil && perEnv.v == nil {
		return fmt.Errorf("settings set: give --enable-environments, --managed-sandbox-only, --minimum-isolation, --quota-per-company or --quota-per-company-env")
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	var s instance.Settings
	if args[0] == "show" {
		s, err = sys.Settings().Get(ctx, g.as)
	} else {
		s, err = sys.Settings().Update(ctx, g.as, revision, func(c *instance.Settings) error {
			if enable.v != nil {
				c.EnableEnvironments = *enable.v
			}
			if managed.v != nil {
				c.ManagedSandboxOnly = *managed.v
			}
			if minimum != nil {
				c.MinimumIsolation = *minimum
			}
			if perCompany.v != nil {
				c.QuotaPerCompany = *perCompany.v
			}
			if perEnv.v != nil {
				c.QuotaPerCompanyEnvironment = *perEnv.v
			}
			return nil
		})
	}
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, s)
	}
	fmt.Fprintf(g.stdout, "enableEnvironments: %t\nenableManagedSandboxOnly: %t\nminimumIsolation: %s\nquotaPerCompany: %s\nquotaPerCompanyEnvironment: %s\n",
		s.EnableEnvironments, s.ManagedSandboxOnly, s.MinimumIsolation, quotaText(s.QuotaPerCompany), quotaText(s.QuotaPerCompanyEnvironment))
	if s.Revision == 0 {
		fmt.Fprintln(g.stdout, "revision: 0 (never written: the defaults)")
	} else {
		fmt.Fprintf(g.stdout, "revision: %d, updated %s by %s\n", s.Revision, s.UpdatedAt.UTC().Format(time.RFC3339), s.UpdatedBy)
	}
	return nil
}

// quotaText prints a quota: its number, or "none" for 0.
func quotaText(n int) string {
	if n <= 0 {
		return "0 (no limit)"
	}
	return strconv.Itoa(n)
}

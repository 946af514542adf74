package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/berthdev/berth/qualification"
)

const qualificationUsage = `usage: envctl qualification show ENV --company C

show prints whether the saved environment ENV (id or name) is qualified for
the company as it is configured now, and why (a record of another company,
or one made for another image, target, account or template, shows as not
qualified), then the company's last Test of it (envctl probe), with its
time. Reading it calls no driver and allocates nothing.
`

// qualificationOut is the printed form of a qualification view.
type qualificationOut struct {
	Environment string `json:"environment"`
	Company     string `json:"company"`
	qualification.View
}

func runQualification(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprint(g.stderr, qualificationUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("qualification show", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	company := fs.String("company", "", "company (required: qualifications are company-bound)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil || len(pos) != 1 {
		fmt.Fprint(g.stderr, qualificationUsage)
		return errUsage
	}
	if *company == "" {
		return fmt.Errorf("qualification show %s: flag --company is required (qualifications are company-bound)", pos[0])
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	id, err := lookupID(ctx, g, sys.Catalog(), pos[0])
	if err != nil {
		return fmt.Errorf("qualification show: %w", err)
	}
	v, err := sys.Prober().Qualification(ctx, g.as, id, *company)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, qualificationOut{Environment: id, Company: *company, View: v})
	}
	if v.Qualified {
		fmt.Fprintf(g.stdout, "environment %s is qualified for company %q: platform %s, recorded %s\n",
			pos[0], *company, v.Platform, v.RecordedAt.Format(time.RFC3339))
	} else {
		fmt.Fprintf(g.stdout, "environment %s is not qualified for company %q (%s): %s\n", pos[0], *company, v.Code, v.Reason)
	}
	return printLastTest(ctx, g, sys.Prober(), id, *company)
}

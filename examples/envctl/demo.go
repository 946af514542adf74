package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/sqlite"
)

// runDemo runs the main job end to end on the embedded default: a temporary
// SQLite store, the local host and the fake sandbox provider in test mode.
func runDemo(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 {
		fmt.Fprintln(g.stderr, "usage: envctl demo")
		return errUsage
	}
	dir, err := os.MkdirTemp("", "berth-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	workdir := filepath.Join(dir, "workspace")
	if err := os.Mkdir(workdir, 0o755); err != nil {
		return err
	}
	dbPath := filepath.Join(dir, "berth.db")
	secrets, err := secretfile.Open(ctx, dbPath)
	if err != nil {
		return err
	}
	db, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	fakeDrv := fake.New(nil)
	sys, err := berth.New(ctx, &berth.Options{
		Stores:   db.Stores(),
		Drivers:  []drivers.Driver{local.New(nil), fakeDrv},
		Secrets:  secrets,
		TestMode: true,
	})
	if err != nil {
		return err
	}
	defer sys.Close()

	w := g.stdout
	step := 0
	section := func(title string) { step++; fmt.Fprintf(w, "\n%d. %s\n", step, title) }
	operator := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	board := authz.Principal{ID: "bea", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	agent := authz.Principal{ID: "agent-7", Role: authz.RoleAgent, Companies: []string{"acme"}}

	fmt.Fprintln(w, "berth demo: save execution targets, read them as different people, run a command on each")
	fmt.Fprintf(w, "store: SQLite at %s (temporary); secrets sealed in %s\n", dbPath, filepath.Base(dbPath)+".secrets")

	section("Drivers and what they can do (reading this allocates nothing)")
	rows, err := driverRows(ctx, sys.Catalog(), operator, (&system{System: sys, stores: db.Stores(), db: db}).settings(), nil)
	if err != nil {
		return err
	}
	if err := printDrivers(w, rows); err != nil {
		return err
	}

	section(fmt.Sprintf("Save two environments as %s", operator))
	hostEnv, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{
		Name: "this-host", Description: "the machine envctl runs on", Driver: "local",
		Config: map[string]any{"workdir": workdir},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   saved %s\n", hostEnv)
	const pastedKey = "demo-api-key-0d5e9b" // a secret an operator pastes
	sandboxEnv, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{
		Name: "fake-sandbox", Description: "an in-memory sandbox provider (test mode)", Driver: fakeDrv.Name(),
		Config:   map[string]any{"image": fakeDrv.DefaultImageIdentity().String(), "api_key": pastedKey},
		Env:      map[string]string{"GREETING": "hello"},
		Metadata: map[string]string{"team": "platform"},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   saved %s\n", sandboxEnv)
	if ref, ok := sandboxEnv.Config.SecretRef("api_key"); ok {
		fmt.Fprintf(w, "   the pasted api_key was moved to the secret store; the config keeps only %s\n", ref)
	}
	_, err = sys.Catalog().Create(ctx, operator, environment.CreateRequest{
		Name: "second-host", Driver: "local", Config: map[string]any{"workdir": workdir},
	})
	fmt.Fprintf(w, "   a second local environment is refused: %v\n", err)

	section("What each reader sees")
	adminView, err := sys.Catalog().Get(ctx, operator, sandboxEnv.ID)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "   operator (full view, secrets as references):")
	if err := printView(&globals{stdout: indent(w, "     ")}, adminView); err != nil {
		return err
	}
	boardView, err := sys.Catalog().Get(ctx, board, sandboxEnv.ID)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "   board member (redacted view):")
	if err := printView(&globals{stdout: indent(w, "     ")}, boardView); err != nil {
		return err
	}
	_, err = sys.Catalog().Create(ctx, agent, environment.CreateRequest{Name: "agent-made", Driver: "local"})
	fmt.Fprintf(w, "   an agent trying to create an environment: %v\n", err)

	section("Run a command on each environment, then release it")
	released, confirmed := 0, 0
	for _, v := range []*environment.View{hostEnv, sandboxEnv} {
		h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{
			Company: "acme", EnvironmentID: v.ID, Run: "demo-run-1", Workspace: workdir,
		})
		if err != nil {
			return fmt.Errorf("acquire %s: %w", v, err)
		}
		l := h.Lease()
		fmt.Fprintf(w, "   %s: lease %s acquired (%s %s)\n", v.Name, l.ID, l.Provider, l.ProviderLeaseID)
		argv := []string{"uname", "-sm"}
		res, err := h.Exec(ctx, lease.Command{Argv: argv, Env: v.Env})
		if err != nil {
			return fmt.Errorf("exec on %s: %w", v, err)
		}
		fmt.Fprintf(w, "     $ %s\n     %s (exit %d, %s)\n", strings.Join(argv, " "),
			strings.TrimSpace(string(res.Stdout)), res.ExitCode, res.Duration.Round(1000))
		after, err := sys.Leases().Release(ctx, operator, l.ID, lease.ReleaseOptions{Disposition: lease.Destroy})
		if err != nil && !errors.Is(err, lease.ErrCleanupPending) {
			return fmt.Errorf("release %s: %w", v, err)
		}
		released++
		if after.Cleanup == "confirmed" {
			confirmed++
		}
		fmt.Fprintf(w, "     released: lease %s, cleanup %s (%s)\n", after.Status, after.Cleanup, after.CleanupEvidence)
	}

	section("Summary")
	rep, err := sys.Leases().Sweep(ctx, operator)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   2 environments saved, %d leases released, %d with provider-confirmed cleanup\n", released, confirmed)
	fmt.Fprintf(w, "   sweep afterwards: %d pending cleanups, %d orphan sandboxes destroyed, %d environments without orphan search (host drivers)\n",
		rep.StillPending, rep.OrphansDestroyed, rep.EnvironmentsSkipped)
	fmt.Fprintf(w, "   the pasted secret appears in no view above; the secret file holds it sealed with AES-256-GCM\n")
	if confirmed != released {
		return fmt.Errorf("demo: %d of %d releases were not confirmed by the provider", released-confirmed, released)
	}
	return nil
}

// driverRow is one driver as `envctl drivers` shows it: the registry's
// description, the gate's verdict (test mode included) and the provider
// health last measured for each endpoint, read from the store (never
// measured here, CAP-1).
type driverRow struct {
	drivers.DriverInfo
	Health []environment.ProviderHealth `json:"health,omitempty"`
	// BelowMinimum, if not empty, says that the driver's isolation at its
	// defaults is below the instance's minimum (instance.Settings.Minimum).
	BelowMinimum string `json:"belowMinimum,omitempty"`
}

// driverRows describes every registered driver as the catalog's gate sees
// it for p (test mode included), with the instance settings that settings
// reads (a host driver under managed-sandbox-only is unavailable with the
// reason managed_sandbox_only) and the health records of health.
func driverRows(ctx context.Context, cat *environment.Catalog, p authz.Principal, settings instance.Reader, health []environment.ProviderHealth) ([]driverRow, error) {
	infos, err := cat.Drivers(ctx, p)
	if err != nil {
		return nil, err
	}
	set, err := settings.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	var rows []driverRow
	for _, info := range infos {
		if err := set.Admit(info.Name, info.Kind == drivers.KindHost); err != nil && info.Available {
			info.Available, info.Reason, info.Effective = false, fmt.Errorf("%w: %w", err, drivers.ErrUnavailable).Error(), 0
		}
		row := driverRow{DriverInfo: info}
		if m := set.Minimum(); info.Available && info.Isolation < m {
			// Issue 56: a config may raise the level (Docker's runtime
			// runsc); at its defaults this driver is refused.
			row.BelowMinimum = fmt.Sprintf("isolation %s at its defaults is below the minimum %s", info.Isolation, m)
		}
		for _, h := range health {
			if h.Driver == info.Name {
				row.Health = append(row.Health, h)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// printDrivers lists drivers with their effective capabilities and, under
// each, the provider endpoints last measured.
func printDrivers(w io.Writer, rows []driverRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "   DRIVER\tKIND\tISOLATION\tAVAILABLE\tCAPABILITIES")
	for _, d := range rows {
		avail := "yes"
		if !d.Available {
			avail = "no: " + d.Reason
		}
		iso := d.Isolation.String()
		if d.BelowMinimum != "" {
			iso += " (" + d.BelowMinimum + ")"
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\n", d.Name, d.Kind, iso, avail, strings.ReplaceAll(d.Effective.String(), ",", " "))
		if p := d.Plugin; p != nil {
			fmt.Fprintf(tw, "     plugin\t\t\tversion %s\tpin sha256:%s, binary %s\n", p.Version, p.SHA256, p.Binary)
		}
		for _, h := range d.Health {
			state := "available"
			if !h.Available {
				state = "UNAVAILABLE (" + string(h.Code) + "): " + h.Reason
			}
			fmt.Fprintf(tw, "     endpoint %s\t\t\t%s\tmeasured %s\n", h.Endpoint, state, h.CheckedAt.UTC().Format(time.RFC3339))
		}
	}
	return tw.Flush()
}

// indent prefixes every line written to w.
func indent(w io.Writer, prefix string) io.Writer { return &indenter{w: w, prefix: prefix, bol: true} }

type indenter struct {
	w      io.Writer
	prefix string
	bol    bool
}

func (i *indenter) Write(p []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line == "" {
			continue
		}
		if i.bol {
			if _, err := io.WriteString(i.w, i.prefix); err != nil {
				return 0, err
			}
		}
		if _, err := io.WriteString(i.w, line); err != nil {
			return 0, err
		}
		i.bol = strings.HasSuffix(line, "\n")
	}
	return len(p), nil
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/examples/internal/hostkey"
	"github.com/berthdev/berth/probe"
)

const envUsage = `usage: envctl env COMMAND [FLAGS]

  create --name N --driver D [--config FILE|-] [--description S] [--env K=V]... [--meta K=V]...
  create --json-body FILE|-
  list [--driver D] [--status active|archived] [--company C]
  show ID|NAME [--company C]
  update ID|NAME --revision N [--name N] [--description S] [--config FILE|-] [--env K=V]... [--meta K=V]...
  update ID|NAME --json-body FILE|-
  archive ID|NAME
  delete ID|NAME [--yes]
  health [ID|NAME]   measure provider health now (all environments when none is named)
  trust-host-key ID|NAME [--fingerprint SHA256:...] [--yes]
                     scan the host key an SSH environment's server offers, print its
                     fingerprint, and save it in known_hosts once confirmed

--config reads the driver config as a JSON object from FILE (or - for stdin).
--json-body reads the whole request as one JSON object (the library's
CreateRequest / UpdateRequest shape: name, description, driver, config, env,
metadata, pool, requireIsolation (the least isolation the target must
declare: none, container, gvisor, microvm); baseRevision for update),
decoded strictly: unknown and reserved
server-owned fields are refused by name. It excludes the other request flags.
Secret fields (private keys, API keys) and each value of a secret map (the
docker and daytona config.env) are moved into the secret store and never
printed back; --env K=V is shown inline and refuses credential-like names.
A warm pool set by create or update (--json-body's "pool") is not filled by
envctl, which exits after the command: a long-running host fills it when it
saves an environment, else the next sweep of a running host (the server's)
or pool maintenance does.
trust-host-key asks before it saves: compare the fingerprint with the
server's (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on it) and type
yes, or pass the fingerprint you checked with --fingerprint (--yes trusts
what the scan found). It scans again before saving and refuses a key that
changed meanwhile.
With --company, list adds the company's last Test of each environment (a
column LAST TEST: "passed", or "failing since TIME (code)") and show prints
it with its time and sentence (text output only; --json prints the
environment as without it).
`

func runEnv(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(g.stderr, envUsage)
		return errUsage
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	cat := sys.Catalog()
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("env "+sub, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	switch sub {
	case "create":
		name := fs.String("name", "", "environment name (required)")
		driver := fs.String("driver", "", "driver name (required)")
		desc := fs.String("description", "", "description")
		cfgPath := fs.String("config", "", "driver config JSON file, - for stdin")
		body := fs.String("json-body", "", "the whole request as JSON, FILE or - for stdin")
		var env, meta kvList
		fs.Var(&env, "env", "environment variable K=V (repeatable)")
		fs.Var(&meta, "meta", "metadata K=V (repeatable)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return errUsage
		}
		var req environment.CreateRequest
		if *body != "" {
			if err := onlyFlag(fs, "json-body", "json"); err != nil {
				return err
			}
			data, err := readInput(g, *body)
			if err != nil {
				return err
			}
			if req, err = environment.DecodeCreateRequest(data); err != nil {
				return err
			}
		} else {
			cfg, err := readConfig(g, *cfgPath)
			if err != nil {
				return err
			}
			req = environment.CreateRequest{Name: *name, Description: *desc, Driver: *driver, Config: cfg, Env: env, Metadata: meta}
		}
		v, err := cat.Create(ctx, g.as, req)
		if err != nil {
			return err
		}
		return printView(g, v)
	case "list":
		driver := fs.String("driver", "", "only this driver")
		status := fs.String("status", "", "only this status")
		company := fs.String("company", "", "add the company's last Test of each environment")
		if _, err := parseInterleaved(fs, args); err != nil {
			return errUsage
		}
		vs, err := cat.List(ctx, g.as, environment.ListFilter{Driver: *driver, Status: environment.Status(*status)})
		if err != nil {
			return err
		}
		if g.json {
			return writeJSON(g.stdout, vs)
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		head := "ID\tNAME\tDRIVER\tISOLATION\tSTATUS\tREV\tPROVIDER"
		if *company != "" {
			head += "\tLAST TEST"
		}
		fmt.Fprintln(tw, head+"\tNOTE")
		for _, v := range vs {
			iso := v.Isolation.String()
			if v.RequireIsolation != drivers.IsolationNone {
				iso += " (requires " + v.RequireIsolation.String() + ")"
			}
			row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", v.ID, v.Name, v.Driver, iso, v.Status, v.Revision, healthCell(v.Health))
			if *company != "" {
				row += "\t" + lastTestCell(ctx, g, sys.Prober(), v.ID, *company)
			}
			fmt.Fprintf(tw, "%s\t%s\n", row, v.Unavailable)
		}
		return tw.Flush()
	case "health":
		pos, err := parseInterleaved(fs, args)
		if err != nil || len(pos) > 1 {
			fmt.Fprint(g.stderr, envUsage)
			return errUsage
		}
		return envHealth(ctx, g, cat, pos)
	case "show", "archive", "delete", "update", "trust-host-key":
	default:
		fmt.Fprint(g.stderr, envUsage)
		return errUsage
	}

	// Commands on one environment.
	rev := fs.Int64("revision", 0, "revision the update is based on (required for update)")
	name := fs.String("name", "", "new name")
	desc := fs.String("description", "", "new description")
	cfgPath := fs.String("config", "", "new driver config JSON file, - for stdin")
	yes := fs.Bool("yes", false, "delete (or trust a host key) without asking")
	fingerprint := fs.String("fingerprint", "", "trust-host-key: the SHA256 fingerprint you checked")
	company := fs.String("company", "", "show: the company whose last Test to print")
	body := fs.String("json-body", "", "the whole update request as JSON, FILE or - for stdin")
	var env, meta kvList
	fs.Var(&env, "env", "environment variable K=V (repeatable; replaces all)")
	fs.Var(&meta, "meta", "metadata K=V (repeatable; replaces all)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return errUsage
	}
	if len(pos) != 1 {
		fmt.Fprintf(g.stderr, "envctl env %s: want one environment id or name\n", sub)
		return errUsage
	}
	id, err := lookupID(ctx, g, cat, pos[0])
	if err != nil {
		return err
	}
	switch sub {
	case "show":
		v, err := cat.Get(ctx, g.as, id)
		if err != nil {
			return err
		}
		if err := printView(g, v); err != nil || g.json || *company == "" {
			return err
		}
		return printLastTest(ctx, g, sys.Prober(), id, *company)
	case "trust-host-key":
		return trustHostKey(ctx, g, cat, id, *fingerprint, *yes)
	case "archive":
		cur, err := cat.Get(ctx, g.as, id)
		if err != nil {
			return err
		}
		base := cur.Revision
		if *rev != 0 {
			base = *rev
		}
		v, err := cat.Archive(ctx, g.as, id, base)
		if err != nil {
			return err
		}
		return printView(g, v)
	case "update":
		if *body != "" {
			if err := onlyFlag(fs, "json-body", "json"); err != nil {
				return err
			}
			data, err := readInput(g, *body)
			if err != nil {
				return err
			}
			req, err := environment.DecodeUpdateRequest(data)
			if err != nil {
				return err
			}
			v, err := cat.Update(ctx, g.as, id, req)
			if err != nil {
				return err
			}
			return printView(g, v)
		}
		if *rev == 0 {
			return fmt.Errorf("env update %s: --revision is required (optimistic update)", pos[0])
		}
		req := environment.UpdateRequest{BaseRevision: *rev, Env: env, Metadata: meta}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "name":
				req.Name = name
			case "description":
				req.Description = desc
			}
		})
		if *cfgPath != "" {
			if req.Config, err = readConfig(g, *cfgPath); err != nil {
				return err
			}
		}
		v, err := cat.Update(ctx, g.as, id, req)
		if err != nil {
			return err
		}
		return printView(g, v)
	case "delete":
		br, err := cat.BlastRadius(ctx, g.as, id)
		if err != nil {
			return err
		}
		if !*yes || !br.Deletable() {
			if g.json {
				if err := writeJSON(g.stdout, br); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(g.stdout, "blast radius of %s:\n", pos[0])
				printBlastRadius(g.stdout, br)
			}
			if !br.Deletable() {
				return fmt.Errorf("env delete %s: refused: %s", pos[0], strings.Join(br.Blockers, "; "))
			}
			fmt.Fprintln(g.stdout, "run again with --yes to delete")
			return nil
		}
		if _, err := cat.Delete(ctx, g.as, id, br.Revision); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "deleted environment %q (%s)\n", br.EnvironmentName, br.EnvironmentID)
		return nil
	}
	return errUsage
}

// lookupID accepts an environment id or a unique name.
func lookupID(ctx context.Context, g *globals, cat *environment.Catalog, s string) (string, error) {
	vs, err := cat.List(ctx, g.as, environment.ListFilter{})
	if err != nil {
		return "", err
	}
	for _, v := range vs {
		if v.ID == s {
			return v.ID, nil
		}
	}
	for _, v := range vs {
		if v.Name == s {
			return v.ID, nil
		}
	}
	return "", &errcode.Error{Target: fmt.Sprintf("environment %q", s),
		Message: fmt.Sprintf("Could not find environment %q: check the name or id with 'envctl env list'.", s), Err: errcode.ErrNotFound}
}

// onlyFlag refuses any flag of fs that was set besides the allowed ones.
func onlyFlag(fs *flag.FlagSet, allowed ...string) error {
	var extra []string
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(allowed, f.Name) {
			extra = append(extra, "--"+f.Name)
		}
	})
	if len(extra) > 0 {
		return fmt.Errorf("%s: --%s carries the whole request; drop %s", fs.Name(), allowed[0], strings.Join(extra, ", "))
	}
	return nil
}

// readInput reads all of FILE, or stdin for "-".
func readInput(g *globals, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(g.stdin)
	}
	return os.ReadFile(path)
}

func readConfig(g *globals, path string) (map[string]any, error) {
	if path == "" {
		return nil, nil
	}
	var r io.Reader = g.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("config %s: not a JSON object: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("config %s: more than one JSON value", path)
	}
	return cfg, nil
}

func printView(g *globals, v *environment.View) error {
	if g.json {
		return writeJSON(g.stdout, v)
	}
	w := g.stdout
	fmt.Fprintf(w, "%s\n", v)
	if v.Description != "" {
		fmt.Fprintf(w, "  description: %s\n", v.Description)
	}
	if v.Redacted {
		fmt.Fprintln(w, "  (redacted view: config, env vars and metadata are not shown)")
	}
	if v.Unavailable != "" {
		fmt.Fprintf(w, "  unavailable: %s\n", v.Unavailable)
	}
	fmt.Fprintf(w, "  isolation: %s", v.Isolation)
	if v.RequireIsolation != 0 {
		fmt.Fprintf(w, " (requires %s)", v.RequireIsolation)
	}
	fmt.Fprintln(w)
	if t := v.ActiveTemplate; t != nil {
		fmt.Fprintf(w, "  active template: %s (%s), drift %s\n", t.ID, t.Identity, t.Drift)
	}
	if len(v.Config) > 0 {
		b, err := json.Marshal(v.Config)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  config: %s\n", b)
	}
	for _, m := range []struct {
		name string
		kv   map[string]string
	}{{"env", v.Env}, {"metadata", v.Metadata}} {
		if len(m.kv) > 0 {
			b, _ := json.Marshal(m.kv)
			fmt.Fprintf(w, "  %s: %s\n", m.name, b)
		}
	}
	return nil
}

func printBlastRadius(w io.Writer, br *environment.BlastRadius) {
	b, _ := json.MarshalIndent(br, "  ", "  ")
	fmt.Fprintf(w, "  %s\n", b)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// healthCell is the PROVIDER column of env list: the health last measured
// and its age, "not measured", or "-" for host targets.
func healthCell(h *environment.HealthView) string {
	switch {
	case h == nil:
		return "-"
	case h.CheckedAt == nil:
		return "not measured"
	}
	return fmt.Sprintf("%s %s ago", h.Status, time.Since(*h.CheckedAt).Round(time.Second))
}

// envHealth measures the provider health of the named environment, or of
// every environment the principal may see, through the catalog (which
// authorizes each: ActionProbe).
func envHealth(ctx context.Context, g *globals, cat *environment.Catalog, pos []string) error {
	var ids []string
	if len(pos) == 1 {
		id, err := lookupID(ctx, g, cat, pos[0])
		if err != nil {
			return err
		}
		ids = append(ids, id)
	} else {
		vs, err := cat.List(ctx, g.as, environment.ListFilter{Status: environment.StatusActive})
		if err != nil {
			return err
		}
		for _, v := range vs {
			ids = append(ids, v.ID)
		}
	}
	type row struct {
		Environment string                  `json:"environment"`
		Health      *environment.HealthView `json:"health"`
	}
	var rows []row
	for _, id := range ids {
		h, err := cat.RefreshHealth(ctx, g.as, id)
		if err != nil {
			return err
		}
		rows = append(rows, row{id, h})
	}
	if g.json {
		return writeJSON(g.stdout, rows)
	}
	for _, r := range rows {
		if r.Health == nil {
			fmt.Fprintf(g.stdout, "%s: host target, no provider health (a probe checks the host)\n", r.Environment)
			continue
		}
		fmt.Fprintf(g.stdout, "%s: provider %s %s\n", r.Environment, r.Health.Endpoint, r.Health)
	}
	return nil
}

// lastTestCell is the company's last Test of environment id in a few
// words: "passed 10:42 UTC", "failing since 10:40 UTC (unreachable)",
// "never", or why it could not be read.
func lastTestCell(ctx context.Context, g *globals, pr *probe.Prober, id, company string) string {
	v, err := pr.Qualification(ctx, g.as, id, company)
	if err != nil {
		return "unknown (" + errcode.MessageOf(err) + ")"
	}
	lt := v.LastTest
	switch {
	case lt == nil:
		return "never"
	case lt.OK:
		return "passed " + lt.At.UTC().Format("2006-01-02 15:04 UTC")
	}
	since := lt.FailingSince
	if since.IsZero() {
		since = lt.At
	}
	return "failing since " + since.UTC().Format("2006-01-02 15:04 UTC") + " (" + lt.Code + ")"
}

// printLastTest prints the company's last Test of environment id: when,
// the outcome and its sentence.
func printLastTest(ctx context.Context, g *globals, pr *probe.Prober, id, company string) error {
	v, err := pr.Qualification(ctx, g.as, id, company)
	if err != nil {
		return err
	}
	lt := v.LastTest
	if lt == nil {
		fmt.Fprintf(g.stdout, "  last test for company %q: never (envctl probe %s --company %s tests it)\n", company, id, company)
		return nil
	}
	fmt.Fprintf(g.stdout, "  last test for company %q: %s\n", company, lastTestCell(ctx, g, pr, id, company))
	if !lt.OK || lt.Message != "" {
		fmt.Fprintf(g.stdout, "    at %s: %s\n", lt.At.UTC().Format(time.RFC3339), lt.Message)
	}
	return nil
}

// trustHostKey scans the host key of SSH environment id, prints its
// fingerprint and, once confirmed (typed yes, --fingerprint or --yes),
// saves it in the environment's known_hosts.
func trustHostKey(ctx context.Context, g *globals, cat *environment.Catalog, id, fingerprint string, yes bool) error {
	v, err := cat.Get(ctx, g.as, id)
	if err != nil {
		return err
	}
	sc, err := hostkey.Scan(ctx, v)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "host %s:%d offers the key %s\n  %s\n", sc.Host, sc.Port, sc.Fingerprint, sc.KnownHostsLine)
	if sc.Trusted {
		fmt.Fprintf(g.stdout, "environment %s already trusts this key; nothing changed\n", v.Name)
		return nil
	}
	switch {
	case fingerprint != "":
	case yes:
		fingerprint = sc.Fingerprint
	default:
		fmt.Fprintf(g.stderr, "Compare it with the server's fingerprint. Trust this key for %s? Type yes: ", v.Name)
		answer, _ := bufio.NewReader(g.stdin).ReadString('\n')
		if strings.TrimSpace(answer) != "yes" {
			return fmt.Errorf("trust-host-key %s: not confirmed; nothing was saved", v.Name)
		}
		fingerprint = sc.Fingerprint
	}
	nv, _, err := hostkey.Trust(ctx, cat, g.as, v, fingerprint)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "environment %s trusts %s now (revision %d); Test it: envctl probe %s --company C\n", nv.Name, sc.Fingerprint, nv.Revision, nv.Name)
	return nil
}

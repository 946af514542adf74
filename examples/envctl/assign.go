package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
)

const assignUsage = `usage: envctl assign COMMAND [FLAGS]

  set KIND [KEY] ENV --company C   bind ENV (id or name); KIND is workspace,
                                   project or agent (KEY is its id), or
                                   default (the instance default: no KEY, no
                                   company, applies to every company)
  show [--company C] [--env ENV] [--kind KIND]
  clear KIND [KEY] --company C     remove a binding (no --company for default)
  resolve --company C [--workspace W] [--project P] [--agent A] [--require CAP,...]

Binding keys are per company: acme and globex may each bind workspace ws,
so set and clear name the company (the instance default has none).

resolve prints the binding that won (workspace > project > agent > instance
default) and its environment, or the refusal naming the binding: an
archived, deleted, unavailable or under-capable target is never replaced by
a weaker binding or by the local host.
`

func runAssign(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(g.stderr, assignUsage)
		return errUsage
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("assign "+sub, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	company := fs.String("company", "", "company")
	var (
		envArg, kind                        *string
		workspace, project, agent, requires *string
	)
	switch sub {
	case "set", "clear":
	case "show":
		envArg = fs.String("env", "", "only bindings of this environment (id or name)")
		kind = fs.String("kind", "", "only bindings of this kind")
	case "resolve":
		workspace = fs.String("workspace", "", "workspace id of the run")
		project = fs.String("project", "", "project id of the run")
		agent = fs.String("agent", "", "agent id of the run")
		requires = fs.String("require", "", "required capabilities, comma separated (exec,terminal,...)")
	default:
		fmt.Fprint(g.stderr, assignUsage)
		return errUsage
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		fmt.Fprint(g.stderr, assignUsage)
		return errUsage
	}
	switch sub {
	case "set":
		// KIND ENV for the default, KIND KEY ENV otherwise.
		if len(pos) < 2 {
			fmt.Fprint(g.stderr, assignUsage)
			return errUsage
		}
		ref, err := parseBindingRef(pos[:len(pos)-1])
		if err != nil {
			return fmt.Errorf("assign set: %w", err)
		}
		return assignSet(ctx, g, ref, *company, pos[len(pos)-1])
	case "clear":
		ref, err := parseBindingRef(pos)
		if err != nil {
			return fmt.Errorf("assign clear: %w", err)
		}
		switch {
		case ref.Kind == environment.BindingInstanceDefault && *company != "":
			return fmt.Errorf("assign clear %s: the instance default belongs to no company: drop --company", ref)
		case ref.Kind != environment.BindingInstanceDefault && *company == "":
			return fmt.Errorf("assign clear %s: flag --company is required (binding keys are per company)", ref)
		}
		ref.Company = *company
		return assignClear(ctx, g, ref)
	case "show":
		if len(pos) != 0 {
			fmt.Fprint(g.stderr, assignUsage)
			return errUsage
		}
		return assignShow(ctx, g, *company, *envArg, *kind)
	default: // resolve
		if len(pos) != 0 {
			fmt.Fprint(g.stderr, assignUsage)
			return errUsage
		}
		required, err := parseCaps(*requires)
		if err != nil {
			return fmt.Errorf("assign resolve: flag --require: %w", err)
		}
		scope := authz.Scope{Company: *company, Workspace: *workspace, Project: *project, Agent: *agent}
		return assignResolve(ctx, g, scope, required)
	}
}

// parseBindingRef parses KIND [KEY]; the kind "default" is the instance
// default and takes no key.
func parseBindingRef(args []string) (environment.BindingRef, error) {
	if len(args) == 0 {
		return environment.BindingRef{}, errors.New("want KIND [KEY]")
	}
	kind := environment.BindingKind(args[0])
	if args[0] == "default" {
		kind = environment.BindingInstanceDefault
	}
	if !kind.Valid() {
		return environment.BindingRef{}, fmt.Errorf("binding kind %q is not one of workspace, project, agent, default", args[0])
	}
	ref := environment.BindingRef{Kind: kind}
	switch {
	case kind == environment.BindingInstanceDefault && len(args) != 1:
		return ref, fmt.Errorf("the instance default takes no key, got %q", args[1:])
	case kind != environment.BindingInstanceDefault && len(args) != 2:
		return ref, fmt.Errorf("a %s binding wants one key (the %s id)", kind, kind)
	case len(args) == 2:
		ref.Key = args[1]
	}
	return ref, nil
}

func assignSet(ctx context.Context, g *globals, ref environment.BindingRef, company, envArg string) error {
	if ref.Kind != environment.BindingInstanceDefault && company == "" {
		return fmt.Errorf("assign set %s: flag --company is required (the binding belongs to a company)", ref)
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	id, err := lookupID(ctx, g, sys.Catalog(), envArg)
	if err != nil {
		return fmt.Errorf("assign set %s: %w", ref, err)
	}
	b, err := sys.Assignments().Set(ctx, g.as, environment.Binding{BindingRef: environment.BindingRef{Kind: ref.Kind, Company: company, Key: ref.Key}, EnvironmentID: id}, environment.AnyRevision)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, b)
	}
	fmt.Fprintf(g.stdout, "%s -> environment %q (%s), revision %d\n", b, envArg, b.EnvironmentID, b.Revision)
	return nil
}

func assignClear(ctx context.Context, g *globals, ref environment.BindingRef) error {
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	b := environment.Binding{BindingRef: ref}
	if err := sys.Assignments().Clear(ctx, g.as, ref, environment.AnyRevision); err != nil {
		return fmt.Errorf("assign clear %s: %w", b, err)
	}
	if g.json {
		return writeJSON(g.stdout, map[string]any{"cleared": ref})
	}
	fmt.Fprintf(g.stdout, "cleared the %s\n", b)
	return nil
}

func assignShow(ctx context.Context, g *globals, company, envArg, kind string) error {
	f := environment.BindingFilter{Company: company, Kind: environment.BindingKind(kind)}
	if kind == "default" {
		f.Kind = environment.BindingInstanceDefault
	}
	if f.Kind != "" && !f.Kind.Valid() {
		return fmt.Errorf("assign show: flag --kind: %q is not one of workspace, project, agent, default", kind)
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	if envArg != "" {
		if f.EnvironmentID, err = lookupID(ctx, g, sys.Catalog(), envArg); err != nil {
			return fmt.Errorf("assign show: flag --env: %w", err)
		}
	}
	bs, err := sys.Assignments().List(ctx, g.as, f)
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(g.stdout, bs)
	}
	names := map[string]string{}
	if vs, err := sys.Catalog().List(ctx, g.as, environment.ListFilter{}); err == nil {
		for _, v := range vs {
			names[v.ID] = v.Name
		}
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tKEY\tCOMPANY\tENVIRONMENT\tNAME\tREV")
	for _, b := range bs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", b.Kind, dash(b.Key), dash(b.Company), b.EnvironmentID, dash(names[b.EnvironmentID]), b.Revision)
	}
	return tw.Flush()
}

// resolved is the printed form of a Resolution: the environment's identity
// only, never its config.
type resolved struct {
	Scope        authz.Scope         `json:"scope"`
	Binding      environment.Binding `json:"binding"`
	Environment  envSummary          `json:"environment"`
	Capabilities drivers.Set         `json:"capabilities"`
	Required     drivers.Set         `json:"required"`
}

// refusal is the printed form of the *environment.Error of a binding
// that won and cannot be used.
type refusal struct {
	Scope       authz.Scope          `json:"scope"`
	Refused     environment.Binding  `json:"refusedBinding"`
	Environment string               `json:"environment"`
	Reason      string               `json:"reason"`
	Missing     []drivers.Capability `json:"missing,omitempty"`
	Error       string               `json:"error"`
}

type envSummary struct {
	ID     string             `json:"id"`
	Name   string             `json:"name"`
	Driver string             `json:"driver"`
	Status environment.Status `json:"status"`
}

func assignResolve(ctx context.Context, g *globals, scope authz.Scope, required drivers.Set) error {
	if scope.Company == "" {
		return errors.New("assign resolve: flag --company is required")
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	res, err := sys.Assignments().Resolve(ctx, g.as, scope, required)
	var be *environment.Error
	if errors.As(err, &be) && be.Binding != nil {
		if g.json {
			if jerr := writeJSON(g.stdout, refusal{Scope: scope, Refused: *be.Binding, Environment: be.Environment,
				Reason: be.Reason, Missing: be.Missing, Error: be.Error()}); jerr != nil {
				return jerr
			}
		} else {
			fmt.Fprintf(g.stdout, "refused: the %s won for %s, but it cannot be used: %s\n", be.Binding, scope, be.Reason)
		}
		return err
	}
	if err != nil {
		return err
	}
	env := res.Environment
	out := resolved{Scope: res.Scope, Binding: res.Binding, Capabilities: res.Capabilities, Required: res.Required,
		Environment: envSummary{ID: env.ID, Name: env.Name, Driver: env.Driver, Status: env.Status}}
	if g.json {
		return writeJSON(g.stdout, out)
	}
	fmt.Fprintf(g.stdout, "%s: the %s won -> environment %q (%s), driver %s\n", scope, res.Binding, env.Name, env.ID, env.Driver)
	fmt.Fprintf(g.stdout, "  capabilities: %s\n", res.Capabilities)
	if res.Required != 0 {
		fmt.Fprintf(g.stdout, "  required: %s (covered)\n", res.Required)
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/images/resolve"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const imageUsage = `usage: envctl image COMMAND [FLAGS]

  pin REF [--platform os/arch[/variant]] [--insecure-registry HOST[:PORT]]...
  load FILE.tar [--name REPO] [--engine HOST]
                                   put an image saved with 'docker save' into
                                   a Docker engine that reaches no registry,
                                   and print its pinned reference
  templates ENV                    the captured templates of an environment
  capture LEASE --name N           capture a live sandbox lease into a template
  promote TEMPLATE                 make it the environment's active template
  rollback TEMPLATE                promote a superseded template again
  revoke TEMPLATE [--delete] [--reason S]
  history ENV                      the active pointer's append-only history
  sweep                            retry the wanted template deletions
  setup ENV [--script FILE] [--interactive] [--name N] [--promote] [--rebuild]
                                   a setup session: scripted steps and/or a terminal
  session show|cancel SESSION      a setup session and its progress events
  session capture SESSION [--promote]
  terminal SESSION                 the terminal of a session waiting for you

Leases of an environment start from its active template while its source
config (identity fields, image, account) is the one the template was
captured from; 'env show' prints the drift (relinked, detached). revoke
clears the pointer when the template is active (new leases use the
configured image; there is no fall back); with --delete the template is
deleted at the provider at once when no live lease uses it, else the wish
is recorded and 'image sweep' deletes it later. --json prints a template as
{id, environment, state, identity, sourceFingerprint, createdAt,
deleteReceipt}, templates as an array of them.

pin resolves an image tag to repo@sha256:<digest> of the manifest for the
platform (default linux/amd64), choosing it out of a multi-platform index.
Registries on loopback are reached over plain HTTP; other plain-HTTP
registries must be named with --insecure-registry. Access is anonymous.
`

// strList is a repeatable string flag.
type strList []string

func (l *strList) String() string { return fmt.Sprint(*l) }

func (l *strList) Set(s string) error { *l = append(*l, s); return nil }

// pinned is the printed form of an image pin.
type pinned struct {
	Reference string       `json:"reference"`
	Identity  string       `json:"identity"`
	Index     string       `json:"index,omitempty"`
	Platform  *v1.Platform `json:"platform,omitempty"`
}

func runImage(ctx context.Context, g *globals, args []string) error {
	if len(args) > 0 && (args[0] == "setup" || args[0] == "session" || args[0] == "terminal") {
		return runSetup(ctx, g, args)
	}
	if len(args) > 0 && args[0] == "load" {
		return runImageLoad(ctx, g, args[1:])
	}
	if len(args) > 0 && args[0] != "pin" {
		return runTemplates(ctx, g, args)
	}
	if len(args) == 0 {
		fmt.Fprint(g.stderr, imageUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("image pin", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	plat := fs.String("platform", "", "platform os/arch[/variant] (default linux/amd64)")
	var insecure strList
	fs.Var(&insecure, "insecure-registry", "registry host reachable over plain HTTP (repeatable)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil || len(pos) != 1 {
		fmt.Fprint(g.stderr, imageUsage)
		return errUsage
	}
	ref, err := images.ParseReference(pos[0])
	if err != nil {
		return fmt.Errorf("image pin: %w", err)
	}
	var p v1.Platform
	if *plat != "" {
		if p, err = resolve.ParsePlatform(*plat); err != nil {
			return fmt.Errorf("image pin %s: flag --platform: %w", ref, err)
		}
	}
	r := resolve.New(&resolve.Options{InsecureRegistries: insecure, TTL: -1})
	res, err := r.Resolve(ctx, ref, p)
	if err != nil {
		return fmt.Errorf("image pin: %w", err)
	}
	out := pinned{Reference: ref.String(), Identity: res.Identity.String(), Index: res.Index}
	if res.Index != "" {
		out.Platform = &res.Platform
	}
	if g.json {
		return writeJSON(g.stdout, out)
	}
	fmt.Fprintln(g.stdout, out.Identity)
	if res.Index != "" {
		fmt.Fprintf(g.stderr, "chosen for %s out of index %s\n", res.Platform.String(), res.Index)
	}
	return nil
}

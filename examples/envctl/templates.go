package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/templates"
)

// templateOut is the printed form of a template (issue 27's JSON shape).
type templateOut struct {
	ID                string           `json:"id"`
	Environment       string           `json:"environment"`
	State             templates.State  `json:"state"`
	Identity          string           `json:"identity,omitempty"`
	SourceFingerprint string           `json:"sourceFingerprint,omitempty"`
	CreatedAt         time.Time        `json:"createdAt"`
	DeleteReceipt     *drivers.Receipt `json:"deleteReceipt,omitempty"`
	// DeleteWanted: revoke --delete recorded the wish; image sweep deletes
	// it once no live lease uses it.
	DeleteWanted bool `json:"deleteWanted,omitempty"`
}

func templateOf(t *templates.Template) templateOut {
	return templateOut{ID: t.ID, Environment: t.Environment, State: t.State, Identity: t.Identity,
		SourceFingerprint: t.SourceFingerprint, CreatedAt: t.CreatedAt, DeleteReceipt: t.DeleteReceipt, DeleteWanted: t.DeleteWanted}
}

func runTemplates(ctx context.Context, g *globals, args []string) error {
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("image "+sub, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	name := fs.String("name", "", "template name (capture)")
	del := fs.Bool("delete", false, "also delete the template at the provider (revoke)")
	reason := fs.String("reason", "", "revoke reason")
	pos, err := parseInterleaved(fs, args)
	want := 1
	if sub == "sweep" {
		want = 0
	}
	switch {
	case err != nil || len(pos) != want:
		fmt.Fprint(g.stderr, imageUsage)
		return errUsage
	case sub == "capture" && *name == "":
		return fmt.Errorf("image capture %s: flag --name is required", pos[0])
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	svc := sys.Templates()
	var t *templates.Template
	switch sub {
	case "templates", "history":
		id, err := lookupID(ctx, g, sys.Catalog(), pos[0])
		if err != nil {
			return err
		}
		if sub == "history" {
			ev, err := svc.History(ctx, g.as, id)
			if err != nil {
				return fmt.Errorf("image history %s: %w", pos[0], err)
			}
			if g.json {
				return writeJSON(g.stdout, ev)
			}
			printHistory(g.stdout, ev)
			return nil
		}
		list, err := svc.List(ctx, g.as, id)
		if err != nil {
			return fmt.Errorf("image templates %s: %w", pos[0], err)
		}
		out := make([]templateOut, 0, len(list))
		for _, t := range list {
			out = append(out, templateOf(t))
		}
		if g.json {
			return writeJSON(g.stdout, out)
		}
		if len(list) == 0 {
			fmt.Fprintf(g.stdout, "no templates of environment %s\n", id)
		}
		for _, t := range list {
			printTemplate(g.stdout, t)
		}
		return nil
	case "capture":
		t, err = svc.Capture(ctx, g.as, pos[0], *name)
	case "promote":
		t, err = svc.Promote(ctx, g.as, pos[0])
	case "rollback":
		t, err = svc.Rollback(ctx, g.as, pos[0])
	case "revoke":
		t, err = svc.Revoke(ctx, g.as, pos[0], templates.RevokeOptions{Delete: *del, Reason: *reason})
	case "sweep":
		n, err := svc.Sweep(ctx, g.as)
		if err != nil {
			return fmt.Errorf("image sweep: %w", err)
		}
		if g.json {
			return writeJSON(g.stdout, map[string]int{"deleted": n})
		}
		fmt.Fprintf(g.stdout, "image sweep: %d templates deleted at the provider\n", n)
		return nil
	default:
		fmt.Fprint(g.stderr, imageUsage)
		return errUsage
	}
	if t != nil {
		if g.json {
			if jerr := writeJSON(g.stdout, templateOf(t)); jerr != nil {
				return jerr
			}
		} else {
			printTemplate(g.stdout, t)
		}
	}
	if err != nil {
		return fmt.Errorf("image %s %s: %w", sub, pos[0], err)
	}
	if sub == "revoke" && t.DeleteWanted && !g.json {
		fmt.Fprintf(g.stdout, "  deletion wanted: %s; 'envctl image sweep' deletes it once nothing uses it\n", t.DeleteNote)
	}
	return nil
}

func printTemplate(w io.Writer, t *templates.Template) {
	fmt.Fprintf(w, "template %s (%q) of environment %s: %s\n", t.ID, t.Name, t.Environment, t.State)
	if t.Identity != "" {
		fmt.Fprintf(w, "  identity: %s\n", t.Identity)
	}
	if t.SourceFingerprint != "" {
		fmt.Fprintf(w, "  source fingerprint: %s\n", t.SourceFingerprint)
	}
	fmt.Fprintf(w, "  created: %s by %s\n", t.CreatedAt.Format(time.RFC3339), t.CreatedBy)
	if t.FailureReason != "" {
		fmt.Fprintf(w, "  failed: %s\n", t.FailureReason)
	}
	if t.State == templates.StateRevoked || t.State == templates.StateDeleted {
		fmt.Fprintf(w, "  revoked: %s by %s %s\n", t.RevokedAt.Format(time.RFC3339), t.RevokedBy, t.RevokeReason)
	}
	if rc := t.DeleteReceipt; rc != nil {
		fmt.Fprintf(w, "  deleted at the provider: confirmed %t at %s (%s: %s)\n", rc.Confirmed, rc.ConfirmedAt.Format(time.RFC3339), rc.EvidenceKind, rc.Evidence)
	}
}

func printHistory(w io.Writer, ev []*templates.Event) {
	if len(ev) == 0 {
		fmt.Fprintln(w, "no pointer changes")
	}
	none := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	for _, e := range ev {
		fmt.Fprintf(w, "%d %s %s: %s -> %s by %s (revision %d)", e.Seq, e.At.Format(time.RFC3339), e.Action, none(e.From), none(e.To), e.Actor, e.Revision)
		if e.Reason != "" {
			fmt.Fprintf(w, ": %s", e.Reason)
		}
		fmt.Fprintln(w)
	}
}

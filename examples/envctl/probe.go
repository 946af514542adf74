package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/probe"
)

const probeUsage = `usage: envctl probe ENV --company C [--runner [--runner-binary PATH]]
       envctl probe --draft --driver D --config FILE|-

probe checks that a saved environment (id or name) works: it acquires a
fresh ephemeral lease for the company, measures the platform in one command,
reads the live image (sandbox drivers), destroys the sandbox and confirms
the cleanup, then records a platform qualification when the image is pinned
and everything was proven. Each stage is printed to stderr as it completes
(not with --json). A host probe (local, ssh) says what it did NOT validate.

--runner probes through berth's runner instead of one command (PRP-8):
the runner (--runner-binary, default $BERTH_RUNNER_BINARY, else built once
from this module's source for the target's architecture) starts in the
sandbox under a short-lived probe identity that can run no task, and its
hello's platform and version are the evidence.

--draft probes an unsaved config of driver D (the JSON object in FILE, or -
for stdin): nothing is saved and no qualification is recorded.

The command fails (exit 1) when the probe fails; the result is printed first.
`

func runProbe(ctx context.Context, g *globals, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(g.stderr, probeUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.BoolVar(&g.json, "json", g.json, "print JSON")
	company := fs.String("company", "", "company the probe's lease and qualification are for (required for saved environments)")
	workspace := fs.String("workspace", "", "working directory hint for host drivers")
	draft := fs.Bool("draft", false, "probe an unsaved config")
	driver := fs.String("driver", "", "driver of the draft config")
	cfgPath := fs.String("config", "", "draft config JSON file, - for stdin")
	byRunner := fs.Bool("runner", false, "probe through berth's runner under a probe identity")
	binary := fs.String("runner-binary", os.Getenv(RunnerBinaryEnv), "runner binary on this host (with --runner; default $"+RunnerBinaryEnv+")")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		fmt.Fprint(g.stderr, probeUsage)
		return errUsage
	}
	if *draft {
		if len(pos) != 0 || *driver == "" {
			fmt.Fprintln(g.stderr, "envctl probe --draft: want --driver D and --config FILE, and no environment")
			return errUsage
		}
	} else {
		if len(pos) != 1 {
			fmt.Fprint(g.stderr, probeUsage)
			return errUsage
		}
		if *company == "" {
			return fmt.Errorf("probe %s: flag --company is required (the probe's lease and qualification belong to a company)", pos[0])
		}
	}
	if *byRunner {
		// As envctl run: the named binary, else one built from the
		// module's source for the target's architecture.
		g.runnerBinary = *binary
		progress := func(format string, a ...any) {
			if !g.json {
				fmt.Fprintf(g.stderr, "envctl: "+format+"\n", a...)
			}
		}
		if g.runnerSet, err = runnerSet(g, progress); err != nil {
			return fmt.Errorf("probe --runner: %w", err)
		}
	}
	var cfg map[string]any
	if *draft {
		if cfg, err = readConfig(g, *cfgPath); err != nil {
			return fmt.Errorf("probe --draft --driver %s: %w", *driver, err)
		}
	}
	sys, err := openSystem(ctx, g)
	if err != nil {
		return err
	}
	defer sys.Close()
	p := sys.Prober()
	req := probe.Request{Company: *company, Workspace: *workspace, Runner: *byRunner}
	if !g.json {
		req.Progress = progressLines(g)
	}
	var res *probe.Result
	if *draft {
		if !g.json {
			fmt.Fprintf(g.stderr, "probing a draft config of driver %s (nothing is saved)\n", *driver)
		}
		res, err = p.ProbeDraft(ctx, g.as, *driver, cfg, req)
	} else {
		var id string
		if id, err = lookupID(ctx, g, sys.Catalog(), pos[0]); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if !g.json {
			fmt.Fprintf(g.stderr, "probing environment %s (%s) for company %q\n", pos[0], id, *company)
		}
		res, err = p.Probe(ctx, g.as, id, req)
	}
	if err != nil {
		return err
	}
	if g.json {
		if err := writeJSON(g.stdout, probejson.Of(res)); err != nil {
			return err
		}
	} else {
		printProbe(g.stdout, res)
	}
	if !res.OK {
		return probeFailure(res)
	}
	return nil
}

// probeFailure is a failed probe as an error for both readers: its code
// is the one the result's code (a reason) is finer than, its message the
// result's sentence, its detail the failed stage's error.
func probeFailure(res *probe.Result) error {
	cause := "probe failed (" + res.Code + ")"
	for _, st := range res.Stages {
		if !st.OK && st.Code != "" { // failed, not skipped
			cause = fmt.Sprintf("probe failed at stage %s (%s): %s", st.Name, res.Code, st.Error)
			break
		}
	}
	return &errcode.Error{Code: reason.Code(res.Code), Reason: res.Code, Target: res.Target, Message: res.Message, Err: errors.New(cause)}
}

// progressLines is a probe.Request.Progress that writes each stage to
// g.stderr as it completes.
func progressLines(g *globals) func(probe.Stage, bool) {
	return func(st probe.Stage, running bool) {
		if running {
			return
		}
		fmt.Fprintf(g.stderr, "  %s\n", stageLine(st))
	}
}

// stageLine is one completed stage: "acquire  ok      1.2s  note".
func stageLine(st probe.Stage) string {
	verdict := "ok"
	if !st.OK && st.Code == "" {
		verdict = "skipped"
	} else if !st.OK {
		verdict = "FAILED"
		if st.Code != "" {
			verdict += " (" + string(st.Code) + ")"
		}
	}
	line := fmt.Sprintf("%-8s %-8s %8s", st.Name, verdict, st.Duration.Round(time.Millisecond))
	if st.Note != "" {
		line += "  " + st.Note
	}
	if st.Error != "" {
		line += "  " + st.Error
	}
	return line
}

// printProbe prints a probe result for people.
func printProbe(w io.Writer, res *probe.Result) {
	verdict := "OK"
	if !res.OK {
		verdict = "FAILED (" + string(res.Code) + ")"
	}
	fmt.Fprintf(w, "probe %s: %s\n", verdict, res.Message)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  STAGE\tRESULT\tDURATION\tNOTE")
	for _, st := range res.Stages {
		ok := "ok"
		if !st.OK && st.Code == "" {
			ok = "skipped"
		} else if !st.OK {
			ok = "failed"
			if st.Code != "" {
				ok += " (" + string(st.Code) + ")"
			}
		}
		note := st.Note
		if st.Error != "" {
			note = strings.TrimSpace(note + " " + st.Error)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", st.Name, ok, st.Duration.Round(time.Millisecond), note)
	}
	tw.Flush()
	fmt.Fprintf(w, "  target: %s\n", res.Target)
	if res.Hostname != "" || res.Cwd != "" {
		fmt.Fprintf(w, "  host: %s  cwd: %s\n", dash(res.Hostname), dash(res.Cwd))
	}
	if !res.Platform.IsZero() {
		fmt.Fprintf(w, "  platform: %s\n", res.Platform)
	}
	if res.Isolation != "" {
		fmt.Fprintf(w, "  isolation: %s (%s)\n", res.Isolation, res.IsolationEvidence)
	}
	if !res.ImageIdentity.IsZero() {
		fmt.Fprintf(w, "  image: %s\n", res.ImageIdentity)
	}
	if c := res.Cleanup; c != nil {
		fmt.Fprintf(w, "  cleanup: confirmed=%t pending=%t", c.Confirmed, c.PendingCleanup)
		if c.LeaseStatus != "" {
			fmt.Fprintf(w, " lease %s %s", res.LeaseID, c.LeaseStatus)
		}
		if c.Evidence != "" {
			fmt.Fprintf(w, " (%s)", c.Evidence)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  platform qualification recorded: %t\n", res.PlatformQualificationRecorded)
	if d := res.QualificationDiagnostic; d != nil {
		fmt.Fprintf(w, "  qualification: %s\n", d)
		if d.Code == "image_not_pinned" {
			// The fix, offered: a tag becomes repo@sha256:… by envctl
			// image pin (a registry the host reaches) or envctl image
			// load (an archive, for an engine that reaches none).
			fmt.Fprintln(w, "  to qualify it: pin the image (envctl image pin REF, or envctl image load FILE.tar for a Docker engine without a registry) and save the printed repo@sha256:... as the environment's image (envctl env update)")
		}
	}
	if res.NotValidated != "" {
		fmt.Fprintf(w, "  not validated: %s\n", res.NotValidated)
	}
	fmt.Fprintf(w, "  detail: %s\n", res.Summary)
}

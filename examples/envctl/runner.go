package main

import (
	"context"
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/runnerbin"
)

// runnerSet returns the runner binaries of envctl run: the one named by
// --runner-binary or $BERTH_RUNNER_BINARY (g.runnerBinary) when there is
// one, else none, with a Build that builds the runner from the module's
// own source for the architecture the target reports (runnerbin: once
// per source and architecture, into the user's cache, a progress line on
// stderr first). The lease manager calls Build before it allocates
// anything; without a go command or the source (a binary install) its
// error says how to name a binary instead.
func runnerSet(g *globals, progress func(format string, a ...any)) (*drivers.RunnerSet, error) {
	if g.runnerBinary != "" {
		spec, err := runnerbin.Spec(g.runnerBinary)
		if err != nil {
			return nil, fmt.Errorf("flag --runner-binary: %w (build one with: %s)", err, runnerBuildHint)
		}
		if spec.Arch != "" {
			return drivers.RunnerSetOf(spec), nil // another architecture is refused before allocation
		}
		// Not an ELF file of a known architecture: the driver finds out
		// at install, as it did before architectures were known.
		return &drivers.RunnerSet{Build: func(context.Context, string) (drivers.RunnerSpec, error) { return spec, nil }}, nil
	}
	var o runnerbin.Options
	if g.runnerBuild != nil {
		o = *g.runnerBuild
	}
	o.Progress = func(msg string) { progress("%s", msg) }
	return &drivers.RunnerSet{Build: func(ctx context.Context, arch string) (drivers.RunnerSpec, error) {
		bin, err := runnerbin.Binary(ctx, arch, &o)
		if err != nil {
			return drivers.RunnerSpec{}, fmt.Errorf("no runner binary: pass --runner-binary PATH or set $%s; building one from the module's source failed: %w; build one with: %s",
				RunnerBinaryEnv, err, runnerBuildHint)
		}
		return runnerbin.Spec(bin)
	}}, nil
}

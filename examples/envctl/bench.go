package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/images/resolve"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/runnerbin"
)

const benchUsage = `usage: envctl bench [--only W,...] [--quick] [--json]

Runs each workload and its anchor in one run, alternating them, and prints
a table of ratios (ratio = berth / anchor: for ms, µs and requests lower
is better, for MB/s and cycles/s higher is better). Workloads (--only;
default all):
  ssh            SSH probe vs 'ssh host uname -sm'; 100 execs on one SSH
                 lease vs 100 'ssh' runs and vs a ControlMaster
  docker         a Docker lease (acquire, exec true, destroy) vs
                 'docker run --rm IMAGE true'
  docker-pool    acquire from a warm pool of 3 to the first exec true vs
                 'docker run --rm IMAGE true', p50 and p99
  docker-runner-pool  the same from a runner pool, through attaching the
                 runner, to the first runner task true completed
  runner-task    a runner task start (true, to its stored exit) vs
                 'docker exec CONTAINER true'
  runner-stream  the runner's 1 GiB stdout stream vs OpenSSH's
  pins           100 concurrent pins of one tag: registry requests made
  lease          lease acquire+release through a System on memory and
                 SQLite vs the bare fake driver's acquire+destroy
  lease-postgres the same on PostgreSQL
  replicas       8 host replicas on one PostgreSQL vs 1 (4 workers each),
                 provider start 50 ms and 0
  files-docker   a tree of 10,000 files (100 MiB) put into a Docker
                 sandbox vs 'docker cp', median of 5
  files-ssh      the same tree put through the SSH driver vs 'tar c' piped
                 into 'tar x' through one x/crypto/ssh session, and vs
                 OpenSSH's 'tar c | ssh host tar x', median of 5
  runsc          under gVisor (the engine's runsc runtime, network none):
                 a Docker lease vs 'docker run --rm --runtime runsc IMAGE
                 true' and vs the same lease under runc, median of 5; an
                 acquisition from a warm runsc pool to its first exec, and
                 from a warm runner pool to its first task, vs that docker
                 run, median of 5; a runner task start vs the same under
                 runc and vs 'docker exec CONTAINER true'
  plugin         the Docker driver through its plugin (drivers/plugin) vs
                 compiled in: exec true, median of 20 (plugin-exec), and
                 64 MiB of a streaming exec's stdout, median of 5
                 (plugin-stream); the fake's exec through its plugin minus
                 compiled in, in µs per call (plugin-call)
  leases-1m      lease operations on a store of 1,000,000 ended and 10,000
                 live leases (SQLite, PostgreSQL) vs the same live leases
                 without the history; --quick: 20,000 and 1,000
It starts what it needs the way berth's tests do (sshd, a loopback
registry, a busybox test image, the runner built from the module's source)
and removes it all at the end; a missing component skips its rows.
`

// benchWorkloads are the workload names of --only, in the order they run.
var benchWorkloads = []string{"ssh", "docker", "docker-pool", "docker-runner-pool", "runner-task", "runner-stream", "pins", "lease", "lease-postgres", "replicas", "files-docker", "files-ssh", "runsc", "plugin"}

// benchRow is one line of the table (one JSON object with --json).
type benchRow struct {
	Workload    string  `json:"workload"`
	Anchor      string  `json:"anchor"`
	Berth       float64 `json:"berth"`
	AnchorValue float64 `json:"anchor_value"`
	Unit        string  `json:"unit"`
	Ratio       float64 `json:"ratio"`
	// Skipped is why the row was not measured (a component is missing).
	Skipped string `json:"skipped,omitempty"`
}

// benchScale is how much each workload runs: full or --quick.
type benchScale struct {
	probes, execRounds, execs, leases, tasks, pinRounds, poolLeases int
	streamBytes                                                     int64
	// treeFiles and treeBytes are the files rows' tree, fileRounds how
	// many puts each side makes (the median is reported).
	treeFiles, fileRounds int
	treeBytes             int64
	// runscRounds is how many leases and pooled acquisitions each side of
	// the runsc rows makes (the median is reported).
	runscRounds int
	// pluginRounds is how many execs (and rounds of pluginCalls fake
	// calls) each side of the plugin rows makes, pluginStreams how many
	// streams of pluginStreamBytes (the medians are reported).
	pluginRounds, pluginStreams, pluginCalls int
	pluginStreamBytes                        int64
}

var (
	fullScale  = benchScale{probes: 10, execRounds: 3, execs: 100, leases: 10, tasks: 50, pinRounds: 3, poolLeases: 50, streamBytes: 1 << 30, treeFiles: 10000, fileRounds: 5, treeBytes: 100 << 20, runscRounds: 5, pluginRounds: 20, pluginStreams: 5, pluginCalls: 200, pluginStreamBytes: 64 << 20}
	quickScale = benchScale{probes: 2, execRounds: 1, execs: 20, leases: 2, tasks: 5, pinRounds: 1, poolLeases: 5, streamBytes: 32 << 20, treeFiles: 500, fileRounds: 1, treeBytes: 5 << 20, runscRounds: 1, pluginRounds: 3, pluginStreams: 1, pluginCalls: 50, pluginStreamBytes: 2 << 20}
)

// pinsAtOnce is how many pins of one tag the pins workload starts at once.
const pinsAtOnce = 100

// bench is one run of envctl bench.
type bench struct {
	g     *globals
	scale benchScale
	rows  []benchRow
}

func runBench(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.Usage = func() { fmt.Fprint(g.stderr, benchUsage); fs.PrintDefaults() }
	fs.BoolVar(&g.json, "json", g.json, "print one JSON object per row")
	only := fs.String("only", "", "comma-separated workloads: "+strings.Join(benchWorkloads, ","))
	quick := fs.Bool("quick", false, "a short run: fewer iterations, a 32 MiB stream (the plugin's: 2 MiB), a 5 MiB tree of 500 files put once")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	selected := benchWorkloads
	if *only != "" {
		selected = nil
		for _, w := range strings.Split(*only, ",") {
			w = strings.TrimSpace(w)
			if !slices.Contains(benchWorkloads, w) {
				fmt.Fprintf(g.stderr, "envctl bench: flag --only: unknown workload %q (have %s)\n", w, strings.Join(benchWorkloads, ", "))
				return errUsage
			}
			selected = append(selected, w)
		}
	}
	// The PostgreSQL cluster the lease rows start (testenv's, one per
	// process) stops with the run; in a test binary, its TestMain stops it
	// (testenv.PostgresMain), after every test that shares it.
	if !testing.Testing() {
		defer func() {
			if err := testenv.StopPostgres(); err != nil {
				fmt.Fprintf(g.stderr, "envctl bench: %v\n", err)
			}
		}()
	}
	b := &bench{g: g, scale: fullScale}
	if *quick {
		b.scale = quickScale
	}
	workloads := map[string]func(*benchTB) []benchRow{
		"ssh": b.sshRows, "docker": b.dockerRow, "docker-pool": b.dockerPoolRows, "docker-runner-pool": b.dockerRunnerPoolRows, "runner-task": b.runnerTaskRow, "runner-stream": b.runnerStreamRow, "pins": b.pinsRow,
		"lease": b.leaseRows, "lease-postgres": b.leasePostgresRow, "replicas": b.replicaRows,
		"files-docker": b.filesDockerRow, "files-ssh": b.filesSSHRows, "runsc": b.runscRows, "plugin": b.pluginRows,
	}
	// The rows each workload produces, named for a skip or a failure.
	planned := map[string][]benchRow{
		"ssh": {
			{Workload: "ssh probe", Anchor: "ssh host uname -sm", Unit: "ms"},
			{Workload: fmt.Sprintf("%d execs on one SSH lease", b.scale.execs), Anchor: fmt.Sprintf("%d ssh runs", b.scale.execs), Unit: "ms"},
			{Workload: fmt.Sprintf("%d execs on one SSH lease", b.scale.execs), Anchor: fmt.Sprintf("%d ssh runs over a ControlMaster", b.scale.execs), Unit: "ms"},
		},
		"docker": {{Workload: "docker lease (acquire, exec true, destroy)", Anchor: "docker run --rm IMAGE true", Unit: "ms"}},
		"docker-pool": {
			{Workload: fmt.Sprintf("docker pool: acquire to first exec, p50 of %d", b.scale.poolLeases), Anchor: "docker run --rm IMAGE true, p50", Unit: "ms"},
			{Workload: fmt.Sprintf("docker pool: acquire to first exec, p99 of %d", b.scale.poolLeases), Anchor: "docker run --rm IMAGE true, p99", Unit: "ms"},
		},
		"docker-runner-pool": {
			{Workload: fmt.Sprintf("docker runner pool: acquire to first task, p50 of %d", b.scale.poolLeases), Anchor: "docker run --rm IMAGE true, p50", Unit: "ms"},
			{Workload: fmt.Sprintf("docker runner pool: acquire to first task, p99 of %d", b.scale.poolLeases), Anchor: "docker run --rm IMAGE true, p99", Unit: "ms"},
		},
		"runner-task":   {{Workload: "runner task start (true)", Anchor: "docker exec CONTAINER true", Unit: "ms"}},
		"runner-stream": {{Workload: "runner stream " + sizeName(b.scale.streamBytes) + " (SSH lease, stored)", Anchor: "ssh host head -c N /dev/zero", Unit: "MB/s"}},
		"pins":          {{Workload: fmt.Sprintf("%d concurrent pins of one tag", pinsAtOnce), Anchor: fmt.Sprintf("%d independent HEADs", pinsAtOnce), Unit: "requests"}},
		"lease": {
			{Workload: "lease acquire+release (memory)", Anchor: "fake driver acquire+destroy", Unit: "µs"},
			{Workload: "lease acquire+release (SQLite)", Anchor: "fake driver acquire+destroy", Unit: "µs"},
		},
		"lease-postgres": {{Workload: "lease acquire+release (PostgreSQL)", Anchor: "fake driver acquire+destroy", Unit: "µs"}},
		"replicas": {
			{Workload: "8 host replicas on one PostgreSQL (provider start 50ms)", Anchor: "1 replica", Unit: "cycles/s"},
			{Workload: "8 host replicas on one PostgreSQL (provider start 0s)", Anchor: "1 replica", Unit: "cycles/s"},
		},
		"files-docker": {{Workload: "files put " + b.scale.treeName() + " (docker, archive API)", Anchor: "docker cp", Unit: "MB/s"}},
		"files-ssh": {
			{Workload: "files put " + b.scale.treeName() + " (ssh, tar over the session)", Anchor: "tar c | x/crypto/ssh session tar x", Unit: "MB/s"},
			{Workload: "files put " + b.scale.treeName() + " (ssh, tar over the session)", Anchor: "tar c | ssh host tar x (OpenSSH)", Unit: "MB/s"},
		},
		"runsc": {
			{Workload: fmt.Sprintf("docker lease under runsc (acquire, exec true, destroy), median of %d", b.scale.runscRounds), Anchor: "docker run --rm --runtime runsc IMAGE true", Unit: "ms"},
			{Workload: fmt.Sprintf("docker lease under runsc (acquire, exec true, destroy), median of %d", b.scale.runscRounds), Anchor: "the same lease under runc", Unit: "ms"},
			{Workload: fmt.Sprintf("docker pool under runsc: acquire to first exec, median of %d", b.scale.runscRounds), Anchor: "docker run --rm --runtime runsc IMAGE true", Unit: "ms"},
			{Workload: fmt.Sprintf("docker runner pool under runsc: acquire to first task, median of %d", b.scale.runscRounds), Anchor: "docker run --rm --runtime runsc IMAGE true", Unit: "ms"},
			{Workload: fmt.Sprintf("runner task start (true) under runsc, median of %d", b.scale.tasks), Anchor: "the same task under runc", Unit: "ms"},
			{Workload: fmt.Sprintf("runner task start (true) under runsc, median of %d", b.scale.tasks), Anchor: "docker exec CONTAINER true (runsc)", Unit: "ms"},
		},
	}
	planned["plugin"] = b.pluginPlanned()
	b.addLoadRows(workloads, planned)
	b.addAPILoadRows(workloads, planned)
	var failures []error
	for _, w := range selected {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		fmt.Fprintf(g.stderr, "envctl bench: %s ...\n", w)
		t := &benchTB{name: w, ctx: ctx}
		var rows []benchRow
		start := time.Now()
		skipped, err := t.run(func(t *benchTB) { rows = workloads[w](t) })
		switch {
		case err != nil:
			fmt.Fprintf(g.stderr, "envctl bench: %s failed: %v\n", w, err)
			failures = append(failures, err)
			continue
		case skipped != "":
			fmt.Fprintf(g.stderr, "envctl bench: %s skipped: %s\n", w, skipped)
			for _, r := range planned[w] {
				r.Skipped = skipped
				b.rows = append(b.rows, r)
			}
			continue
		}
		fmt.Fprintf(g.stderr, "envctl bench: %s done in %s\n", w, time.Since(start).Round(time.Millisecond))
		b.rows = append(b.rows, rows...)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := b.print(); err != nil {
		return err
	}
	if len(failures) > 0 {
		return fmt.Errorf("bench: %w", errors.Join(failures...))
	}
	return nil
}

func sizeName(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return strconv.FormatInt(n>>30, 10) + " GiB"
	}
	return strconv.FormatInt(n>>20, 10) + " MiB"
}

// print writes the table, or one JSON object per row.
func (b *bench) print() error {
	if b.g.json {
		enc := json.NewEncoder(b.g.stdout)
		for _, r := range b.rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(b.g.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tANCHOR\tBERTH\tANCHOR VALUE\tUNIT\tRATIO")
	for _, r := range b.rows {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\tskipped: %s\n", r.Workload, r.Anchor, r.Unit, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2fx\n", r.Workload, r.Anchor, num(r.Berth), num(r.AnchorValue), r.Unit, r.Ratio)
	}
	return tw.Flush()
}

func num(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// row makes a row from berth's and the anchor's values, rounded to four
// decimals. A zero anchor (nothing measured) fails the workload.
func row(t *benchTB, workload, anchor, unit string, ours, theirs float64) benchRow {
	if theirs <= 0 || ours <= 0 || math.IsNaN(ours) || math.IsNaN(theirs) {
		t.Fatalf("%s: nothing measured (berth %v, anchor %v)", workload, ours, theirs)
	}
	r4 := func(v float64) float64 { return math.Round(v*1e4) / 1e4 }
	return benchRow{Workload: workload, Anchor: anchor, Unit: unit, Berth: r4(ours), AnchorValue: r4(theirs), Ratio: r4(ours / theirs)}
}

func ms(d time.Duration, n int) float64 { return float64(d) / float64(n) / 1e6 }

// live ends the workload when the run was interrupted (SIGINT).
func live(t *benchTB) {
	if err := t.ctx.Err(); err != nil {
		t.Fatalf("interrupted: %v", err)
	}
}

// timed runs cmd and returns how long it took; a failure ends the
// workload with its output.
func timed(t *benchTB, cmd *exec.Cmd) time.Duration {
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		live(t) // an interrupt killed it: say so
		t.Fatalf("%s: %v: %s", strings.Join(cmd.Args, " "), err, out)
	}
	return time.Since(start)
}

func lookPath(t *benchTB, cmd, what string) string {
	p, err := exec.LookPath(cmd)
	if err != nil {
		t.Skipf("%s is not installed (%v)", what, err)
	}
	return p
}

func benchRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sshTarget is the bench's sshd (internal/testenv) with the SSH driver's
// config for it and OpenSSH's client arguments.
type sshTarget struct {
	srv *testenv.SSHServer
	raw map[string]any
}

func newSSHTarget(t *benchTB) *sshTarget {
	srv := testenv.SSHD(t)
	return &sshTarget{srv: srv, raw: map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir(),
	}}
}

// args is OpenSSH's command line for the bench's sshd, extra options
// first, then the destination and cmd.
func (s *sshTarget) args(cmd string, extra ...string) []string {
	a := append([]string{"-o", "BatchMode=yes", "-o", "UserKnownHostsFile=" + s.srv.KnownHostsFile(), "-i", s.srv.ClientKeyFile(),
		"-p", strconv.Itoa(s.srv.Port())}, extra...)
	a = append(a, s.srv.User()+"@"+s.srv.Host())
	if cmd != "" {
		a = append(a, cmd)
	}
	return a
}

// sshRows: a probe-like lease (connect, verify the host key,
// authenticate, make the workspace, uname -sm, release) vs one `ssh host
// uname -sm`; then N execs on one lease vs N separate ssh runs and vs N
// ssh runs over one ControlMaster connection.
func (b *bench) sshRows(t *benchTB) []benchRow {
	ctx := t.ctx
	sshBin := lookPath(t, "ssh", "OpenSSH's client (ssh)")
	tg := newSSHTarget(t)
	d := ssh.New(nil)
	cfg, err := d.Schema().Normalize(tg.raw)
	if err != nil {
		t.Fatalf("ssh config: %v", err)
	}
	acquire := func() drivers.Sandbox {
		sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{})
		if err != nil {
			t.Fatalf("ssh acquire: %v", err)
		}
		return sb
	}
	exec1 := func(sb drivers.Sandbox, argv ...string) {
		res, err := sb.Exec(ctx, drivers.Command{Argv: argv})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("ssh exec %v: %v %+v", argv, err, res)
		}
	}
	// Warm both sides (page cache, sshd's first fork).
	sb := acquire()
	exec1(sb, "true")
	_, _ = sb.Release(ctx, drivers.Destroy)
	timed(t, exec.CommandContext(ctx, sshBin, tg.args("true")...))

	var ours, theirs time.Duration
	for range b.scale.probes {
		live(t)
		start := time.Now()
		sb := acquire()
		exec1(sb, "uname", "-sm")
		if _, err := sb.Release(ctx, drivers.Destroy); err != nil {
			t.Fatalf("ssh release: %v", err)
		}
		ours += time.Since(start)
		theirs += timed(t, exec.CommandContext(ctx, sshBin, tg.args("uname -sm")...))
	}
	rows := []benchRow{row(t, "ssh probe", "ssh host uname -sm", "ms", ms(ours, b.scale.probes), ms(theirs, b.scale.probes))}

	// The ControlMaster runs in the background (-f -N) until -O exit.
	ctl := filepath.Join(t.TempDir(), "cm")
	muxOpts := []string{"-o", "ControlPath=" + ctl}
	if out, err := exec.CommandContext(ctx, sshBin, tg.args("", append([]string{"-M", "-f", "-N", "-o", "ControlPersist=300"}, muxOpts...)...)...).CombinedOutput(); err != nil {
		t.Fatalf("ssh ControlMaster: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(sshBin, tg.args("", append([]string{"-O", "exit"}, muxOpts...)...)...).Run() })
	timed(t, exec.CommandContext(ctx, sshBin, tg.args("true", muxOpts...)...))

	sb = acquire()
	t.Cleanup(func() { _, _ = sb.Release(context.Background(), drivers.Destroy) })
	exec1(sb, "true")
	n := b.scale.execs
	var execs, separate, mux time.Duration
	for range b.scale.execRounds {
		live(t)
		start := time.Now()
		for range n {
			exec1(sb, "uname")
		}
		execs += time.Since(start)
		for range n {
			separate += timed(t, exec.CommandContext(ctx, sshBin, tg.args("uname")...))
		}
		for range n {
			mux += timed(t, exec.CommandContext(ctx, sshBin, tg.args("uname", muxOpts...)...))
		}
	}
	r := b.scale.execRounds
	w := fmt.Sprintf("%d execs on one SSH lease", n)
	return append(rows,
		row(t, w, fmt.Sprintf("%d ssh runs", n), "ms", ms(execs, r), ms(separate, r)),
		row(t, w, fmt.Sprintf("%d ssh runs over a ControlMaster", n), "ms", ms(execs, r), ms(mux, r)))
}

// benchLabel marks every container of one bench run, for the cleanup.
const benchLabel = "envctl.bench/run"

// dockerImage starts a loopback registry, pushes a busybox test image to
// it (internal/testimage) and registers the removal of the run's
// containers and of the registry's images from the engine.
func dockerImage(t *benchTB) (img testimage.Image, run string) {
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img = testimage.Busybox(t, reg, nil)
	run = benchRunID()
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, benchLabel, run)
	return img, run
}

// dockerRow: a Docker lease (Acquire, Exec "true", Release with Destroy
// and its receipt) vs `docker run --rm IMAGE true`, same local image.
func (b *bench) dockerRow(t *benchTB) []benchRow {
	ctx := t.ctx
	cliBin := lookPath(t, "docker", "the docker CLI")
	img, run := dockerImage(t)
	d := docker.New(nil)
	t.Cleanup(func() { _ = d.Close() })
	cfg, err := d.Schema().Normalize(map[string]any{"image": img.Ref, "labels": map[string]any{benchLabel: run}})
	if err != nil {
		t.Fatalf("docker config: %v", err)
	}
	lease1 := func() {
		sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "bench"})
		if err != nil {
			t.Fatalf("docker acquire: %v", err)
		}
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("docker exec true: %v %+v", err, res)
		}
		r, err := sb.Release(ctx, drivers.Destroy)
		if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
			t.Fatalf("docker destroy: %v %+v", err, r)
		}
	}
	anchor := func() *exec.Cmd {
		return exec.CommandContext(ctx, cliBin, "run", "--rm", "--label", benchLabel+"="+run, img.Ref, "true")
	}
	lease1() // pulls the image: both sides then run it from the engine
	timed(t, anchor())
	var ours, theirs time.Duration
	for range b.scale.leases {
		live(t)
		start := time.Now()
		lease1()
		ours += time.Since(start)
		theirs += timed(t, anchor())
	}
	n := b.scale.leases
	return []benchRow{row(t, "docker lease (acquire, exec true, destroy)", "docker run --rm IMAGE true", "ms", ms(ours, n), ms(theirs, n))}
}

// attachedRunner is a berth System with one target leased with its
// runner (built from the module's source by runnerbin); the first task
// connects the runner.
type attachedRunner struct {
	sys *berth.System
	h   *lease.Handle
	n   int
}

// attachRunner composes a System (memory stores) with d, saves the target
// and leases it with the runner. maxOutput, if > 0, is the runner
// controller's per-session output cap (berth.Options.RunnerMaxOutput).
func (b *bench) attachRunner(t *benchTB, d drivers.Driver, config map[string]any, maxOutput int64) *attachedRunner {
	ctx := t.ctx
	bin, err := runnerbin.Binary(ctx, runtime.GOARCH, &runnerbin.Options{Progress: func(msg string) { fmt.Fprintln(b.g.stderr, "envctl bench: "+msg) }})
	if err != nil {
		t.Skipf("no runner binary: %v", err)
	}
	opts := &berth.Options{Drivers: []drivers.Driver{d}, RunnerBinary: bin, RunnerMaxOutput: maxOutput}
	sys, err := berth.New(ctx, opts)
	if err != nil {
		t.Fatalf("berth.New: %v", err)
	}
	t.Cleanup(func() { sys.Close() })
	v, err := sys.Catalog().Create(ctx, b.g.as, environment.CreateRequest{Name: "bench-" + d.Name(), Driver: d.Name(), Config: config})
	if err != nil {
		t.Fatalf("save the target: %v", err)
	}
	set, err := sys.RunnerSet()
	if err != nil {
		t.Fatalf("runner set: %v", err)
	}
	h, err := sys.Leases().Acquire(ctx, b.g.as, lease.AcquireRequest{Company: "bench", EnvironmentID: v.ID, Runner: set})
	if err != nil {
		t.Fatalf("lease the target: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = h.Release(cctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	})
	return &attachedRunner{sys: sys, h: h}
}

// task runs argv through the runner (Handle.Run; the first one connects
// it) and returns the time from Run to its stored exit.
func (a *attachedRunner) task(t *benchTB, argv ...string) time.Duration {
	a.n++
	id := "t" + strconv.Itoa(a.n)
	start := time.Now()
	task, err := a.h.Run(t.ctx, lease.Command{TaskID: id, Argv: argv})
	if err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	exit, err := task.Wait(t.ctx)
	took := time.Since(start)
	if err != nil || exit.Code != 0 {
		t.Fatalf("task %s %v: %+v, %v", id, argv, exit, err)
	}
	return took
}

// runnerTaskRow: `true` through a connected runner in a busybox container
// (network none), from Start to its stored exit, vs `docker exec
// CONTAINER true` on the same container.
func (b *bench) runnerTaskRow(t *benchTB) []benchRow {
	cliBin := lookPath(t, "docker", "the docker CLI")
	img, run := dockerImage(t)
	d := docker.New(nil)
	a := b.attachRunner(t, d, map[string]any{
		"image": img.Ref, "network": "none", "labels": map[string]any{benchLabel: run},
	}, 0)
	anchor := func() *exec.Cmd { return exec.CommandContext(t.ctx, cliBin, "exec", a.h.SandboxID(), "true") }
	a.task(t, "true")
	timed(t, anchor())
	var ours, theirs time.Duration
	for range b.scale.tasks {
		live(t)
		ours += a.task(t, "true")
		theirs += timed(t, anchor())
	}
	n := b.scale.tasks
	return []benchRow{row(t, "runner task start (true)", "docker exec CONTAINER true", "ms", ms(ours, n), ms(theirs, n))}
}

// countWriter counts what is written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// runnerStreamRow: a task on this host (through the SSH driver and the
// bench's sshd) writes N zero bytes to stdout through the runner, which
// the controller stores (FileSink, durable before the ack), vs OpenSSH's
// client running `head -c N /dev/zero` on the same sshd, its stdout
// counted and discarded. The controller's per-session output cap is
// raised above what the run streams (for the bench only).
func (b *bench) runnerStreamRow(t *benchTB) []benchRow {
	sshBin := lookPath(t, "ssh", "OpenSSH's client (ssh)")
	tg := newSSHTarget(t)
	n := b.scale.streamBytes
	rounds := 2
	a := b.attachRunner(t, ssh.New(nil), tg.raw, int64(rounds+1)*n+(1<<20))
	argv := []string{"head", "-c", strconv.FormatInt(n, 10), "/dev/zero"}
	a.task(t, "true")
	var ours, theirs time.Duration
	for range rounds {
		live(t)
		ours += a.task(t, argv...)
		cmd := exec.CommandContext(t.ctx, sshBin, tg.args(strings.Join(argv, " "))...)
		cw := &countWriter{}
		cmd.Stdout = cw
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("ssh head: %v: %s", err, stderr.String())
		}
		theirs += time.Since(start)
		if cw.n != n {
			t.Fatalf("ssh head wrote %d bytes, want %d", cw.n, n)
		}
	}
	mbps := func(d time.Duration) float64 { return float64(n) * float64(rounds) / d.Seconds() / 1e6 }
	return []benchRow{row(t, "runner stream "+sizeName(n)+" (SSH lease, stored)", "ssh host head -c N /dev/zero", "MB/s", mbps(ours), mbps(theirs))}
}

// pinsRow: 100 pins of one tag started at once on a fresh resolver
// (images/resolve coalesces them and caches the answer) vs 100
// independent go-containerregistry HEADs of the tag, as 100 callers
// without berth would make; both count the requests the loopback registry
// received.
func (b *bench) pinsRow(t *benchTB) []benchRow {
	ctx := t.ctx
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	ref, err := images.ParseReference(img.TagRef)
	if err != nil {
		t.Fatalf("tag %s: %v", img.TagRef, err)
	}
	nref, err := name.ParseReference(img.TagRef, name.Insecure)
	if err != nil {
		t.Fatalf("tag %s: %v", img.TagRef, err)
	}
	cfg, err := img.Image.ConfigFile()
	if err != nil {
		t.Fatalf("test image config: %v", err)
	}
	plat := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture}
	at := func(f func() error) {
		var wg sync.WaitGroup
		errs := make([]error, pinsAtOnce)
		for i := range pinsAtOnce {
			wg.Go(func() { errs[i] = f() })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("pins: %v", err)
		}
	}
	var ours, theirs int64
	for range b.scale.pinRounds {
		live(t)
		r := resolve.New(nil)
		before := reg.Requests()
		at(func() error {
			id, err := r.Pin(ctx, ref, plat)
			if err == nil && id.Digest() != img.Digest {
				err = fmt.Errorf("pinned %s, want %s", id, img.Digest)
			}
			return err
		})
		ours += reg.Requests() - before
		before = reg.Requests()
		at(func() error {
			_, err := remote.Head(nref, remote.WithContext(ctx))
			return err
		})
		theirs += reg.Requests() - before
	}
	k := float64(b.scale.pinRounds)
	return []benchRow{row(t, fmt.Sprintf("%d concurrent pins of one tag", pinsAtOnce), fmt.Sprintf("%d independent HEADs", pinsAtOnce), "requests",
		float64(ours)/k, float64(theirs)/k)}
}

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/testenv"
)

// The plugin rows (issue 54): a driver served by its plugin
// (drivers/plugin) against the same driver compiled into this process, in
// one run, alternated round by round after a round that warms both; each
// value is the median of its rounds. The plugins are built from the
// module's source (drivers/plugin/internal/dockerplugin and fakeplugin)
// the way the tests build them; without a go command or the source the
// rows are skipped.

// The packages of the plugins the rows build.
const (
	dockerPluginPackage = "github.com/berthdev/berth/drivers/plugin/internal/dockerplugin"
	fakePluginPackage   = "github.com/berthdev/berth/drivers/plugin/internal/fakeplugin"
)

func (b *bench) pluginExecName() string {
	return fmt.Sprintf("plugin-exec: docker exec true through the plugin, median of %d", b.scale.pluginRounds)
}

func (b *bench) pluginStreamName() string {
	return fmt.Sprintf("plugin-stream: %s of a docker streaming exec's stdout through the plugin, median of %d", sizeName(b.scale.pluginStreamBytes), b.scale.pluginStreams)
}

func (b *bench) pluginCallName() string {
	return fmt.Sprintf("plugin-call: the boundary's cost per call (fake exec through the plugin minus compiled in), median of %d rounds of %d", b.scale.pluginRounds, b.scale.pluginCalls)
}

// pluginPlanned are the rows of the plugin workload, named for a skip.
func (b *bench) pluginPlanned() []benchRow {
	return []benchRow{
		{Workload: b.pluginExecName(), Anchor: "the same exec, the Docker driver compiled in", Unit: "ms"},
		{Workload: b.pluginStreamName(), Anchor: "the same stream, the Docker driver compiled in", Unit: "MB/s"},
		{Workload: b.pluginCallName(), Anchor: "a fake exec, compiled in", Unit: "µs"},
	}
}

// buildPlugin builds the plugin of the main package pkg into a directory
// of the workload, pins it and writes its manifest. Without a go command
// or the module's source the workload is skipped.
func buildPlugin(t *benchTB, pkg string) plugin.Plugin {
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	if out, err := testenv.GoBuild(bin, pkg); err != nil {
		t.Skipf("the plugin %s could not be built from the module's source (run envctl bench from berth's module with a go command): %v\n%s", pkg, err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		t.Fatalf("plugin: %v", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("plugin: %v", err)
	}
	p := plugin.Plugin{Binary: bin, SHA256: hex.EncodeToString(h.Sum(nil))}
	if err := plugin.WriteManifest(t.ctx, p); err != nil {
		t.Fatalf("plugin manifest of %s: %v", bin, err)
	}
	return p
}

// loadPlugin loads p and closes it at the end of the workload. Its stderr
// (go-plugin's debug lines, at info) is not shown: a plugin that crashed
// fails the workload through the call that found it gone.
func (b *bench) loadPlugin(t *benchTB, p plugin.Plugin) drivers.Driver {
	d, err := plugin.Load(p, &plugin.Options{Logger: slog.New(slog.NewTextHandler(b.g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("load the plugin %s: %v", p.Binary, err)
	}
	t.Cleanup(func() { _ = d.(io.Closer).Close() })
	return d
}

// pluginRows: the Docker driver through its plugin vs compiled in, one
// sandbox each on the same busybox image: an exec of true (ms, median of
// pluginRounds), and pluginStreamBytes (64 MiB, as the issue measures it;
// 2 MiB under --quick) of `head -c N /dev/zero` streamed to a
// counting writer (MB/s, median of pluginStreams; a stream that lost a
// byte fails the workload); then the fake driver's exec of echo through
// its plugin minus compiled in, the cost of the boundary itself (µs per
// call, median of pluginRounds rounds of pluginCalls calls each side).
func (b *bench) pluginRows(t *benchTB) []benchRow {
	ctx := t.ctx
	testenv.Docker(t) // skips without an engine, before a build
	img, run := dockerImage(t)
	dockerPlugin := buildPlugin(t, dockerPluginPackage)
	compiled := docker.New(nil)
	t.Cleanup(func() { _ = compiled.Close() })
	viaPlugin := b.loadPlugin(t, dockerPlugin)
	raw := map[string]any{"image": img.Ref, "labels": map[string]any{benchLabel: run}, "startup_timeout": "2m"}
	acquire := func(d drivers.Driver) drivers.Sandbox {
		cfg, err := d.Schema().Normalize(raw)
		if err != nil {
			t.Fatalf("docker config: %v", err)
		}
		sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "bench"})
		if err != nil {
			t.Fatalf("docker acquire: %v", err)
		}
		t.Cleanup(func() { _, _ = sb.Release(ctx, drivers.Destroy) })
		return sb
	}
	ours, anchor := acquire(viaPlugin), acquire(compiled)

	exec1 := func(sb drivers.Sandbox) time.Duration {
		start := time.Now()
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			live(t)
			t.Fatalf("docker exec true: %v %+v", err, res)
		}
		return time.Since(start)
	}
	var execs, execsAnchor []time.Duration
	for i := range b.scale.pluginRounds + 1 { // round 0 warms both
		live(t)
		o, a := exec1(ours), exec1(anchor)
		if i > 0 {
			execs, execsAnchor = append(execs, o), append(execsAnchor, a)
		}
	}

	size := b.scale.pluginStreamBytes
	argv := []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}
	stream := func(sb drivers.Sandbox) time.Duration {
		var n countWriter
		start := time.Now()
		p, err := sb.(drivers.StreamExecer).Start(ctx, drivers.Command{Argv: argv}, &n, nil)
		if err != nil {
			live(t)
			t.Fatalf("docker stream: %v", err)
		}
		res, err := p.Wait(ctx)
		took := time.Since(start)
		if err != nil || res.ExitCode != 0 || n.n != size {
			live(t)
			t.Fatalf("docker stream %v: %+v, %v, %d bytes of %d", argv, res, err, n.n, size)
		}
		return took
	}
	var streams, streamsAnchor []time.Duration
	for i := range b.scale.pluginStreams + 1 {
		live(t)
		o, a := stream(ours), stream(anchor)
		if i > 0 {
			streams, streamsAnchor = append(streams, o), append(streamsAnchor, a)
		}
	}
	mbps := func(d time.Duration) float64 { return float64(size) / d.Seconds() / 1e6 }

	rows := []benchRow{
		row(t, b.pluginExecName(), "the same exec, the Docker driver compiled in", "ms", msOf(median(execs)), msOf(median(execsAnchor))),
		row(t, b.pluginStreamName(), "the same stream, the Docker driver compiled in", "MB/s", mbps(median(streams)), mbps(median(streamsAnchor))),
	}
	return append(rows, b.pluginCallRow(t))
}

// pluginCallRow: a bounded exec of echo on the fake driver (in Go, no
// process) through its plugin and compiled in, pluginCalls calls a side
// per round; the row's value is the difference of the per-call medians,
// the boundary's own cost, against the compiled call.
func (b *bench) pluginCallRow(t *benchTB) benchRow {
	ctx := t.ctx
	viaPlugin := b.loadPlugin(t, buildPlugin(t, fakePluginPackage))
	compiled := fake.New(nil)
	acquire := func(d drivers.Driver) drivers.Sandbox {
		sb, err := d.Acquire(ctx, map[string]any{"image": fake.DefaultImage}, drivers.AcquireRequest{LeaseID: "bench"})
		if err != nil {
			t.Fatalf("fake acquire: %v", err)
		}
		t.Cleanup(func() { _, _ = sb.Release(ctx, drivers.Destroy) })
		return sb
	}
	ours, anchor := acquire(viaPlugin), acquire(compiled)
	cmd := drivers.Command{Argv: []string{"echo", "hello"}}
	calls := func(sb drivers.Sandbox) time.Duration {
		start := time.Now()
		for range b.scale.pluginCalls {
			res, err := sb.Exec(ctx, cmd)
			if err != nil || string(res.Stdout) != "hello\n" {
				live(t)
				t.Fatalf("fake exec echo hello: %v %+v", err, res)
			}
		}
		return time.Since(start) / time.Duration(b.scale.pluginCalls)
	}
	var perCall, perCallAnchor []time.Duration
	for i := range b.scale.pluginRounds + 1 {
		live(t)
		o, a := calls(ours), calls(anchor)
		if i > 0 {
			perCall, perCallAnchor = append(perCall, o), append(perCallAnchor, a)
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	compiledCall := median(perCallAnchor)
	return row(t, b.pluginCallName(), "a fake exec, compiled in", "µs", us(median(perCall)-compiledCall), us(compiledCall))
}

package plugin_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// The cost of the boundary itself: one bounded exec of the fake driver
// (echo, in Go, no process) compiled in and through its plugin. The
// difference of the two per-op times is the per-call overhead of a plugin
// (envctl bench's plugin-call row, in µs).
func BenchmarkFakeExec(b *testing.B) {
	run := func(b *testing.B, d drivers.Driver) {
		ctx := b.Context()
		sb, err := d.Acquire(ctx, config.Config{"image": fake.DefaultImage}, drivers.AcquireRequest{})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Release(ctx, drivers.Destroy)
		cmd := drivers.Command{Argv: []string{"echo", "hello"}}
		b.ResetTimer()
		for b.Loop() {
			if _, err := sb.Exec(ctx, cmd); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("compiled", func(b *testing.B) { run(b, fake.New(nil)) })
	b.Run("plugin", func(b *testing.B) { run(b, load(b, fakePlugin(b))) })
}

// The Docker driver compiled in and through its plugin, against the real
// engine: a bounded exec (true), and 64 MiB of a streaming exec's output.
// The targets: exec through the plugin at most 1.1 times the
// compiled one's time, the stream at least 0.8 times its throughput.
// `envctl bench --only plugin` alternates the two sides round by round
// and prints the ratios (docs/benchmarks.md).
func BenchmarkDocker(b *testing.B) {
	cli := testenv.Docker(b)
	reg := testenv.StartRegistry(b, nil)
	img := testimage.Busybox(b, reg, nil)
	const runLabel = "test.berth/run"
	run := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	testenv.RemoveRegistryImagesAtCleanup(b, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(b, cli, runLabel, run)
	bin := filepath.Join(b.TempDir(), "dockerplugin")
	if out, err := goBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/dockerplugin"); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	p := plugin.Plugin{Binary: bin, SHA256: sum(bin)}
	if err := plugin.WriteManifest(b.Context(), p); err != nil {
		b.Fatal(err)
	}
	compiled := docker.New(nil)
	b.Cleanup(func() { _ = compiled.(io.Closer).Close() })
	viaPlugin := load(b, p)
	raw := map[string]any{"image": img.Ref, "labels": map[string]any{runLabel: run}, "startup_timeout": "2m"}
	for _, d := range []struct {
		name string
		d    drivers.Driver
	}{{"compiled", compiled}, {"plugin", viaPlugin}} {
		cfg, err := d.d.Schema().Normalize(raw)
		if err != nil {
			b.Fatal(err)
		}
		sb, err := d.d.Acquire(b.Context(), cfg, drivers.AcquireRequest{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = sb.Release(context.Background(), drivers.Destroy) })
		b.Run("exec/"+d.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := sb.Exec(b.Context(), drivers.Command{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("stream64MiB/"+d.name, func(b *testing.B) {
			se := sb.(drivers.StreamExecer)
			b.SetBytes(64 << 20)
			for b.Loop() {
				var n countWriter
				pr, err := se.Start(b.Context(), drivers.Command{Argv: []string{"head", "-c", "67108864", "/dev/zero"}}, &n, nil)
				if err != nil {
					b.Fatal(err)
				}
				if res, err := pr.Wait(b.Context()); err != nil || res.ExitCode != 0 || n != 64<<20 {
					b.Fatalf("stream: %+v, %v, %d bytes", res, err, n)
				}
			}
		})
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

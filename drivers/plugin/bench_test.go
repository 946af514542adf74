package plugin_test

import (
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
)

// The cost of the boundary itself: one bounded exec of the fake driver
// (echo, in Go, no process) compiled in and through its plugin. The
// difference of the two per-op times is the per-call overhead of a plugin.
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

package environment_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/instancehook"
)

// BenchmarkCatalogCreateGet measures Catalog.Create followed by Catalog.Get
// (authorization, schema validation, secret moving, views) on the memory
// store and secret store. The anchor, measured in the same run for the same
// number of operations, writes and reads the same records straight through
// MemoryStore; "x-store" is the catalog's cost as a multiple of it.
func BenchmarkCatalogCreateGet(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := remoteRequest(fmt.Sprintf("env-%d", i))
		i++
		v, err := f.cat.Create(ctx, admin, req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.cat.Get(ctx, operator, v.ID); err != nil {
			b.Fatal(err)
		}
	}
	catalogNs := float64(b.Elapsed().Nanoseconds()) / float64(i)

	store := environment.NewMemoryStore()
	template, err := f.store.GetEnvironment(ctx, "env_001")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for n := range i {
		env := *template
		env.ID, env.Name = fmt.Sprintf("anchor_%d", n), fmt.Sprintf("anchor-%d", n)
		if err := store.CreateEnvironment(ctx, &env, false); err != nil {
			b.Fatal(err)
		}
		if _, err := store.GetEnvironment(ctx, env.ID); err != nil {
			b.Fatal(err)
		}
	}
	anchorNs := float64(time.Since(start).Nanoseconds()) / float64(i)
	b.ReportMetric(anchorNs, "anchor-ns/op")
	b.ReportMetric(catalogNs/anchorNs, "x-store")
}

// BenchmarkGateCheckSettings measures Gate.Check (the check of every
// resolution, probe and lease acquisition) with the instance settings read
// through the instance settings' cached Reader, against the anchor of the
// same gate without settings in the same run: "x-no-settings" is the cost
// as a multiple of it (CFG-9: the settings add no store round trip while
// the copy is fresh). "x-uncached" is the same with MaxStaleness -1 (a
// store read per check, here of the memory store; see the SQL store's
// BenchmarkSettingsReader for a database round trip).
func BenchmarkGateCheckSettings(b *testing.B) {
	ctx := context.Background()
	reg := newRegistry()
	env := &environment.Environment{ID: "env_b", Name: "bench", Driver: "fake", Status: environment.StatusActive}
	gate := func(r instance.Reader) *environment.Gate {
		return environment.NewGate(reg, &environment.Options{TestMode: true, Settings: r})
	}
	measure := func(g *environment.Gate, n int) float64 {
		start := time.Now()
		for range n {
			if _, _, err := g.Check(ctx, env, 0); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n)
	}
	_, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
	_, hu := instancehook.New(instance.NewMemoryStore(), instancehook.Options{MaxStaleness: -1})
	cached, uncached := hr.(instance.Reader), hu.(instance.Reader)
	g := gate(cached)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, _, err := g.Check(ctx, env, 0); err != nil {
			b.Fatal(err)
		}
		n++
	}
	withNs := float64(b.Elapsed().Nanoseconds()) / float64(n)
	anchorNs := measure(gate(nil), n)
	uncachedNs := measure(gate(uncached), n)
	b.ReportMetric(anchorNs, "anchor-ns/op")
	b.ReportMetric(withNs/anchorNs, "x-no-settings")
	b.ReportMetric(uncachedNs/anchorNs, "x-uncached")
}

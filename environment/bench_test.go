package environment_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/environment"
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
		if err := store.CreateEnvironment(ctx, &env, environment.CreateOptions{}); err != nil {
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

package resolve

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/testenv"
)

// BenchmarkPin measures a cached pin against the anchor of an uncached pin
// (one HEAD to the loopback registry) in the same run and reports the
// ratio uncached/cached as "x-faster".
func BenchmarkPin(b *testing.B) {
	reg := testenv.StartRegistry(b, nil)
	ref := images.MustParseReference(reg.Host + "/bench:v1")
	push(b, ref.String(), randomImage(b, amd64))
	ctx := context.Background()

	uncached := New(&Options{TTL: -1})
	const anchorRuns = 20
	start := time.Now()
	for range anchorRuns {
		if _, err := uncached.Pin(ctx, ref, amd64); err != nil {
			b.Fatal(err)
		}
	}
	anchor := time.Since(start) / anchorRuns

	cached := New(nil)
	if _, err := cached.Pin(ctx, ref, amd64); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start = time.Now()
	for b.Loop() {
		if _, err := cached.Pin(ctx, ref, amd64); err != nil {
			b.Fatal(err)
		}
	}
	per := time.Since(start) / time.Duration(max(b.N, 1))
	if per > 0 {
		b.ReportMetric(float64(anchor)/float64(per), "x-faster")
	}
	b.ReportMetric(float64(anchor.Nanoseconds()), "anchor-ns/op")
}

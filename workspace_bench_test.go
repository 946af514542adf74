package berth_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/tarsafe"
	"github.com/berthdev/berth/workspace"
)

// benchTree writes files files of size bytes each under a new directory.
func benchTree(b *testing.B, files, size int) string {
	b.Helper()
	dir := b.TempDir()
	buf := make([]byte, size)
	for i := range files {
		_, _ = rand.Read(buf)
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%100), fmt.Sprintf("f%05d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkWorkspacePrepareVsPutArchive: a 100 MiB tree of 10,000 files
// prepared as a workspace in a Docker sandbox of the busybox test image
// (write-ahead record, the host's tree hash, the transfer, the tree hash
// in the sandbox by find, stat and sha256sum, the base manifest), against
// the transfer alone (tarsafe.Create into drivers.Files.PutArchive) of the
// same tree into the same sandbox. x_put is the transfer's time over
// Prepare's: what the checkpoint costs (1 would be nothing).
func BenchmarkWorkspacePrepareVsPutArchive(b *testing.B) {
	_, img, run := dockerRig(b)
	d := docker.New(nil)
	sys := wsSystem(b, d)
	h := wsLease(b, sys, "docker", map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}}, "acme")
	src := benchTree(b, 10_000, 100<<20/10_000)
	ctx := context.Background()
	fs := files(b, h)
	put := func(i int) time.Duration {
		dir := fmt.Sprintf("anchor-%d", i)
		if res, err := h.Exec(ctx, lease.Command{Argv: []string{"mkdir", dir}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("mkdir: %v", err)
		}
		root, err := os.OpenRoot(src)
		if err != nil {
			b.Fatal(err)
		}
		defer root.Close()
		t0 := time.Now()
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarsafe.Create(pw, root, tarsafe.Options{})) }()
		if err := fs.PutArchive(ctx, dir, pr); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	prepare := func(i int) time.Duration {
		t0 := time.Now()
		if _, err := sys.Workspaces().Prepare(ctx, wsOperator, h, workspace.PrepareRequest{Company: "acme", Key: fmt.Sprintf("bench-%d", i),
			Source: workspace.Source{Kind: workspace.SourceDir, Location: src}}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	put(-1) // warm
	var ours, anchor time.Duration
	i := 0
	for b.Loop() {
		ours += prepare(i)
		b.StopTimer()
		anchor += put(i)
		b.StartTimer()
		i++
	}
	n := float64(b.N)
	b.ReportMetric(ours.Seconds()/n, "prepare_s")
	b.ReportMetric(anchor.Seconds()/n, "put_s")
	b.ReportMetric(float64(anchor)/float64(ours), "x_put")
}

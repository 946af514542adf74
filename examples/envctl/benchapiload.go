package main

import (
	"fmt"
	"time"

	"github.com/berthdev/berth/internal/apiload"
	"github.com/berthdev/berth/internal/testenv"
)

// The API load row (internal/apiload, issue 55): the example server on
// PostgreSQL (a process of its own) under a load generator (another
// process, Go's net/http client) whose clients loop over a mix of
// listing environments, reading a lease, opening a run's output stream
// and starting a run on the fake, with runs streaming output followed to
// their end.

func init() { benchWorkloads = append(benchWorkloads, "api-load") }

// quickAPILoad is the api-load row's configuration under --quick.
var quickAPILoad = apiload.Quick

// apiLoadConfig is apiload.Full, or quickAPILoad under --quick.
func (b *bench) apiLoadConfig() apiload.Config {
	if b.scale.execs < fullScale.execs { // --quick
		return quickAPILoad
	}
	return apiload.Full
}

func (b *bench) apiLoadName() string {
	c := b.apiLoadConfig()
	return fmt.Sprintf("API under load: %d clients for %s (example server, PostgreSQL)", c.Clients, c.Duration)
}

// addAPILoadRows registers the api-load workload's rows with runBench.
func (b *bench) addAPILoadRows(workloads map[string]func(*benchTB) []benchRow, planned map[string][]benchRow) {
	workloads["api-load"] = b.apiLoadRows
	n := b.apiLoadName()
	planned["api-load"] = []benchRow{
		{Workload: n + ": read p99", Anchor: "goal 200 ms (issue 55)", Unit: "ms"},
		{Workload: n + ": read p99", Anchor: "one client alone, p99", Unit: "ms"},
		{Workload: n + ": answered 2xx or 429", Anchor: "requests", Unit: "requests"},
		{Workload: n + ": output streams read", Anchor: "written", Unit: "KB/s"},
	}
}

// apiLoadRows: the read p99 (list environments, read a lease: the
// larger of the two) against the goal of 200 ms and against the
// same reads by one client alone before the load, the requests
// answered 2xx or 429 against those made (an error other than 429 fails
// the workload), and the followed output streams' bytes/s read (to the
// last byte) against written (the runs' pace; an output not read whole,
// or its end not seen, fails it).
func (b *bench) apiLoadRows(t *benchTB) []benchRow {
	srv, out, err := testenv.SharedBuild(t.ctx, apiload.ServerPackage, nil)
	if err != nil {
		t.Skipf("no example server: %v\n%s", err, out)
	}
	gen, out, err := testenv.SharedBuild(t.ctx, apiload.GenPackage, nil)
	if err != nil {
		t.Skipf("no load generator: %v\n%s", err, out)
	}
	cfg := b.apiLoadConfig()
	cfg.ServerBinary, cfg.GenBinary, cfg.StoreURL, cfg.Dir = srv, gen, testenv.Postgres(t), t.TempDir()
	res, err := apiload.Run(t.ctx, cfg)
	fmt.Fprintf(b.g.stderr, "envctl bench: api-load: %s\n", res)
	if err != nil {
		live(t)
		t.Fatalf("api-load: %v", err)
	}
	if res.Errors != 0 {
		var samples []string
		for k, s := range res.Summary.Kinds {
			for _, x := range s.Samples {
				samples = append(samples, k+": "+x)
			}
		}
		t.Fatalf("api-load: %d of %d requests failed otherwise than 429: %v", res.Errors, res.Requests, samples)
	}
	if !res.KeptUp {
		t.Fatalf("api-load: the output streams did not keep up: %d of %d bytes read: %+v", res.StreamRead, res.StreamWritten, res.Summary.Follow)
	}
	n := b.apiLoadName()
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return []benchRow{
		row(t, n+": read p99", "goal 200 ms (issue 55)", "ms", ms(res.ReadP99), 200),
		row(t, n+": read p99", "one client alone, p99", "ms", ms(res.ReadP99), ms(res.BaselineP99)),
		row(t, n+": answered 2xx or 429", "requests", "requests", float64(res.Answered), float64(res.Requests)),
		row(t, n+": output streams read", "written", "KB/s", res.StreamBytesPerSec()/1024, res.StreamWrittenPerSec()/1024),
	}
}

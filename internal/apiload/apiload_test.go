package apiload_test

import (
	"testing"
	"time"

	"github.com/berthdev/berth/internal/apiload"
	"github.com/berthdev/berth/internal/testenv"
)

func TestMain(m *testing.M) { testenv.PostgresMain(m) }

// The harness end to end at the suite's size (apiload.Small: 4 clients
// for 2 s on PostgreSQL): every kind of the mix was sent and answered
// 2xx, nothing but 429 failed, and the followed run's output arrived
// whole, its end seen. No time is asserted: the figures are envctl
// bench's (the api-load row).
func TestAPILoad(t *testing.T) {
	t0 := time.Now()
	srv, out, err := testenv.SharedBuild(t.Context(), apiload.ServerPackage, nil)
	if err != nil {
		t.Fatalf("build the server: %v\n%s", err, out)
	}
	gen, out, err := testenv.SharedBuild(t.Context(), apiload.GenPackage, nil)
	if err != nil {
		t.Fatalf("build the generator: %v\n%s", err, out)
	}
	t.Logf("builds %s", time.Since(t0))
	t0 = time.Now()
	pg := testenv.Postgres(t)
	t.Logf("postgres %s", time.Since(t0))
	cfg := apiload.Small
	cfg.ServerBinary, cfg.GenBinary, cfg.StoreURL, cfg.Dir = srv, gen, pg, t.TempDir()
	res, err := apiload.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	for _, k := range apiload.Kinds {
		s := res.Summary.Kinds[k]
		if s == nil || s.Count == 0 || s.Statuses[200]+s.Statuses[202] == 0 {
			t.Errorf("%s: no request answered 2xx: %+v", k, s)
			continue
		}
		if s.Errors != 0 {
			t.Errorf("%s: %d errors other than 429: %v", k, s.Errors, s.Samples)
		}
	}
	if res.Errors != 0 || res.Answered != res.Requests {
		t.Errorf("%d of %d requests failed otherwise than 429", res.Errors, res.Requests)
	}
	if len(res.Summary.Follow) != cfg.Streams || !res.KeptUp || res.StreamRead == 0 || res.StreamRead != res.StreamWritten {
		t.Errorf("streams: %d of %d bytes read, kept up %v: %+v", res.StreamRead, res.StreamWritten, res.KeptUp, res.Summary.Follow)
	}
	if res.ServerCPU <= 0 || res.ServerRSS <= 0 || res.GenCPU <= 0 || res.GenRSS <= 0 {
		t.Errorf("the processes' figures: server CPU %s RSS %d, generator CPU %s RSS %d", res.ServerCPU, res.ServerRSS, res.GenCPU, res.GenRSS)
	}
}

package daytona_test

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/testenv"
)

// syncBuffer is a log sink the driver writes to from many goroutines.
type syncBuffer = testenv.Buffer

// env is one fake Daytona server, a snapshot on it, and a driver with fast
// polling and retries.
type env struct {
	srv  *daytonafake.Server
	drv  daytona.Concrete
	snap daytonafake.Snapshot
	log  *syncBuffer
}

type envOptions struct {
	knobs     daytonafake.Knobs
	clk       clock.Clock
	afterCall func(route string, status int)
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	srv, err := daytonafake.New(&daytonafake.Options{Clock: o.clk, Knobs: o.knobs, AfterCall: o.afterCall})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	snap, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	drv := daytona.NewConcrete(&daytona.Options{
		Logger:       slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond,
		CleanupTimeout: 10 * time.Second,
	})
	return &env{srv: srv, drv: drv, snap: snap, log: log}
}

// config returns a normalized config for snapshot id.
func (e *env) config(t testing.TB, snapshotID string) config.Config {
	t.Helper()
	cfg, err := e.drv.Schema().Normalize(map[string]any{
		"api_url":                     e.srv.URL(),
		"api_key":                     e.srv.APIKey(),
		"organization_id":             e.srv.OrganizationID(),
		"snapshot_id":                 snapshotID,
		daytona.FieldLabels:           map[string]any{"test/suite": "daytona"},
		"env":                         map[string]any{"BERTH_SANDBOX": "1"},
		daytona.FieldAutoStopInterval: int64(30),
	})
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return cfg
}

// harness adapts env to drivertest.Harness and ImageHarness.
type harness struct {
	e   *env
	cfg config.Config
}

func (h *harness) Driver() drivers.Driver { return h.e.drv }
func (h *harness) Config() config.Config  { return h.cfg }
func (h *harness) Close()                 {}

func (h *harness) ConfigWithImage(id images.Identity) (config.Config, bool) {
	if id.SnapshotID() == "" || id.Provider() != "daytona" {
		return nil, false
	}
	cfg := h.cfg.Clone()
	cfg["snapshot_id"] = id.SnapshotID()
	return cfg, true
}

// Broken implements drivertest.FailureHarness against the fake server: a
// loopback port nothing listens on as the API URL, a wrong API key, no API
// key, a snapshot id the server does not hold. Sandboxes have no host keys.
// A dead Daytona API is the provider's control plane: ErrUnavailable
// (PRB-5).
func (h *harness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := map[string]any{}
	for k, v := range h.cfg {
		raw[k] = v
	}
	switch f {
	case drivertest.FailUnreachable:
		raw["api_url"] = deadURL()
		return drivertest.Broken{Config: raw, Layer: drivers.ErrUnavailable}, true
	case drivertest.FailBadCredentials:
		raw["api_key"] = "not-" + h.e.srv.APIKey()
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailMissingCredentials:
		delete(raw, "api_key")
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailUnknownImage:
		raw["snapshot_id"] = "00000000-0000-4000-8000-00000000dead" // a UUID the server never issued
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

// deadURL returns an API URL on a loopback port nothing listens on.
func deadURL() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "http://127.0.0.1:1/api" // a port no test server takes
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr + "/api"
}

// newHarness makes a fake server and a harness on it. Creates answer before
// the sandbox is started (two reads are needed), so every acquire goes
// through the driver's wait.
func newHarness(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
	e := newEnv(tb, envOptions{knobs: daytonafake.Knobs{StartPolls: 2}})
	tb.Cleanup(func() { assertNoKey(tb, e) })
	return &harness{e: e, cfg: e.config(tb, e.snap.ID)}, nil
}

// The driver passes the conformance suite against the fake server.
func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, newHarness)
}

// BenchmarkDriver runs the drivertest benchmarks against the fake server
// (the toolbox runs real sh processes on this host).
func BenchmarkDriver(b *testing.B) {
	drivertest.RunBenchmarks(b, newHarness)
}

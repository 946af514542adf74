package ssh

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/testenv"
)

// syncBuffer is a goroutine-safe log and output sink.
type syncBuffer = testenv.Buffer

// env is a driver wired to a real sshd.
type env struct {
	srv *testenv.SSHServer
	d   *driver
	log *syncBuffer
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return envOn(testenv.SSHD(t))
}

// envOn is a driver wired to srv, logging at debug level.
func envOn(srv *testenv.SSHServer) *env {
	lb := &syncBuffer{}
	d := newDriver(&Options{Logger: slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return &env{srv: srv, d: d, log: lb}
}

// raw returns the config fields for the server, before normalization.
func (e *env) raw(t testing.TB) map[string]any {
	return map[string]any{
		fieldHost:        e.srv.Host(),
		fieldPort:        e.srv.Port(),
		fieldUser:        e.srv.User(),
		fieldPrivateKey:  e.srv.ClientKeyPEM(),
		fieldKnownHosts:  []any{e.srv.KnownHostsLine()},
		fieldWorkdir:     t.TempDir(),
		fieldMaxSessions: 10,
	}
}

func (e *env) config(t testing.TB, edit func(map[string]any)) config.Config {
	t.Helper()
	raw := e.raw(t)
	if edit != nil {
		edit(raw)
	}
	cfg, err := e.d.Schema().Normalize(raw)
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return cfg
}

func (e *env) acquire(t testing.TB, cfg config.Config) *sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A lease id of its own: the lease directory is named after it, and
	// tests run in parallel on one account.
	sb, err := e.d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-1-" + newNonce()})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _, _ = sb.Release(context.Background(), drivers.Destroy) })
	return sb.(*sandbox)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

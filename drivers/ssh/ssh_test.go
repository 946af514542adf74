package ssh

import (
	"context"
	"maps"
	"net"
	"os"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/internal/testenv"
)

// harness is the conformance harness: a fresh sshd and driver per subtest.
type harness struct {
	e    *env
	d    *driver
	cfg  config.Config
	raw  map[string]any // the working config before normalization
	dead int            // a loopback port nothing listens on
}

func (h *harness) Driver() drivers.Driver { return h.d }
func (h *harness) Config() config.Config  { return h.cfg.Clone() }
func (h *harness) Close()                 {}

// Broken implements drivertest.FailureHarness against the real sshd: a
// closed loopback port (the target host: ErrUnreachable), a client key the
// server does not authorize, no private key, a known_hosts line with
// another key for the server. The driver has no images.
func (h *harness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := maps.Clone(h.raw)
	switch f {
	case drivertest.FailUnreachable:
		raw[fieldPort] = h.dead
		return drivertest.Broken{Config: raw, Layer: drivers.ErrUnreachable}, true
	case drivertest.FailBadCredentials:
		raw[fieldPrivateKey] = h.e.srv.UnauthorizedKeyPEM()
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailMissingCredentials:
		delete(raw, fieldPrivateKey)
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailHostKeyMismatch:
		raw[fieldKnownHosts] = []any{h.e.srv.MismatchedKnownHostsLine()}
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

// RunnersAreHostProcesses implements drivertest.HostProcessHarness: the
// test sshd (OpenSSH or Dropbear) runs on this host, and so do its runners.
func (h *harness) RunnersAreHostProcesses() bool { return true }

// RunnerSpec implements drivertest.RunnerHarness: the reference runner,
// built static for this machine (the test sshd runs here).
func (h *harness) RunnerSpec(tb testing.TB) drivers.RunnerSpec {
	bin, sum := testenv.RunnerBinarySum(tb)
	return drivers.RunnerSpec{Binary: bin, SHA256: sum}
}

// TestMain removes the runner binary testenv built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

func newHarness(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
	return harnessOn(tb, newEnv(tb), nil)
}

// harnessOn is the conformance harness of e, its config changed by edit
// (nil: none).
func harnessOn(tb testing.TB, e *env, edit func(map[string]any)) (drivertest.Harness, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	dead := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close() // nothing listens on it any more
	raw := e.raw(tb)
	if edit != nil {
		edit(raw)
	}
	return &harness{e: e, d: e.d, cfg: e.config(tb, edit), raw: raw, dead: dead}, nil
}

// The driver passes the conformance suite against OpenSSH's sshd.
func TestConformance(t *testing.T) {
	drivertest.RunConformanceTests(t, newHarness)
}

func BenchmarkDriver(b *testing.B) {
	drivertest.RunBenchmarks(b, newHarness)
}

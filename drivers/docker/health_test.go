package docker_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
)

// CheckHealth pings the real engine (nothing allocated); an engine socket
// with nothing behind it is ErrUnavailable naming the host (CAP-3, PRB-5).
func TestCheckHealth(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	d := docker.NewConcrete(&docker.Options{Host: cli.DaemonHost()})
	t.Cleanup(func() { _ = d.Close() })
	var hc drivers.HealthChecker = d
	cfg := config.Config{"image": "x"}
	if ep := hc.Endpoint(cfg); ep != cli.DaemonHost() {
		t.Errorf("Endpoint of a config without host = %q, want the default %q", ep, cli.DaemonHost())
	}
	if err := hc.CheckHealth(testCtx(t), cfg); err != nil {
		t.Fatalf("CheckHealth of the live engine: %v", err)
	}
	dead := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock")
	cfg = config.Config{"host": dead}
	if ep := hc.Endpoint(cfg); ep != dead {
		t.Errorf("Endpoint = %q, want %q", ep, dead)
	}
	err := hc.CheckHealth(testCtx(t), cfg)
	if !errors.Is(err, drivers.ErrUnavailable) || reason.Of(err) != reason.ProviderUnavailable || !strings.Contains(err.Error(), dead) {
		t.Errorf("CheckHealth of a dead socket: %v (code %s); want ErrUnavailable naming %s", err, reason.Of(err), dead)
	}
	// A person reads one sentence naming the engine and the fix.
	if m := errcode.MessageOf(err); !strings.Contains(m, "Docker engine at "+dead) || !strings.Contains(m, "start it") {
		t.Errorf("the message of a dead engine: %q", m)
	}
}

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

// A config that sets a runtime has a health of its own on the engine
// (its Endpoint names the runtime), measured from the runtimes the engine
// lists: one the engine lacks is ErrUnavailable naming the runtimes it
// has (no I/O at validation, CAP-1; nothing allocated).
func TestCheckHealthRuntime(t *testing.T) {
	t.Parallel()
	cli := testenv.Docker(t)
	d := docker.NewConcrete(&docker.Options{Host: cli.DaemonHost()})
	t.Cleanup(func() { _ = d.Close() })
	var hc drivers.HealthChecker = d
	info, err := cli.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var some string // a runtime the engine lists
	for name := range info.Runtimes {
		some = name
		break
	}
	if some == "" {
		t.Fatalf("the engine lists no runtime")
	}
	cfg := config.Config{"image": "x", "runtime": some}
	if ep, plain := hc.Endpoint(cfg), hc.Endpoint(config.Config{"image": "x"}); ep == plain || !strings.Contains(ep, some) {
		t.Errorf("Endpoint with runtime %q = %q, without = %q; want a distinct endpoint naming the runtime", some, ep, plain)
	}
	if err := hc.CheckHealth(testCtx(t), cfg); err != nil {
		t.Errorf("CheckHealth with the engine's runtime %q: %v", some, err)
	}
	const missing = "berth-no-such-runtime"
	err = hc.CheckHealth(testCtx(t), config.Config{"image": "x", "runtime": missing})
	if !errors.Is(err, drivers.ErrUnavailable) || reason.Of(err) != reason.ProviderUnavailable {
		t.Fatalf("CheckHealth with runtime %q: %v (code %s); want ErrUnavailable", missing, err, reason.Of(err))
	}
	m := errcode.MessageOf(err)
	for name := range info.Runtimes {
		if !strings.Contains(m, name) {
			t.Errorf("the message %q does not name the engine's runtime %q", m, name)
		}
	}
	if !strings.Contains(m, `"`+missing+`"`) || !strings.Contains(m, cli.DaemonHost()) {
		t.Errorf("the message %q does not name the runtime %q and the engine", m, missing)
	}
}

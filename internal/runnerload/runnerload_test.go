package runnerload_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/runnerload"
)

// TestQuick runs the --quick variant of envctl bench's runners-1k row on
// SQLite: every session connects, and the controller stores every byte
// the simulated runners offered (none lost; back-pressure slows a writer,
// it never drops). No time is asserted.
func TestQuick(t *testing.T) {
	run(t, runnerload.Quick)
}

// TestStormQuick runs the --quick variant of the reconnect-storm row: 5
// of 50 sessions dropped at once halfway through; they all come back (a
// task dispatched to each runs) and the stored output is every offered
// byte, contiguous: nothing lost or duplicated.
func TestStormQuick(t *testing.T) {
	res := run(t, runnerload.StormQuick)
	if res.Dropped != 5 || res.Reconnected != 5 || res.StormBack <= 0 {
		t.Errorf("dropped %d sessions, %d reconnected (back in %s), want 5 and 5", res.Dropped, res.Reconnected, res.StormBack)
	}
}

func run(t *testing.T, cfg runnerload.Config) runnerload.Result {
	t.Helper()
	if testing.Short() {
		t.Skip("builds runnersim and streams for seconds")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := runnerload.BuildSim(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.SimBinary = bin
	cfg.StoreURL = "sqlite://" + filepath.Join(t.TempDir(), "load.db")
	cfg.Dir = t.TempDir()
	res, err := runnerload.Run(ctx, cfg)
	t.Log(res)
	if err != nil {
		t.Fatal(err)
	}
	if res.Connected != cfg.Sessions {
		t.Errorf("%d of %d sessions connected", res.Connected, cfg.Sessions)
	}
	if res.OfferedBytes == 0 || res.StoredBytes != res.OfferedBytes || res.UsageBytes != res.StoredBytes {
		t.Errorf("stored %d bytes (the usage says %d), offered %d: want all of them, and some", res.StoredBytes, res.UsageBytes, res.OfferedBytes)
	}
	if res.Gaps != 0 {
		t.Errorf("%d stream tasks' stored output is not contiguous", res.Gaps)
	}
	if res.SimFailed != 0 {
		t.Errorf("%d simulated runners failed: %v", res.SimFailed, res.SimErrors)
	}
	return res
}

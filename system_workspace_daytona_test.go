package berth_test

import (
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/internal/daytonafake"
)

// The workspace's life and its files through the Daytona driver, against
// the fake Daytona API (toolbox v0.190: files as one uploaded archive
// unpacked by an exec; commands through its shell).
func TestWorkspaceDaytona(t *testing.T) {
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	base, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(), "organization_id": srv.OrganizationID(), "snapshot_id": base.ID}
	drv := func() drivers.Driver {
		return daytona.New(&daytona.Options{PollInterval: time.Millisecond, PollMax: 20 * time.Millisecond,
			RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, CleanupTimeout: 10 * time.Second})
	}
	t.Run("life", func(t *testing.T) { testWorkspaceLife(t, drv(), cfg) })
	t.Run("files", func(t *testing.T) { testWorkspaceFiles(t, drv(), cfg) })
}

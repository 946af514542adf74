package daytona_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
)

// Issue #13 item 6: with an API key, X-Daytona-Organization-ID is ignored
// (only the JWT strategy reads it): a config naming another organization
// still works, in the key's organization, and the driver warns that the
// field did not scope anything.
func TestOrganizationHeaderIsIgnoredForAPIKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := e.config(t, e.snap.ID)
	other := "6f1c9f0e-3a52-4d3b-9c1e-0d7f2b8a4c11"
	cfg["organization_id"] = other
	sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if err != nil {
		t.Fatalf("Acquire with another organization id and an API key: %v", err)
	}
	defer sb.Release(context.Background(), drivers.Destroy)
	log := e.log.String()
	if !strings.Contains(log, "organization_id does not scope") || !strings.Contains(log, e.srv.OrganizationID()) {
		t.Errorf("no warning that organization_id %s did not apply (the key's organization is %s); log:\n%s", other, e.srv.OrganizationID(), log)
	}
}

// Issue #13 item 13: the daytona config's labels follow the one label rule
// of the schema (the berth. prefix is reserved), as Docker's do.
func TestConfigLabelsReservedPrefix(t *testing.T) {
	t.Parallel()
	drv := daytona.NewConcrete(nil)
	base := map[string]any{
		"api_url": "https://app.daytona.io/api", "api_key": "k",
		"snapshot_id": "0b5f6f3e-8f43-4d7c-9a0e-5a3c2b1d4e6f",
	}
	base[daytona.FieldLabels] = map[string]any{"berth.lease": "forged"}
	if _, err := drv.Schema().Normalize(base); err == nil || !strings.Contains(err.Error(), "berth.lease") {
		t.Errorf("labels with the berth. prefix: err = %v, want a refusal naming the key", err)
	}
	base[daytona.FieldLabels] = map[string]any{"team": "infra"}
	if _, err := drv.Schema().Normalize(base); err != nil {
		t.Errorf("ordinary labels: %v", err)
	}
}

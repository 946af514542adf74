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
	cfg[daytona.FieldOrganizationID] = other
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

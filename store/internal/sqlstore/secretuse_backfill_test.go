package sqlstore

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

// The secret_use component records the uses of the leases that were live
// before uses were tracked, so that retiring a secret after the upgrade
// keeps what their cleanups need (CFG-7, LEASE-9). The backfill statement
// runs here again on leases written without uses.
func TestSecretUseBackfill(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		ctx := context.Background()
		db := openTest(t, url(t))
		live := leasetest.Sample("live", lease.StatusActive, "", "")
		live.Config = config.Config{"image": "busybox", "api_key": config.SecretRef{ID: "key", Version: 2},
			"env": map[string]any{"TOKEN": config.SecretRef{ID: "tok", Version: 1}, "PLAIN": "x"}}
		ended := leasetest.Sample("ended", lease.StatusExpired, "", "")
		ended.Config = config.Config{"api_key": config.SecretRef{ID: "old", Version: 1}}
		for _, l := range []*lease.Lease{live, ended} {
			if _, err := db.InsertLease(ctx, l, lease.Quotas{}); err != nil {
				t.Fatal(err)
			}
		}
		stmt := backfillSecretUsesSQLite
		if db.d == postgres {
			stmt = backfillSecretUsesPostgres
		}
		for range 2 { // idempotent
			if _, err := db.w.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("backfill: %v", err)
			}
		}
		free, err := db.RetireSecrets(ctx, []config.SecretRef{{ID: "key"}, {ID: "tok", Version: 1}, {ID: "old"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(free) != 1 || free[0] != (config.SecretRef{ID: "old"}) {
			t.Errorf("retire after the backfill freed %v; want only the ended lease's secret", free)
		}
		var s environment.SecretUseStore = db
		free, err = s.ReleaseSecrets(ctx, "live")
		if err != nil || len(free) != 2 {
			t.Errorf("release of the live lease freed %v, %v; want its two secrets", free, err)
		}
	})
}

package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
)

func TestHealthStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		storetest.RunHealthStoreTests(t, func(t *testing.T) environment.HealthStore { return openTest(t, url(t)) })
	})
}

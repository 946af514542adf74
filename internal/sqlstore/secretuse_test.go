package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
)

func TestSecretUseStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		storetest.RunSecretUseStoreTests(t, func(t *testing.T) environment.SecretUseStore { return openTest(t, url(t)) })
	})
}

package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
)

func TestBindingStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		storetest.RunBindingStoreTests(t, func(t *testing.T) environment.BindingStore { return openTest(t, url(t)) })
	})
}

package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/handover/handovertest"
)

// AUTH-2: the project auth check records pass the store conformance
// suite on SQLite (file and memory) and PostgreSQL.
func TestHandoverStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		handovertest.RunStoreTests(t, func(t *testing.T) handover.Store { return openTest(t, url(t)) })
	})
}

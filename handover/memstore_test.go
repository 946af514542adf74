package handover_test

import (
	"testing"

	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/handover/handovertest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	handovertest.RunStoreTests(t, func(*testing.T) handover.Store { return handover.NewMemoryStore() })
}

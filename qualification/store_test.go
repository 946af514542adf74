package qualification_test

import (
	"testing"

	"github.com/berthdev/berth/qualification"
	"github.com/berthdev/berth/qualification/qualificationtest"
)

// The memory store passes the store conformance suite (QUAL-2, QUAL-4).
func TestMemoryStore(t *testing.T) {
	t.Parallel()
	qualificationtest.RunStoreTests(t, func(*testing.T) qualification.Store { return qualification.NewMemoryStore() })
}

package custom_test

import (
	"testing"

	"github.com/berthdev/berth/images/custom"
	"github.com/berthdev/berth/images/custom/customtest"
)

func TestMemoryStore(t *testing.T) {
	customtest.RunStoreTests(t, func(*testing.T) custom.Store { return custom.NewMemoryStore() })
}

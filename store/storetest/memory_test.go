package storetest_test

import (
	"testing"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/storetest"
)

// The memory stores of every package pass every suite through one Stores.
func TestMemory(t *testing.T) {
	storetest.RunStoreTests(t, func(*testing.T) store.Stores { return store.Memory() })
}

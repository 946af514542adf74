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

// Missing names the nil fields, in order; Memory leaves none.
func TestMissing(t *testing.T) {
	if m := store.Memory().Missing(); len(m) != 0 {
		t.Errorf("Memory().Missing() = %v, want none", m)
	}
	all := (store.Stores{}).Missing()
	if len(all) != 11 || all[0] != "Environments" || all[7] != "Runners" || all[8] != "Settings" || all[9] != "Templates" || all[10] != "Workspaces" {
		t.Errorf("Stores{}.Missing() = %v, want every field from Environments to Workspaces", all)
	}
	s := store.Memory()
	s.Leases, s.Runners = nil, nil
	if m := s.Missing(); len(m) != 2 || m[0] != "Leases" || m[1] != "Runners" {
		t.Errorf("Missing() = %v, want [Leases Runners]", m)
	}
}

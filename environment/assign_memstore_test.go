package environment_test

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/environment/environmenttest"
)

// TestMemoryBindingStoreConformance runs the environment.BindingStore
// conformance suite (ASG-1, ASG-5 at the store level) against
// MemoryBindingStore.
func TestMemoryBindingStoreConformance(t *testing.T) {
	t.Parallel()
	environmenttest.RunBindingStoreTests(t, func(*testing.T) environment.BindingStore { return environment.NewMemoryBindingStore() })
}

func TestMemoryHealthStore(t *testing.T) {
	t.Parallel()
	environmenttest.RunHealthStoreTests(t, func(*testing.T) environment.HealthStore { return environment.NewMemoryHealthStore() })
}

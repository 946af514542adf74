package environment_test

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
)

// TestMemoryStoreConformance runs the environment.Store conformance suite
// (CFG-1, CFG-4, CFG-6 at the store level) against MemoryStore.
func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.RunEnvironmentStoreTests(t, func(*testing.T) environment.Store { return environment.NewMemoryStore() })
}

func TestMemorySecretUseStore(t *testing.T) {
	t.Parallel()
	storetest.RunSecretUseStoreTests(t, func(*testing.T) environment.SecretUseStore { return environment.NewMemorySecretUseStore() })
}

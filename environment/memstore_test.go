package environment_test

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/environment/environmenttest"
)

// TestMemoryStoreConformance runs the environment.Store conformance suite
// (CFG-1, CFG-4, CFG-6 at the store level) against MemoryStore.
func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	environmenttest.RunStoreTests(t, func(*testing.T) environment.Store { return environment.NewMemoryStore() })
}

func TestMemorySecretUseStore(t *testing.T) {
	t.Parallel()
	environmenttest.RunSecretUseStoreTests(t, func(*testing.T) environment.SecretUseStore { return environment.NewMemorySecretUseStore() })
}

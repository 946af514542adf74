package controller_test

import (
	"testing"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/controller/controllertest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	controllertest.RunStoreTests(t, func(*testing.T) controller.Store { return controller.NewMemoryStore() })
}

package workspace_test

import (
	"testing"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/workspace"
	"github.com/berthdev/berth/workspace/workspacetest"
)

func TestMemoryStore(t *testing.T) {
	workspacetest.RunStoreTests(t, func(*testing.T) workspace.Store { return store.Memory().Workspaces })
}

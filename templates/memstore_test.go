package templates_test

import (
	"testing"

	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
	"github.com/berthdev/berth/templates/templatestest"
)

func TestMemoryStore(t *testing.T) {
	templatestest.RunStoreTests(t, func(*testing.T) templates.Store { return store.Memory().Templates })
}

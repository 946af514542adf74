package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/prp"
	"github.com/berthdev/berth/prp/controller"
	"github.com/berthdev/berth/prp/controller/controllertest"
	"github.com/berthdev/berth/prp/prptest"
)

func TestPRPTicketStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		prptest.TestTicketStore(t, func(t *testing.T) prp.TicketStore { return openTest(t, url(t)).PRP() })
	})
}

func TestPRPControllerStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		controllertest.TestStore(t, func(t *testing.T) controller.Store { return openTest(t, url(t)).PRP() })
	})
}

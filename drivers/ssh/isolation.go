package ssh

import (
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// Isolation implements drivers.IsolationDeclarer: a command runs on the
// SSH host itself, so none. No I/O.
func (d *driver) Isolation(config.Config) drivers.Isolation { return drivers.IsolationNone }

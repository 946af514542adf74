package daytona

import (
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// Isolation implements drivers.IsolationDeclarer: container, what
// Daytona's documentation promises for the sandboxes this driver creates.
// Its isolation page (https://www.daytona.io/docs/en/isolation/) gives the
// runtime boundary per sandbox class, the default class being an
// "isolated container with dedicated namespaces"; this driver chooses no
// class. Daytona's v2 documentation
// promises a Firecracker microVM per sandbox; a driver for that API would
// declare microvm once the conformance suite measures it. No I/O.
func (d *driver) Isolation(config.Config) drivers.Isolation { return drivers.IsolationContainer }

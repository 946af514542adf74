// Command daytonaplugin is the Daytona driver (drivers/daytona) served as a
// berth plugin: the API is the one its config names. The tests of package
// drivers/plugin build it and run it against the fake Daytona API
// (internal/daytonafake), for what neither the fake's plugin nor the
// Docker plugin carries: a driver that lists the provider's images
// (drivers.ImageLister). The README shows its main, the whole of a
// plugin's code (TestREADMEPluginIsTested).
package main

import (
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/plugin"
)

func main() { plugin.Serve(daytona.New(nil), "1.0.0") }

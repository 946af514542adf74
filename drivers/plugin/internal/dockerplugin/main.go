// Command dockerplugin is the Docker driver (drivers/docker) served as a
// berth plugin: the engine is the one its config names (the host's
// DOCKER_HOST by default, the environment being the host's). The tests
// of package drivers/plugin build it and run the conformance suite
// through it against the real engine.
package main

import (
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/plugin"
)

// version is the plugin's version, as its manifest records it.
const version = "1.0.0"

func main() { plugin.Serve(docker.New(nil), version) }

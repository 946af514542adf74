package docker

import (
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// fieldRuntime names the OCI runtime the engine runs a container with
// ("runsc" for gVisor); absent, the engine's default runtime.
const fieldRuntime = "runtime"

// runtimeGVisor is the name Docker engines register gVisor's runtime
// under.
const runtimeGVisor = "runsc"

// Isolation implements drivers.IsolationDeclarer: gvisor for a config
// whose runtime is runsc, else container (a container shares the engine's
// kernel). No I/O.
func (d *driver) Isolation(cfg config.Config) drivers.Isolation {
	if cfg.String(fieldRuntime) == runtimeGVisor {
		return drivers.IsolationGVisor
	}
	return drivers.IsolationContainer
}

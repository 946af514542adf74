package docker

import (
	"errors"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"

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

// withRuntime adds the runtime field to s, and to its config check what
// gVisor cannot do: an identity field (a container's runtime is part of
// what a qualification vouches for) with no default, so that a config
// without it keeps its fingerprint and runs under the engine's default
// runtime.
func withRuntime(s *config.Schema) *config.Schema {
	s.Fields = append(s.Fields, config.Field{Name: fieldRuntime, Advanced: true, Kind: config.KindIdentity, Type: config.TypeString, Check: checkRuntime,
		Doc: `OCI runtime of the container, as the engine lists it (docker info): "runsc" runs it under gVisor, a kernel in user space (isolation gvisor); ` +
			`default: the engine's default runtime (runc: a container sharing the engine's kernel). Under runsc the network must be "none"`})
	check := s.Check
	s.Check = func(c config.Config) error {
		if c.String(fieldRuntime) == runtimeGVisor && c.String(fieldNetwork) != "none" {
			return &config.Error{Driver: driverName, Field: fieldNetwork,
				Reason: fmt.Sprintf(`the runtime %q (gVisor) runs with its network off (--network=none): set network to "none", or leave runtime unset for network %q`, runtimeGVisor, c.String(fieldNetwork))}
		}
		if check != nil {
			return check(c)
		}
		return nil
	}
	return s
}

// checkRuntime accepts a runtime name as dockerd's config takes one.
func checkRuntime(v any) error {
	s := v.(string)
	if s == "" || len(s) > 64 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("%q: want a runtime name the engine lists, such as %q", s, runtimeGVisor)
	}
	return nil
}

// errRuntime is the reason a created container's runtime is not the
// configured one.
var errRuntime = errors.New("runs under another runtime")

// checkContainerRuntime reports whether the container ins runs under the
// configured runtime (none configured: anything goes); the engine's
// inspect, not the request, is what counts.
func checkContainerRuntime(cfg *settings, ins container.InspectResponse) error {
	if cfg.runtime == "" {
		return nil
	}
	got := ""
	if ins.HostConfig != nil {
		got = ins.HostConfig.Runtime
	}
	if got != cfg.runtime {
		return fmt.Errorf("docker %s: container %s %w (%q, configured %q): %w", cfg.host, ins.ID, errRuntime, got, cfg.runtime, drivers.ErrUnsupported)
	}
	return nil
}

// unknownRuntime returns, for a create the engine refused because it has
// no such runtime, an error wrapping drivers.ErrUnsupported that names the
// runtime and what to do; else nil. The engine creates nothing then.
func unknownRuntime(cfg *settings, err error) error {
	if cfg.runtime == "" || err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown runtime") {
		return nil
	}
	return fmt.Errorf("docker %s: the engine has no runtime %q (docker info lists its runtimes; register it in the engine's daemon.json, or change the runtime setting): %v: %w",
		cfg.host, cfg.runtime, err, drivers.ErrUnsupported)
}

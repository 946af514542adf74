package docker_test

import (
	"fmt"

	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/errcode"
)

// A host registers the docker driver and saves a config through its
// schema; nothing here contacts the engine (New connects lazily, and
// Capabilities and Schema do no I/O). The image is pinned by digest, so
// that it can qualify; the env values are secrets (the catalog moves each
// into the host's secret store and the driver hands them only to commands),
// so only their keys are shown. A host network is refused.
func ExampleNew() {
	d := docker.New(&docker.Options{Host: "unix:///var/run/docker.sock"})
	defer d.Close()
	caps := d.Capabilities()
	fmt.Println(d.Name(), caps.Kind, caps.StartupBudget)

	schema := d.Schema()
	raw := map[string]any{ // as json.Unmarshal gives it
		"image":  "ghcr.io/acme/agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"memory": "2g",
		"env":    map[string]any{"GITHUB_TOKEN": "ghp_example"},
	}
	cfg, err := schema.Normalize(raw)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, err := schema.Image(cfg)
	_, pinned := ref.Identity()
	fmt.Println(ref.Kind(), pinned, err)
	fmt.Println(cfg.String("network"), cfg.String("memory"), cfg.Int("pids_limit"))
	fmt.Println(schema.Redact(cfg)["env"])

	raw["network"] = "host"
	_, err = schema.Normalize(raw)
	fmt.Println(errcode.ReasonOf(err), "-", err)
	// Output:
	// docker sandbox 1m0s
	// digest true <nil>
	// none 2g 512
	// map[GITHUB_TOKEN:[redacted]]
	// invalid_config - docker config: field "network": "host" would share the host's network; refused
}

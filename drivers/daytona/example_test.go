package daytona_test

import (
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/errcode"
)

// A host registers the daytona driver and saves a config through its
// schema; nothing here calls Daytona. The API key is the secret (and the
// provider account: a managed account's auth check is bound to its
// reference); the snapshot is named by id, so that the image is pinned;
// the API is reached over https unless it is on loopback.
func ExampleNew() {
	d := daytona.New(nil)
	caps := d.Capabilities()
	fmt.Println(d.Name(), caps.Kind, caps.Declared.Has(drivers.CapRunnerIngress))

	schema := d.Schema()
	fmt.Println("account:", schema.AccountField, "image:", schema.ImageField)
	raw := map[string]any{ // as json.Unmarshal gives it
		"api_url":     "https://app.daytona.io/api",
		"api_key":     "dtn_example_key",
		"snapshot_id": "8a1f6c2e-3b7d-4e9a-9c0f-5d2b1e7a4c36",
	}
	cfg, err := schema.Normalize(raw)
	if err != nil {
		fmt.Println(err)
		return
	}
	ref, err := schema.Image(cfg)
	_, pinned := ref.Identity()
	fmt.Println(ref, pinned, err)
	fmt.Println(schema.Redact(cfg).String("api_key"))

	raw["snapshot_id"] = "python-dev"
	_, err = schema.Normalize(raw)
	fmt.Println(errcode.ReasonOf(err), "-", err)
	raw["snapshot_id"] = "8a1f6c2e-3b7d-4e9a-9c0f-5d2b1e7a4c36"
	raw["api_url"] = "http://daytona.example/api"
	_, err = schema.Normalize(raw)
	fmt.Println(errcode.ReasonOf(err), "-", err)
	// Output:
	// daytona sandbox false
	// account: api_key image: snapshot_id
	// snapshot:daytona/8a1f6c2e-3b7d-4e9a-9c0f-5d2b1e7a4c36 true <nil>
	// [redacted]
	// invalid_config - daytona config: field "snapshot_id": "python-dev" is not a snapshot id (a UUID); snapshots known only by name do not qualify
	// invalid_config - daytona config: field "api_url": must use https: http is accepted only for a loopback host, not "daytona.example"
}

package local_test

import (
	"fmt"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/errcode"
)

// A host registers the local driver (the machine berth runs on) and saves a
// config through its schema; nothing here runs a command. The driver is a
// host driver: its leases are sessions in a working directory, with no
// isolation between them, and its config holds no secret.
func ExampleNew() {
	reg := drivers.NewRegistry(local.New(nil))
	defer reg.Close()
	info := reg.List()[0]
	fmt.Println(info.Name, info.Kind, info.Effective, info.Available)

	d, err := reg.Lookup("local")
	if err != nil {
		fmt.Println(err)
		return
	}
	schema := d.Schema()
	cfg, err := schema.Normalize(map[string]any{"workdir": "/srv/agents/ws-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.String("workdir"), cfg.String("shell"))
	for _, f := range schema.Fields {
		fmt.Println(f.Name, f.Kind)
	}
	_, err = schema.Normalize(map[string]any{"host": "elsewhere"})
	fmt.Println(errcode.ReasonOf(err), "-", err)
	// Output:
	// local host exec,stream_exec,runner_ingress,files true
	// /srv/agents/ws-1 /bin/sh
	// workdir identity
	// shell knob
	// invalid_config - local config: field "host": unknown field
}

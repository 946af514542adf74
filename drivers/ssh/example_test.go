package ssh_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"

	xssh "golang.org/x/crypto/ssh"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/errcode"
)

// A host registers the ssh driver and saves a target's config through its
// schema; nothing here dials the server. The private key is the only
// secret: the catalog moves it into the host's secret store, and what is
// shown of it is redacted. A config without it is refused as missing
// credentials, and forwarding "none" (what a probe measured) narrows the
// runner's ingress away.
func ExampleNew() {
	// The client key the operator pastes (PEM text); made here for the example.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := xssh.MarshalPrivateKey(priv, "")
	if err != nil {
		panic(err)
	}
	pemText := string(pem.EncodeToMemory(block))

	d := ssh.New(nil)
	caps := d.Capabilities()
	fmt.Println(d.Name(), caps.Kind, caps.Declared)

	schema := d.Schema()
	for _, f := range schema.Fields {
		if f.Required {
			fmt.Printf("%s (%s, required)\n", f.Name, f.Kind)
		}
	}
	raw := map[string]any{ // as json.Unmarshal gives it
		"host":        "build-1.example",
		"user":        "agent",
		"private_key": pemText,
		// The line ssh.ScanHostKey returned, checked by the operator.
		"known_hosts": []any{"build-1.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPAnHI7BLd1ahQ0hv4V4kbXr9qCvf0VG4BfJVWJJ6zuH"},
	}
	cfg, err := schema.Normalize(raw)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Int("port"), cfg.String("workdir"), schema.Redact(cfg).String("private_key"))

	_, err = schema.Normalize(map[string]any{"host": "build-1.example", "user": "agent"})
	fmt.Println(errcode.ReasonOf(err), "-", err)

	raw["forwarding"] = "none"
	if cfg, err = schema.Normalize(raw); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(drivers.Effective(d, drivers.ConfigNarrowing(d, cfg)))
	// Output:
	// ssh host exec,stream_exec,terminal,runner_ingress,files
	// host (identity, required)
	// user (identity, required)
	// private_key (secret, required)
	// 22 ~ [redacted]
	// missing_credentials - ssh config: field "private_key": required
	// exec,stream_exec,terminal,files
}

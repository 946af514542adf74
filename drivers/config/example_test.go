package config_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/berthdev/berth/drivers/config"
)

// A host normalizes what an operator submitted (JSON from a form) through
// the driver's schema: defaults are applied, types are normalized, and a
// secret is shown only redacted. Every problem is a *config.Error naming
// the driver and the field, never the secret's value.
func ExampleSchema_Normalize() {
	// The schema comes from drivers.Driver.Schema(); this one is written
	// out to show what a driver declares.
	schema := &config.Schema{Driver: "ssh", Fields: []config.Field{
		{Name: "host", Kind: config.KindIdentity, Type: config.TypeString, Required: true},
		{Name: "port", Kind: config.KindIdentity, Type: config.TypeInt, Default: int64(22)},
		{Name: "private_key", Kind: config.KindSecret, Type: config.TypeString, Required: true},
		{Name: "connect_timeout", Kind: config.KindKnob, Type: config.TypeDuration, Default: "10s"},
	}}

	var raw map[string]any
	if err := json.Unmarshal([]byte(`{"host": "build-1", "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----..."}`), &raw); err != nil {
		panic(err)
	}
	cfg, err := schema.Normalize(raw)
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.String("host"), cfg.Int("port"), cfg.Duration("connect_timeout"))
	fmt.Println(schema.Redact(cfg).String("private_key"))
	for _, f := range schema.Fields {
		if f.Kind == config.KindSecret {
			fmt.Println("secret field:", f.Name)
		}
	}

	// A wrong type and a missing secret, reported together.
	_, err = schema.Normalize(map[string]any{"host": "build-1", "port": "twenty-two"})
	var ce *config.Error
	fmt.Println(errors.As(err, &ce), ce.Field, errors.Is(err, config.ErrInvalid), errors.Is(err, config.ErrCredentialsMissing))
	fmt.Println(err)
	// Output:
	// build-1 22 10s
	// [redacted]
	// secret field: private_key
	// true port true true
	// ssh config: field "port": want integer, got string
	// ssh config: field "private_key": required
}

// A saved config holds a reference where the operator pasted a secret (the
// catalog moved the value into the host's secret store). A host reads the
// reference from the stored JSON without the schema; it names the secret
// and its version, never the value.
func ExampleConfig_SecretRef() {
	var cfg config.Config
	stored := `{"host": "build-1", "port": 22, "private_key": {"$secret": "sec_0f3a", "version": 2}}`
	if err := json.Unmarshal([]byte(stored), &cfg); err != nil {
		panic(err)
	}
	ref, ok := cfg.SecretRef("private_key")
	fmt.Println(ref, ok)
	_, ok = cfg.SecretRef("host")
	fmt.Println(ok, cfg.String("host"), cfg.Int("port"))
	// Output:
	// secret:sec_0f3a@v2 true
	// false build-1 22
}

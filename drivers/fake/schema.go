package fake

import (
	"errors"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
)

// Config field names of the fake driver.
const (
	FieldImage          = "image"
	FieldRegion         = "region"
	FieldCPUs           = "cpus"
	FieldStartupTimeout = "startup_timeout"
	FieldAPIKey         = "api_key"
	FieldNotes          = "notes"
)

// DefaultRegion is the default of the region field.
const DefaultRegion = "local-1"

func newSchema(driver string, keyRequired bool) *config.Schema {
	return &config.Schema{
		Driver:     driver,
		ImageField: FieldImage,
		ImageReference: func(cfg config.Config) (images.Reference, error) {
			return imageReference(driver, cfg.String(FieldImage))
		},
		Fields: []config.Field{
			{
				Name: FieldImage, Kind: config.KindIdentity, Type: config.TypeString,
				Doc: "OCI reference (repo:tag or repo@sha256:...), snapshot:<id> or snapshot-name:<name>; " +
					"absent: the provider default image",
				Check: checkImageRef,
			},
			{
				Name: FieldRegion, Kind: config.KindIdentity, Type: config.TypeString, Default: DefaultRegion,
				Doc: "provider region; part of the target's identity",
			},
			{
				Name: FieldCPUs, Kind: config.KindKnob, Type: config.TypeInt, Default: int64(1),
				Doc: "CPUs per sandbox (1-64)",
				Check: func(v any) error {
					if n, _ := v.(int64); n < 1 || n > 64 {
						return errors.New("must be between 1 and 64")
					}
					return nil
				},
			},
			{
				Name: FieldStartupTimeout, Kind: config.KindKnob, Type: config.TypeDuration,
				Doc: "startup budget of a lease; absent: the provider-declared one",
			},
			{
				Name: FieldAPIKey, Kind: config.KindSecret, Type: config.TypeString, Required: keyRequired,
				Doc: "provider API key (required when the fake was built with Options.APIKey)",
			},
			{
				Name: FieldNotes, Kind: config.KindMetadata, Type: config.TypeString,
				Doc: "free text for operators",
			},
		},
	}
}

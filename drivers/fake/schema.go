package fake

import (
	"errors"

	"github.com/berthdev/berth/drivers"
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

func newSchema(driver string, keyRequired bool) *drivers.ConfigSchema {
	return &drivers.ConfigSchema{
		Driver:     driver,
		ImageField: FieldImage,
		ImageReference: func(cfg drivers.Config) (images.Reference, error) {
			return imageReference(driver, cfg.String(FieldImage))
		},
		Fields: []drivers.Field{
			{
				Name: FieldImage, Kind: drivers.KindIdentity, Type: drivers.TypeString,
				Doc: "OCI reference (repo:tag or repo@sha256:...), snapshot:<id> or snapshot-name:<name>; " +
					"absent: the provider default image",
				Check: checkImageRef,
			},
			{
				Name: FieldRegion, Kind: drivers.KindIdentity, Type: drivers.TypeString, Default: DefaultRegion,
				Doc: "provider region; part of the target's identity",
			},
			{
				Name: FieldCPUs, Kind: drivers.KindKnob, Type: drivers.TypeInt, Default: int64(1),
				Doc: "CPUs per sandbox (1-64)",
				Check: func(v any) error {
					if n, _ := v.(int64); n < 1 || n > 64 {
						return errors.New("must be between 1 and 64")
					}
					return nil
				},
			},
			{
				Name: FieldStartupTimeout, Kind: drivers.KindKnob, Type: drivers.TypeDuration,
				Doc: "startup budget of a lease; absent: the provider-declared one",
			},
			{
				Name: FieldAPIKey, Kind: drivers.KindSecret, Type: drivers.TypeString, Required: keyRequired,
				Doc: "provider API key (required when the fake was built with Options.APIKey)",
			},
			{
				Name: FieldNotes, Kind: drivers.KindMetadata, Type: drivers.TypeString,
				Doc: "free text for operators",
			},
		},
	}
}

// Package config holds a driver's config and the schema that describes it:
//
//	schema := &config.Schema{Driver: "ssh", Fields: []config.Field{
//		{Name: "host", Kind: config.KindIdentity, Type: config.TypeString, Required: true},
//		{Name: "private_key", Kind: config.KindSecret, Type: config.TypeString},
//	}}
//	cfg, err := schema.Normalize(raw)  // raw from json.Unmarshal into map[string]any
//	if errors.Is(err, config.ErrInvalid) { ... } // a *config.Error names the field
//	shown := schema.Redact(cfg)        // secrets replaced by Redacted or kept as references
//
// A driver returns its Schema from drivers.Driver.Schema; the catalog,
// probes and the lease manager read every config through it, so no other
// package hand-lists a driver's fields.
//
// Guarantees:
//   - Schema.Normalize validates and normalizes (types, defaults, required
//     fields, unknown fields refused, a string at most 64 KiB and a list
//     or map at most 1024 entries, no NUL bytes or invalid UTF-8, and the
//     labels rule: a StringMap field named "labels" may have no empty key
//     and no key starting "berth.") and
//     reports every problem as a *Error naming the driver and the field,
//     never quoting a secret value.
//   - Kinds drive what happens to a field: KindSecret values are moved out
//     of configs into a secret store and replaced by a SecretRef;
//     KindSecretMap values (a sandbox's env vars) are each moved and
//     referenced, and the field is left out of fingerprints; KindIdentity
//     fields say which target, image or template is used (fingerprints,
//     drift); KindKnob and KindMetadata fields are left out of fingerprints.
//     berth itself (the catalog, the lease manager, probes) moves, resolves
//     and scrubs the secrets through the schema; a driver only declares the
//     kinds.
//   - Redact returns what may be shown: secret values replaced by Redacted,
//     references kept. Config.SecretRef and Config.SecretMapRefs read the
//     references a stored config holds.
package config

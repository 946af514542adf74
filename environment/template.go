package environment

import (
	"maps"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/secretcfg"
)

// SourceFingerprint returns e's source fingerprint for its driver d
// (qualify.SourceFingerprint): the driver, the schema's identity
// fields, the account (secret references with their versions) and the
// normalized image; never knobs, metadata or names. It does no I/O. The
// probe's qualification fingerprint is built from the same parts (plus
// the applied template's identity).
func (e *Environment) sourceFingerprint(d drivers.Driver) string {
	return qualify.SourceFingerprint(sourceInput(d, e.Config))
}

// drift reports whether e's active template applies to its current config
// (IMG-6): DriftNone without one, DriftRelinked while the template's source
// fingerprint equals e's current one, else DriftDetached. It does no I/O.
func (e *Environment) drift(d drivers.Driver) Drift {
	switch {
	case e.ActiveTemplate == nil:
		return DriftNone
	case d != nil && e.ActiveTemplate.SourceFingerprint == e.sourceFingerprint(d):
		return DriftRelinked
	}
	return DriftDetached
}

// AppliedTemplate returns a copy of the active template with its Drift
// when it applies to e's current config (DriftRelinked), else nil: what a
// lease starts from and what the qualification fingerprint covers (IMG-8).
func (e *Environment) appliedTemplate(d drivers.Driver) *ActiveTemplate {
	if e.drift(d) != DriftRelinked {
		return nil
	}
	t := *e.ActiveTemplate
	t.Drift = DriftRelinked
	return &t
}

// sourceInput builds the fingerprint input of cfg for d as the probe's
// qualification subject does (probe.subjectOf; a test there checks that
// the two agree): the identity fields without the image field, the secret
// references, and the image, normalized when it parses.
func sourceInput(d drivers.Driver, cfg config.Config) qualify.FingerprintInput {
	schema := d.Schema()
	parts := secretcfg.Partition(schema, cfg)
	target := maps.Clone(parts.Identity)
	delete(target, schema.ImageField)
	secrets := make(map[string]qualify.SecretRef, len(parts.Secrets))
	for k, ref := range parts.Secrets {
		secrets[k] = qualify.SecretRef{ID: ref.ID, Version: ref.Version}
	}
	image := cfg.String(schema.ImageField)
	if ref, err := schema.Image(cfg); err == nil && !ref.IsZero() {
		image = ref.String()
	}
	return qualify.FingerprintInput{Driver: d.Name(), Target: target, Secrets: secrets, Image: image}
}

// Package secretcfg is what berth does with a config's secrets through its
// driver's schema (drivers/config): the fields still holding plain values to
// move into the secret store, the references a config holds, resolution for
// the call that needs the values, the values a redaction scan looks for, and
// the partition by kind that fingerprints are built from. Drivers declare
// kinds; only berth's own packages (the catalog, the lease manager, probes,
// templates) handle the secrets, so none of this is public.
package secretcfg

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/berthdev/berth/drivers/config"
)

// asRef reads a SecretRef from its normalized or JSON-decoded form, as
// config.Config.SecretRef does.
func asRef(v any) (config.SecretRef, bool) { return config.Config{"": v}.SecretRef("") }

// PlainSecrets returns, in schema order, the names of the Secret fields of
// cfg that hold a value rather than a config.SecretRef and of the SecretMap fields
// that hold at least one such value: the fields whose values are to be
// moved into the secret store (see PlainSecretKeys for the keys).
func PlainSecrets(s *config.Schema, cfg config.Config) []string {
	var out []string
	for _, f := range s.Fields {
		v, ok := cfg[f.Name]
		if !ok {
			continue
		}
		switch f.Kind {
		case config.KindSecret:
			if _, isRef := asRef(v); !isRef {
				out = append(out, f.Name)
			}
		case config.KindSecretMap:
			if len(PlainSecretKeys(cfg, f.Name)) > 0 {
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// Parts is a config split by field kind.
type Parts struct {
	Identity map[string]any              // Identity fields present in the config
	Secrets  map[string]config.SecretRef // Secret fields that hold references
	Knobs    map[string]any
	Metadata map[string]any
}

// Partition splits cfg by the kind of each field; fields the schema does not
// know are dropped. Secret fields still holding a value are dropped too: only
// references take part in fingerprints. SecretMap fields are dropped
// entirely, keys and references alike: a rotated env token is not a change
// of target or account, so every fingerprint built from the parts (the lease
// reuse fingerprint, the qualification fingerprint) keeps its value.
func Partition(s *config.Schema, cfg config.Config) Parts {
	p := Parts{Identity: map[string]any{}, Secrets: map[string]config.SecretRef{}, Knobs: map[string]any{}, Metadata: map[string]any{}}
	for _, f := range s.Fields {
		v, ok := cfg[f.Name]
		if !ok {
			continue
		}
		switch f.Kind {
		case config.KindIdentity:
			p.Identity[f.Name] = v
		case config.KindKnob:
			p.Knobs[f.Name] = v
		case config.KindMetadata:
			p.Metadata[f.Name] = v
		case config.KindSecret:
			if ref, isRef := asRef(v); isRef {
				p.Secrets[f.Name] = ref
			}
		}
	}
	return p
}

// ResolveSecrets returns a copy of cfg in which every SecretRef is replaced
// by the value lookup returns for it: the config a driver's Acquire takes.
// A SecretMap field becomes a map[string]string of values, which
// Config.StringMap reads. An error from lookup is wrapped with the field
// name (and the key of a SecretMap field), never a value.
func ResolveSecrets(ctx context.Context, s *config.Schema, cfg config.Config, lookup func(context.Context, config.SecretRef) (string, error)) (config.Config, error) {
	out := cfg.Clone()
	for _, f := range s.Fields {
		switch f.Kind {
		case config.KindSecret:
			ref, ok := asRef(out[f.Name])
			if !ok {
				continue
			}
			v, err := lookup(ctx, ref)
			if err != nil {
				return nil, fmt.Errorf("%s config: field %q: resolving %s: %w", s.Driver, f.Name, ref, err)
			}
			out[f.Name] = v
		case config.KindSecretMap:
			m, ok := out[f.Name].(map[string]any)
			if !ok {
				if sm, isStrings := out[f.Name].(map[string]string); isStrings {
					out[f.Name] = maps.Clone(sm)
				}
				continue
			}
			res := make(map[string]string, len(m))
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if sv, isString := m[k].(string); isString {
					res[k] = sv
					continue
				}
				ref, isRef := asRef(m[k])
				if !isRef {
					return nil, fmt.Errorf("%s config: field %q: key %q: want a string or a secret reference: %w", s.Driver, f.Name, k, config.ErrInvalid)
				}
				v, err := lookup(ctx, ref)
				if err != nil {
					return nil, fmt.Errorf("%s config: field %q: key %q: resolving %s: %w", s.Driver, f.Name, k, ref, err)
				}
				res[k] = v
			}
			out[f.Name] = res
		}
	}
	return out, nil
}

// SecretValues returns the plain secret values cfg holds: those of Secret
// fields and of SecretMap fields (pasted, or resolved), for scrubbing text
// such as command output or provider messages. Empty values are left out.
func SecretValues(s *config.Schema, cfg config.Config) []string {
	var out []string
	for _, f := range s.Fields {
		switch f.Kind {
		case config.KindSecret:
			if v, ok := cfg[f.Name].(string); ok && v != "" {
				out = append(out, v)
			}
		case config.KindSecretMap:
			switch m := cfg[f.Name].(type) {
			case map[string]any:
				for _, k := range slices.Sorted(maps.Keys(m)) {
					if v, ok := m[k].(string); ok && v != "" {
						out = append(out, v)
					}
				}
			case map[string]string:
				for _, k := range slices.Sorted(maps.Keys(m)) {
					if v := m[k]; v != "" {
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}

// PlainSecretKeys returns the sorted keys of map field name whose values
// are plain strings rather than SecretRefs: in a SecretMap field of a
// stored config, the values still to be moved into the secret store; in a
// resolved config, every key.
func PlainSecretKeys(c config.Config, name string) []string {
	var out []string
	switch m := c[name].(type) {
	case map[string]any:
		for k, v := range m {
			if _, ok := v.(string); ok {
				out = append(out, k)
			}
		}
	case map[string]string:
		out = slices.Collect(maps.Keys(m))
	}
	slices.Sort(out)
	return out
}

// SecretRefs returns every config.SecretRef cfg holds, in fields and in the values
// of map fields, sorted by ID then version. It needs no schema, so that the
// secrets of a config whose driver is gone can still be found.
func SecretRefs(c config.Config) []config.SecretRef {
	var out []config.SecretRef
	for k, v := range c {
		if ref, ok := asRef(v); ok {
			out = append(out, ref)
			continue
		}
		for _, ref := range c.SecretMapRefs(k) {
			out = append(out, ref)
		}
	}
	slices.SortFunc(out, func(a, b config.SecretRef) int {
		if a.ID != b.ID {
			if a.ID < b.ID {
				return -1
			}
			return 1
		}
		return int(a.Version - b.Version)
	})
	return out
}

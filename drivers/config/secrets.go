package config

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Redacted is what Redact puts in place of a secret value that has not been
// moved into the secret store.
const Redacted = "[redacted]"

// Redact returns a copy of cfg in which every Secret field that holds a value
// (rather than a SecretRef) is replaced by Redacted, and every value of a
// SecretMap field that is not a SecretRef is replaced by Redacted (its keys
// are kept). References are kept: they name a secret without revealing it.
func (s *Schema) Redact(cfg Config) Config {
	out := cfg.Clone()
	for _, f := range s.Fields {
		v, ok := out[f.Name]
		if !ok {
			continue
		}
		switch f.Kind {
		case KindSecret:
			if _, isRef := asSecretRef(v); !isRef {
				out[f.Name] = Redacted
			}
		case KindSecretMap:
			out[f.Name] = redactMap(v)
		}
	}
	return out
}

// PlainSecrets returns, in schema order, the names of the Secret fields of
// cfg that hold a value rather than a SecretRef and of the SecretMap fields
// that hold at least one such value: the fields whose values are to be
// moved into the secret store (see PlainSecretKeys for the keys).
func (s *Schema) PlainSecrets(cfg Config) []string {
	var out []string
	for _, f := range s.Fields {
		v, ok := cfg[f.Name]
		if !ok {
			continue
		}
		switch f.Kind {
		case KindSecret:
			if _, isRef := asSecretRef(v); !isRef {
				out = append(out, f.Name)
			}
		case KindSecretMap:
			if len(cfg.PlainSecretKeys(f.Name)) > 0 {
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// Parts is a config split by field kind.
type Parts struct {
	Identity map[string]any       // Identity fields present in the config
	Secrets  map[string]SecretRef // Secret fields that hold references
	Knobs    map[string]any
	Metadata map[string]any
}

// Partition splits cfg by the kind of each field; fields the schema does not
// know are dropped. Secret fields still holding a value are dropped too: only
// references take part in fingerprints. SecretMap fields are dropped
// entirely, keys and references alike: a rotated env token is not a change
// of target or account, so every fingerprint built from the parts (the lease
// reuse fingerprint, the qualification fingerprint) keeps its value.
func (s *Schema) Partition(cfg Config) Parts {
	p := Parts{Identity: map[string]any{}, Secrets: map[string]SecretRef{}, Knobs: map[string]any{}, Metadata: map[string]any{}}
	for _, f := range s.Fields {
		v, ok := cfg[f.Name]
		if !ok {
			continue
		}
		switch f.Kind {
		case KindIdentity:
			p.Identity[f.Name] = v
		case KindKnob:
			p.Knobs[f.Name] = v
		case KindMetadata:
			p.Metadata[f.Name] = v
		case KindSecret:
			if ref, isRef := asSecretRef(v); isRef {
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
func (s *Schema) ResolveSecrets(ctx context.Context, cfg Config, lookup func(context.Context, SecretRef) (string, error)) (Config, error) {
	out := cfg.Clone()
	for _, f := range s.Fields {
		switch f.Kind {
		case KindSecret:
			ref, ok := asSecretRef(out[f.Name])
			if !ok {
				continue
			}
			v, err := lookup(ctx, ref)
			if err != nil {
				return nil, fmt.Errorf("%s config: field %q: resolving %s: %w", s.Driver, f.Name, ref, err)
			}
			out[f.Name] = v
		case KindSecretMap:
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
				ref, isRef := asSecretRef(m[k])
				if !isRef {
					return nil, fmt.Errorf("%s config: field %q: key %q: want a string or a secret reference: %w", s.Driver, f.Name, k, ErrInvalid)
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
func (s *Schema) SecretValues(cfg Config) []string {
	var out []string
	for _, f := range s.Fields {
		switch f.Kind {
		case KindSecret:
			if v, ok := cfg[f.Name].(string); ok && v != "" {
				out = append(out, v)
			}
		case KindSecretMap:
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

// SecretMapRefs returns the references held by the values of map field
// name, by key (nil when it holds none). It reads a normalized config and
// its JSON form alike and needs no schema.
func (c Config) SecretMapRefs(name string) map[string]SecretRef {
	var out map[string]SecretRef
	add := func(k string, v any) {
		if ref, ok := asSecretRef(v); ok {
			if out == nil {
				out = map[string]SecretRef{}
			}
			out[k] = ref
		}
	}
	switch m := c[name].(type) {
	case map[string]any:
		for k, v := range m {
			add(k, v)
		}
	case map[string]SecretRef:
		for k, v := range m {
			add(k, v)
		}
	}
	return out
}

// PlainSecretKeys returns the sorted keys of map field name whose values
// are plain strings rather than SecretRefs: in a SecretMap field of a
// stored config, the values still to be moved into the secret store; in a
// resolved config, every key.
func (c Config) PlainSecretKeys(name string) []string {
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

// SecretRefs returns every SecretRef cfg holds, in fields and in the values
// of map fields, sorted by ID then version. It needs no schema, so that the
// secrets of a config whose driver is gone can still be found.
func (c Config) SecretRefs() []SecretRef {
	var out []SecretRef
	for k, v := range c {
		if ref, ok := asSecretRef(v); ok {
			out = append(out, ref)
			continue
		}
		for _, ref := range c.SecretMapRefs(k) {
			out = append(out, ref)
		}
	}
	slices.SortFunc(out, func(a, b SecretRef) int {
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

// redactMap copies a SecretMap value with every value that is not a
// reference replaced by Redacted.
func redactMap(v any) any {
	switch m := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(m))
		for k, e := range m {
			if ref, ok := asSecretRef(e); ok {
				out[k] = ref
			} else {
				out[k] = Redacted
			}
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(m))
		for k := range m {
			out[k] = Redacted
		}
		return out
	}
	return Redacted
}

// toSecretMap normalizes a SecretMap value: an object whose values are each
// a string or a secret reference. Errors name the key, never a value.
func toSecretMap(v any) (map[string]any, error) {
	switch m := v.(type) {
	case map[string]string:
		out := make(map[string]any, len(m))
		for k, e := range m {
			out[k] = e
		}
		return out, nil
	case map[string]SecretRef:
		out := make(map[string]any, len(m))
		for k, e := range m {
			if e.ID == "" {
				return nil, fmt.Errorf("key %q: empty secret reference", k)
			}
			out[k] = e
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(m))
		for k, e := range m {
			if ref, ok := asSecretRef(e); ok {
				out[k] = ref
				continue
			}
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("key %q: want a string or a secret reference, got %s", k, jsonType(e))
			}
			out[k] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want map of strings or secret references, got %s", jsonType(v))
}

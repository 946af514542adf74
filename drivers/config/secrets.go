package config

import "fmt"

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

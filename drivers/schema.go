package drivers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/berthdev/berth/images"
)

// FieldKind classifies a config field. The classification drives secret
// moving, redaction and fingerprints (QUAL-3) and drift (IMG-6); no other
// package hand-lists a driver's fields.
type FieldKind int

const (
	// KindIdentity fields say which target, image or template is used: changing
	// one changes the config fingerprint (host, port, user, image, ...).
	KindIdentity FieldKind = iota
	// KindKnob fields tune behaviour without changing the target (timeouts,
	// resources); they are left out of fingerprints.
	KindKnob
	// KindSecret fields hold credentials. They are never stored inline: the
	// catalog moves a pasted value into the secret store and keeps a
	// SecretRef; the ref and its version are part of the fingerprint.
	KindSecret
	// KindMetadata fields are descriptive only; left out of fingerprints.
	KindMetadata
)

// String returns "identity", "knob", "secret" or "metadata".
func (k FieldKind) String() string {
	switch k {
	case KindIdentity:
		return "identity"
	case KindKnob:
		return "knob"
	case KindSecret:
		return "secret"
	case KindMetadata:
		return "metadata"
	}
	return fmt.Sprintf("fieldkind(%d)", int(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k FieldKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// FieldType is the value type of a config field. Normalized configs hold
// these Go types: TypeString string, TypeInt int64, TypeBool bool,
// TypeDuration string (in time.Duration.String form, so that configs stay
// JSON), TypeStringList []string, TypeStringMap map[string]string.
// KindSecret fields are TypeString typed and hold a string (a value about
// to be moved) or a SecretRef.
type FieldType int

// The field types, with the Go type a normalized config holds for each.
const (
	// TypeString fields hold a string.
	TypeString FieldType = iota
	// TypeInt fields hold an int64.
	TypeInt
	// TypeBool fields hold a bool.
	TypeBool
	// TypeDuration fields hold a string in time.Duration.String form.
	TypeDuration
	// TypeStringList fields hold a []string.
	TypeStringList
	// TypeStringMap fields hold a map[string]string.
	TypeStringMap
)

// String returns the type's name as used in error messages.
func (t FieldType) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeInt:
		return "integer"
	case TypeBool:
		return "boolean"
	case TypeDuration:
		return "duration"
	case TypeStringList:
		return "list of strings"
	case TypeStringMap:
		return "map of strings"
	}
	return fmt.Sprintf("fieldtype(%d)", int(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t FieldType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Field describes one config field.
type Field struct {
	Name     string    `json:"name"`
	Kind     FieldKind `json:"kind"`
	Type     FieldType `json:"type"`
	Required bool      `json:"required,omitempty"`
	// Default is applied when the field is absent; it must be in the
	// normalized form of Type. Secret fields have no default.
	Default any    `json:"default,omitempty"`
	Doc     string `json:"doc,omitempty"`
	// Enum, if not empty, lists the allowed values of a String field.
	Enum []string `json:"enum,omitempty"`
	// Check, if not nil, validates the normalized value. Its error text is
	// used as the reason; for Secret fields it must not contain the value.
	Check func(v any) error `json:"-"`
}

// ConfigSchema describes a driver's config. It is immutable once built.
type ConfigSchema struct {
	// Driver is the driver's name, used in error messages.
	Driver string
	Fields []Field
	// ImageField names the Identity field that holds the image reference or
	// snapshot id the sandboxes run, or "" for drivers without images.
	ImageField string
	// ImageReference, if not nil, reads the image a normalized config names
	// (for drivers whose ImageField is not an OCI reference, such as a
	// provider snapshot id). If nil, the ImageField's value is parsed with
	// images.ParseReference. See ConfigSchema.Image.
	ImageReference func(Config) (images.Reference, error)
	// Check, if not nil, validates the whole normalized config (cross-field
	// rules). Return *ConfigError values to name fields.
	Check func(Config) error
}

// Field returns the field named name.
func (s *ConfigSchema) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// Image returns the image cfg names as an images.Reference: the zero
// Reference when the schema has no ImageField or the config leaves it
// empty (a provider default, which is mutable and never qualifies, QUAL-5).
// It does no I/O.
func (s *ConfigSchema) Image(cfg Config) (images.Reference, error) {
	if s.ImageReference != nil {
		return s.ImageReference(cfg)
	}
	raw := cfg.String(s.ImageField)
	if s.ImageField == "" || raw == "" {
		return images.Reference{}, nil
	}
	return images.ParseReference(raw)
}

// SecretRef points at a secret in the host's secret store. Version changes
// whenever the secret's value does, so that fingerprints see account changes.
// In JSON it is {"$secret": ID, "version": N}.
type SecretRef struct {
	ID      string `json:"$secret"`
	Version int64  `json:"version"`
}

// String returns "secret:ID@vN"; it never contains the secret's value.
func (r SecretRef) String() string { return fmt.Sprintf("secret:%s@v%d", r.ID, r.Version) }

// asSecretRef reads a SecretRef from its normalized or JSON-decoded form.
func asSecretRef(v any) (SecretRef, bool) {
	switch r := v.(type) {
	case SecretRef:
		return r, r.ID != ""
	case *SecretRef:
		if r == nil {
			return SecretRef{}, false
		}
		return *r, r.ID != ""
	case map[string]any:
		if len(r) != 2 {
			return SecretRef{}, false
		}
		id, ok := r["$secret"].(string)
		if !ok || id == "" {
			return SecretRef{}, false
		}
		n, err := toInt64(r["version"])
		if err != nil {
			return SecretRef{}, false
		}
		return SecretRef{ID: id, Version: n}, true
	}
	return SecretRef{}, false
}

// Config is a driver config: field name to value. After
// ConfigSchema.Normalize it holds only the normalized types of FieldType (and
// SecretRef for moved secrets). It also reads correctly after a JSON round
// trip. The typed accessors return the zero value for an absent field.
type Config map[string]any

// Clone returns a deep copy of c.
func (c Config) Clone() Config {
	if c == nil {
		return nil
	}
	out := make(Config, len(c))
	for k, v := range c {
		switch t := v.(type) {
		case []string:
			out[k] = slices.Clone(t)
		case map[string]string:
			out[k] = maps.Clone(t)
		case []any:
			out[k] = slices.Clone(t)
		case map[string]any:
			out[k] = maps.Clone(t)
		default:
			out[k] = v
		}
	}
	return out
}

// String returns the string value of name ("" if absent or not a string).
func (c Config) String(name string) string {
	s, _ := c[name].(string)
	return s
}

// Int returns the integer value of name (0 if absent).
func (c Config) Int(name string) int64 {
	n, _ := toInt64(c[name])
	return n
}

// Bool returns the boolean value of name (false if absent).
func (c Config) Bool(name string) bool {
	b, _ := c[name].(bool)
	return b
}

// Duration returns the duration value of name (0 if absent or malformed).
func (c Config) Duration(name string) time.Duration {
	d, _ := toDuration(c[name])
	return d
}

// Strings returns the list value of name (nil if absent).
func (c Config) Strings(name string) []string {
	l, _ := toStringList(c[name])
	return l
}

// StringMap returns the map value of name (nil if absent).
func (c Config) StringMap(name string) map[string]string {
	m, _ := toStringMap(c[name])
	return m
}

// SecretRef returns the secret reference held by name, if it holds one.
func (c Config) SecretRef(name string) (SecretRef, bool) { return asSecretRef(c[name]) }

// Normalize validates raw against the schema and returns a new normalized
// Config with defaults applied. raw may come straight from json.Unmarshal
// into map[string]any. Every problem is reported as a *ConfigError naming the
// field (joined with errors.Join when there are several); unknown fields,
// wrong types and missing required fields are errors. A missing required
// Secret field also wraps ErrCredentialsMissing. raw is not modified, and
// error messages never contain a secret value.
func (s *ConfigSchema) Normalize(raw map[string]any) (Config, error) {
	var errs []error
	fail := func(field, reason string) {
		errs = append(errs, &ConfigError{Driver: s.Driver, Field: field, Reason: reason})
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if _, ok := s.Field(k); !ok {
			fail(k, "unknown field")
		}
	}
	out := make(Config, len(s.Fields))
	for _, f := range s.Fields {
		v, present := raw[f.Name]
		if present && v == nil {
			present = false
		}
		if !present {
			if f.Required {
				if f.Kind == KindSecret {
					errs = append(errs, &ConfigError{Driver: s.Driver, Field: f.Name, Reason: "required", missingSecret: true})
				} else {
					fail(f.Name, "required")
				}
				continue
			}
			if f.Default != nil {
				out[f.Name] = f.Default
			}
			continue
		}
		nv, err := normalizeValue(f, v)
		if err != nil {
			fail(f.Name, err.Error())
			continue
		}
		if f.Check != nil {
			if err := f.Check(nv); err != nil {
				fail(f.Name, err.Error())
				continue
			}
		}
		out[f.Name] = nv
	}
	if len(errs) == 0 && s.Check != nil {
		if err := s.Check(out); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func normalizeValue(f Field, v any) (any, error) {
	if f.Kind == KindSecret {
		if ref, ok := asSecretRef(v); ok {
			return ref, nil
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a string or a secret reference, got %s", jsonType(v))
		}
		if s == "" {
			return nil, errors.New("must not be empty")
		}
		return s, nil
	}
	switch f.Type {
	case TypeString:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want string, got %s", jsonType(v))
		}
		if len(f.Enum) > 0 && !slices.Contains(f.Enum, s) {
			return nil, fmt.Errorf("%q is not one of %q", s, f.Enum)
		}
		return s, nil
	case TypeInt:
		n, err := toInt64(v)
		if err != nil {
			return nil, err
		}
		return n, nil
	case TypeBool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want boolean, got %s", jsonType(v))
		}
		return b, nil
	case TypeDuration:
		d, err := toDuration(v)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("duration %s is negative", d)
		}
		return d.String(), nil
	case TypeStringList:
		return toStringList(v)
	case TypeStringMap:
		return toStringMap(v)
	}
	return nil, fmt.Errorf("unsupported field type %s", f.Type)
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64, float32, int, int64, int32, json.Number:
		return "number"
	case []any, []string:
		return "array"
	case map[string]any, map[string]string:
		return "object"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func toInt64(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, fmt.Errorf("want integer, got %v", n)
		}
		return int64(n), nil
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("want integer, got %s", n)
		}
		return i, nil
	}
	return 0, fmt.Errorf("want integer, got %s", jsonType(v))
}

func toDuration(v any) (time.Duration, error) {
	switch d := v.(type) {
	case time.Duration:
		return d, nil
	case string:
		p, err := time.ParseDuration(d)
		if err != nil {
			return 0, fmt.Errorf("want duration such as \"30s\", got %q", d)
		}
		return p, nil
	}
	return 0, fmt.Errorf("want duration string such as \"30s\", got %s", jsonType(v))
}

func toStringList(v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return slices.Clone(l), nil
	case []any:
		out := make([]string, len(l))
		for i, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d: want string, got %s", i, jsonType(e))
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want list of strings, got %s", jsonType(v))
}

func toStringMap(v any) (map[string]string, error) {
	switch m := v.(type) {
	case map[string]string:
		return maps.Clone(m), nil
	case map[string]any:
		out := make(map[string]string, len(m))
		for k, e := range m {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("key %q: want string, got %s", k, jsonType(e))
			}
			out[k] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want map of strings, got %s", jsonType(v))
}

// Redacted is what Redact puts in place of a secret value that has not been
// moved into the secret store.
const Redacted = "[redacted]"

// Redact returns a copy of cfg in which every Secret field that holds a value
// (rather than a SecretRef) is replaced by Redacted. References are kept: they
// name a secret without revealing it.
func (s *ConfigSchema) Redact(cfg Config) Config {
	out := cfg.Clone()
	for _, f := range s.Fields {
		if f.Kind != KindSecret {
			continue
		}
		if v, ok := out[f.Name]; ok {
			if _, isRef := asSecretRef(v); !isRef {
				out[f.Name] = Redacted
			}
		}
	}
	return out
}

// PlainSecrets returns the names of Secret fields of cfg that hold a value
// rather than a SecretRef, in schema order: the values to move into the
// secret store.
func (s *ConfigSchema) PlainSecrets(cfg Config) []string {
	var out []string
	for _, f := range s.Fields {
		if f.Kind != KindSecret {
			continue
		}
		if v, ok := cfg[f.Name]; ok {
			if _, isRef := asSecretRef(v); !isRef {
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
// references take part in fingerprints.
func (s *ConfigSchema) Partition(cfg Config) Parts {
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
// An error from lookup is wrapped with the field name (never a value).
func (s *ConfigSchema) ResolveSecrets(ctx context.Context, cfg Config, lookup func(context.Context, SecretRef) (string, error)) (Config, error) {
	out := cfg.Clone()
	for _, f := range s.Fields {
		if f.Kind != KindSecret {
			continue
		}
		ref, ok := asSecretRef(out[f.Name])
		if !ok {
			continue
		}
		v, err := lookup(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("%s config: field %q: resolving %s: %w", s.Driver, f.Name, ref, err)
		}
		out[f.Name] = v
	}
	return out, nil
}

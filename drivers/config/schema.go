package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berthdev/berth/images"
)

// Kind classifies a config field. The classification drives secret
// moving, redaction and fingerprints (QUAL-3) and drift (IMG-6); no other
// package hand-lists a driver's fields.
type Kind int

const (
	// KindIdentity fields say which target, image or template is used: changing
	// one changes the config fingerprint (host, port, user, image, ...).
	KindIdentity Kind = iota
	// KindKnob fields tune behaviour without changing the target (timeouts,
	// resources); they are left out of fingerprints.
	KindKnob
	// KindSecret fields hold credentials. They are never stored inline: the
	// catalog moves a pasted value into the secret store and keeps a
	// SecretRef; the ref and its version are part of the fingerprint.
	KindSecret
	// KindMetadata fields are descriptive only; left out of fingerprints.
	KindMetadata
	// KindSecretMap fields are maps (TypeStringMap) whose values are secrets,
	// such as a sandbox's env vars. The catalog moves each pasted value
	// into the secret store on its own and keeps a SecretRef for its key;
	// keys stay visible. Secret-map references are left out of every
	// fingerprint (berth's partition drops them), so that rotating a value keeps
	// qualifications, reusable sandboxes and auth checks. Drivers hand the
	// values to commands at exec time only, never to a sandbox's create-time
	// environment. See secretmap.go.
	KindSecretMap
)

// String returns "identity", "knob", "secret", "metadata" or "secret_map".
func (k Kind) String() string {
	switch k {
	case KindIdentity:
		return "identity"
	case KindKnob:
		return "knob"
	case KindSecret:
		return "secret"
	case KindMetadata:
		return "metadata"
	case KindSecretMap:
		return "secret_map"
	}
	return fmt.Sprintf("fieldkind(%d)", int(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Type is the value type of a config field. Normalized configs hold
// these Go types: String string, Int int64, Bool bool, Duration string (in
// time.Duration.String form, so that configs stay JSON), StringList
// []string, StringMap map[string]string. Secret fields are String typed and
// hold a string (a value about to be moved) or a SecretRef. SecretMap fields
// are StringMap typed and hold a map[string]any whose values are each a
// string (pasted, or resolved) or a SecretRef.
type Type int

// The field types, with the Go type a normalized config holds for each.
const (
	// TypeString fields hold a string.
	TypeString Type = iota
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
func (t Type) String() string {
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
func (t Type) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Limits on config values, checked by Schema.Normalize for every
// field: a value beyond one is refused with a *Error naming the field
// (never quoting the value).
const (
	// maxStringLen is the longest string a config holds, in bytes
	// (64 KiB): a String or secret value, an element of a StringList, a
	// key or a value of a StringMap. It fits PEM keys and certificate
	// chains.
	maxStringLen = 64 << 10
	// maxEntries is the most elements a StringList and the most
	// entries a StringMap holds (1024).
	maxEntries = 1024
)

// Field describes one config field.
type Field struct {
	Name     string `json:"name"`
	Kind     Kind   `json:"kind"`
	Type     Type   `json:"type"`
	Required bool   `json:"required,omitempty"`
	// Default is applied when the field is absent; it must be in the
	// normalized form of Type. Secret fields have no default.
	Default any    `json:"default,omitempty"`
	Doc     string `json:"doc,omitempty"`
	// Enum, if not empty, lists the allowed values of a String field.
	Enum []string `json:"enum,omitempty"`
	// Advanced marks a field an operator seldom changes: a host's editor
	// shows it in an "Advanced" group after the basic fields. The zero
	// value (false) shows it among the basic fields; a required field is
	// shown there whatever Advanced says. It changes nothing in
	// validation or normalization.
	Advanced bool `json:"advanced,omitempty"`
	// Check, if not nil, validates the normalized value. Its error text is
	// used as the reason; for Secret and SecretMap fields it must not
	// contain a value. A SecretMap field's Check gets its map[string]any.
	Check func(v any) error `json:"-"`
}

// Schema describes a driver's config. It is immutable once built.
type Schema struct {
	// Driver is the driver's name, used in error messages.
	Driver string
	Fields []Field
	// ImageField names the Identity field that holds the image reference or
	// snapshot id the sandboxes run, or "" for drivers without images.
	ImageField string
	// ImageReference, if not nil, reads the image a normalized config names
	// (for drivers whose ImageField is not an OCI reference, such as a
	// provider snapshot id). If nil, the ImageField's value is parsed with
	// images.ParseReference. See Schema.Image.
	ImageReference func(Config) (images.Reference, error)
	// AccountField names the Secret field whose reference identifies the
	// provider account the sandboxes run under (Daytona's API key), or ""
	// for drivers without provider accounts. A managed account's project
	// auth check (AUTH-2) is bound to the driver and this reference.
	AccountField string
	// Check, if not nil, validates the whole normalized config (cross-field
	// rules). Return *Error values to name fields.
	Check func(Config) error
}

// Field returns the field named name.
func (s *Schema) Field(name string) (Field, bool) {
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
func (s *Schema) Image(cfg Config) (images.Reference, error) {
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
// Schema.Normalize it holds only the normalized types of Type (and
// SecretRef for moved secrets). It also reads correctly after a JSON round
// trip. The typed accessors return the zero value for an absent field.
type Config map[string]any

// Clone returns a deep copy of c.
func (c Config) Clone() Config {
	if c == nil {
		return nil
	}
	// A copy of the map as it is (no key hashed again), then a copy of
	// each value that is itself a slice or map: configs mostly hold
	// scalars.
	out := maps.Clone(c)
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
	switch v := c[name].(type) {
	case time.Duration:
		return v
	case string:
		d, _ := time.ParseDuration(v)
		return d
	}
	return 0
}

// Strings returns the list value of name (nil if absent).
func (c Config) Strings(name string) []string {
	l, _ := toStringList(c[name])
	return l
}

// StringMap returns the map value of name (nil if absent). For a SecretMap
// field it returns the values of a resolved config (the config Acquire
// takes, its secrets resolved), and nil while any value is still a
// SecretRef.
func (c Config) StringMap(name string) map[string]string {
	m, _ := toStringMap(c[name])
	return m
}

// SecretRef returns the secret reference held by name, if it holds one.
func (c Config) SecretRef(name string) (SecretRef, bool) { return asSecretRef(c[name]) }

// Normalize validates raw against the schema and returns a new normalized
// Config with defaults applied. raw may come straight from json.Unmarshal
// into map[string]any. Every problem is reported as a *Error naming the
// field (joined with errors.Join when there are several); unknown fields,
// wrong types and missing required fields are errors. A missing required
// Secret field also wraps ErrCredentialsMissing. raw is not modified, and
// error messages never contain a secret value.
func (s *Schema) Normalize(raw map[string]any) (Config, error) {
	var errs []error
	fail := func(field, reason string) {
		errs = append(errs, &Error{Driver: s.Driver, Field: field, Reason: reason})
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
					errs = append(errs, &Error{Driver: s.Driver, Field: f.Name, Reason: "required", missingSecret: true})
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
		if err == nil {
			err = checkStrings(nv)
		}
		if err != nil {
			fail(f.Name, err.Error())
			continue
		}
		if f.Name == labelsField && f.Type == TypeStringMap {
			if err := checkLabels(nv); err != nil {
				fail(f.Name, err.Error())
				continue
			}
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

// Sandbox labels: one rule for every driver.
const (
	// labelsField is the name of a driver's config field of extra labels
	// for its sandboxes. Normalize applies the label rule to every
	// StringMap field of that name, whatever the driver: no empty key, and
	// no key starting with reservedLabelPrefix.
	labelsField = "labels"
	// reservedLabelPrefix starts the label keys berth itself sets on
	// sandboxes (lease, instance, environment, template); a config's
	// labels may not use it, so that they can never forge or clash with
	// berth's own.
	reservedLabelPrefix = "berth."
)

// checkLabels is the rule for a config's labels (a map[string]string): no
// empty key, and no key starting with reservedLabelPrefix. The error names
// the offending key.
func checkLabels(v any) error {
	m, _ := v.(map[string]string)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "" {
			return errors.New("empty label key")
		}
		if strings.HasPrefix(k, reservedLabelPrefix) {
			return fmt.Errorf("label %q: the %s prefix is reserved for berth's own labels", k, reservedLabelPrefix)
		}
	}
	return nil
}

func normalizeValue(f Field, v any) (any, error) {
	if f.Kind == KindSecretMap {
		return toSecretMap(v)
	}
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
			if len(s) > 64 {
				return nil, fmt.Errorf("not one of %q", f.Enum)
			}
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

// checkStrings checks every string of a normalized value against
// maxStringLen and maxEntries, and refuses NUL bytes and invalid
// UTF-8 (which stores would cut or alter). Its errors name the list index or
// map key, never a value.
func checkStrings(v any) error {
	check := func(s string) error {
		switch {
		case len(s) > maxStringLen:
			return fmt.Errorf("longer than %d bytes", maxStringLen)
		case strings.IndexByte(s, 0) >= 0:
			return errors.New("contains a NUL byte")
		case !utf8.ValidString(s):
			return errors.New("not valid UTF-8")
		}
		return nil
	}
	switch t := v.(type) {
	case string:
		return check(t)
	case []string:
		if len(t) > maxEntries {
			return fmt.Errorf("more than %d elements", maxEntries)
		}
		for i, e := range t {
			if err := check(e); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	case map[string]string:
		if len(t) > maxEntries {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if err := check(k); err != nil {
				return fmt.Errorf("a key: %w", err)
			}
			if err := check(t[k]); err != nil {
				if len(k) > 64 {
					return fmt.Errorf("the value of a key: %w", err)
				}
				return fmt.Errorf("key %q: %w", k, err)
			}
		}
	case map[string]any:
		if len(t) > maxEntries {
			return fmt.Errorf("more than %d entries", maxEntries)
		}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if err := check(k); err != nil {
				return fmt.Errorf("a key: %w", err)
			}
			s, ok := t[k].(string)
			if !ok {
				continue // a SecretRef
			}
			if err := check(s); err != nil {
				if len(k) > 64 {
					return fmt.Errorf("the value of a key: %w", err)
				}
				return fmt.Errorf("key %q: %w", k, err)
			}
		}
	}
	return nil
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

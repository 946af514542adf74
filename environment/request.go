package environment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// CreateRequest is what an operator submits to create an environment.
// Config is the raw driver config: secret fields hold pasted values, which
// Catalog.Create moves into the SecretStore (CFG-3). A CreateRequest may hold
// secret values, so its String and LogValue show only name and driver.
// The zero CreateRequest is refused (errcode.ErrInvalid naming the field):
// Name and Driver are required; every other field may be left zero, and
// none costs anything then (no pool, so no sandbox is started ahead).
type CreateRequest struct {
	// Name is the environment's name. Required.
	Name string `json:"name"`
	// Description is free text for people. Default "".
	Description string `json:"description,omitempty"`
	// Driver names a registered driver. Required.
	Driver string `json:"driver"`
	// Config is the raw driver config; nil is the driver's defaults,
	// which the driver's schema may refuse (its required fields).
	Config map[string]any `json:"config,omitempty"`
	// Env is added to the environment of every command. Default none.
	Env map[string]string `json:"env,omitempty"`
	// Metadata is the host's own key/value notes. Default none.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Pool is the warm pool setting, nil for none (see Pool).
	Pool *Pool `json:"pool,omitempty"`
	// RequireIsolation is the least isolation the target must declare
	// (Environment.RequireIsolation); default none, no requirement.
	RequireIsolation drivers.Isolation `json:"requireIsolation,omitempty"`
}

// String returns `create environment "NAME" (driver D)`: no config, no env
// values.
func (r CreateRequest) String() string {
	return fmt.Sprintf("create environment %q (driver %q)", r.Name, r.Driver)
}

// LogValue implements slog.LogValuer: name, driver and config field names
// only, never values.
func (r CreateRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", r.Name), slog.String("driver", r.Driver),
		slog.Any("configFields", slices.Sorted(maps.Keys(r.Config))))
}

// UpdateRequest is an optimistic update of one environment (CFG-6).
// BaseRevision is the revision the change was based on and is required. Every
// other field is optional: nil means "keep". A non-nil Config replaces the
// whole config: secret fields hold either the secret reference the full view
// showed (kept unchanged) or a newly pasted value (stored as the secret's next
// version). A non-nil Env or Metadata (even empty) replaces the map. The
// driver cannot be changed; the status changes through Archive and Restore.
// Like CreateRequest, its String and LogValue hide values. The zero
// UpdateRequest is refused (errcode.ErrInvalid naming baseRevision): it
// changes nothing.
type UpdateRequest struct {
	BaseRevision int64             `json:"baseRevision"`
	Name         *string           `json:"name,omitempty"`
	Description  *string           `json:"description,omitempty"`
	Config       map[string]any    `json:"config,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	// Pool, if not nil, replaces the warm pool setting; a Size of 0
	// removes the pool. It is a knob (no identity, no qualification
	// effect).
	Pool *Pool `json:"pool,omitempty"`
	// RequireIsolation, if not nil, replaces the isolation the target
	// must declare (Environment.RequireIsolation); none removes it.
	RequireIsolation *drivers.Isolation `json:"requireIsolation,omitempty"`
}

// String returns "update environment at revision N": no values.
func (r UpdateRequest) String() string {
	return fmt.Sprintf("update environment at revision %d", r.BaseRevision)
}

// LogValue implements slog.LogValuer: the base revision and the config field
// names only, never values.
func (r UpdateRequest) LogValue() slog.Value {
	return slog.GroupValue(slog.Int64("baseRevision", r.BaseRevision),
		slog.Any("configFields", slices.Sorted(maps.Keys(r.Config))))
}

// DecodeCreateRequest decodes a JSON create payload strictly: exactly one
// JSON object, no unknown fields, no reserved server-owned fields (CFG-5),
// values of the right types. Numbers in config are kept exact
// (json.Number). Every error wraps errcode.ErrInvalid and names the field; no
// error quotes a value.
func DecodeCreateRequest(data []byte) (CreateRequest, error) {
	var r CreateRequest
	if err := decodeStrict(data, &r, createFields, nil); err != nil {
		return CreateRequest{}, err
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return CreateRequest{}, err
	}
	return r, nil
}

// DecodeUpdateRequest decodes a JSON update payload with the rules of
// DecodeCreateRequest; "baseRevision" is required and "driver" may not be
// given (the driver of an environment never changes).
func DecodeUpdateRequest(data []byte) (UpdateRequest, error) {
	var r UpdateRequest
	immutable := map[string]string{"driver": "the driver of a saved environment cannot be changed; create a new environment"}
	if err := decodeStrict(data, &r, updateFields, immutable); err != nil {
		return UpdateRequest{}, err
	}
	if r.BaseRevision <= 0 {
		return UpdateRequest{}, &Error{Field: "baseRevision", Reason: "required: the revision the update is based on (CFG-6)", Err: errcode.ErrInvalid}
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return UpdateRequest{}, err
	}
	return r, nil
}

var (
	createFields = []string{"name", "description", "driver", "config", "env", "metadata", "pool", "requireIsolation"}
	updateFields = []string{"baseRevision", "name", "description", "config", "env", "metadata", "pool", "requireIsolation"}
)

// decodeStrict decodes one JSON object into v. The top level is read first
// into raw members so that reserved and immutable fields are reported by name
// before the typed decode, and so that member names must match exactly
// (encoding/json alone would accept "NAME" for "name").
func decodeStrict(data []byte, v any, allowed []string, immutable map[string]string) error {
	var top map[string]json.RawMessage
	if err := decodeOne(data, &top); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		// encoding/json would replace invalid UTF-8 with U+FFFD: refuse
		// it instead, naming the top-level field that holds it.
		if !utf8.Valid(top[k]) {
			return &Error{Field: fieldKey(strings.ToValidUTF8(k, "?")), Reason: "not valid UTF-8", Err: errcode.ErrInvalid}
		}
	}
	if top == nil {
		return &Error{Reason: "malformed JSON: want an object, got null", Err: errcode.ErrInvalid}
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if isReservedField(k) {
			return &Error{Field: k, Reason: "reserved server-owned field; it cannot be set by a request (CFG-5)", Err: errcode.ErrInvalid}
		}
		for name, why := range immutable {
			if strings.EqualFold(k, name) {
				return &Error{Field: k, Reason: why, Err: errcode.ErrInvalid}
			}
		}
		if !slices.Contains(allowed, k) {
			return &Error{Field: k, Reason: fmt.Sprintf("unknown field (known: %s)", strings.Join(allowed, ", ")), Err: errcode.ErrInvalid}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	return nil
}

// decodeOne decodes exactly one JSON value from data into v.
func decodeOne(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return &Error{Reason: "malformed JSON: empty payload", Err: errcode.ErrInvalid}
		}
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Reason: "malformed JSON: unexpected data after the JSON object", Err: errcode.ErrInvalid}
	}
	return nil
}

// jsonError turns an encoding/json error into an *Error that names the
// field and never quotes the offending value.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &Error{Reason: fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error()), Err: errcode.ErrInvalid}
	case errors.As(err, &typ):
		// The top-level field only: Go 1.27 adds a map's key ("env.A"),
		// which Go 1.26 does not, and a key is the caller's data.
		field, _, _ := strings.Cut(typ.Field, ".")
		if field == "" {
			got, _, _ := strings.Cut(typ.Value, " ")
			return &Error{Reason: fmt.Sprintf("malformed JSON: want an object, got %s", got), Err: errcode.ErrInvalid}
		}
		got, _, _ := strings.Cut(typ.Value, " ") // "number 12" -> "number": never quote a value
		return &Error{Field: field, Reason: fmt.Sprintf("want %s, got %s", jsonTypeName(typ.Type.String()), got), Err: errcode.ErrInvalid}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Reason: "malformed JSON: unexpected end of input", Err: errcode.ErrInvalid}
	}
	const unknown = "json: unknown field "
	if msg := err.Error(); strings.HasPrefix(msg, unknown) {
		name := strings.Trim(strings.TrimPrefix(msg, unknown), `"`)
		return &Error{Field: name, Reason: "unknown field", Err: errcode.ErrInvalid}
	}
	return &Error{Reason: "malformed JSON: " + err.Error(), Err: errcode.ErrInvalid}
}

// jsonTypeName names a Go type of the request structs in JSON words.
func jsonTypeName(goType string) string {
	switch {
	case goType == "string", goType == "*string":
		return "string"
	case goType == "int64":
		return "integer"
	case strings.HasPrefix(goType, "map["):
		if strings.HasSuffix(goType, "string") {
			return "object of strings"
		}
		return "object"
	}
	return goType
}

package qualify

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"

	"github.com/berthdev/berth/images"
)

// SecretRef is a reference to a secret in the host's secret store with the
// version of its value (the config.SecretRef fields, redeclared so that
// this package imports no driver code). It never holds the secret's value.
type SecretRef struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
}

// FingerprintInput is what a config fingerprint covers (QUAL-3). The
// caller has already classified the config with the driver's schema: only
// identity fields go into Target and only secret references into Secrets.
// Knobs (timeouts, resources) and metadata (names, descriptions) are not
// inputs at all, so changing them never changes the fingerprint.
type FingerprintInput struct {
	// Driver is the driver name ("docker", "ssh", ...).
	Driver string
	// Target holds the identity fields of the config by field name (host,
	// port, user, region, ...). Values may be any JSON-like value: nil,
	// bool, numbers, strings, slices, maps with string keys, and types
	// with a text form. Numbers compare by value (5 and 5.0 are equal).
	// The image field may be left here or moved to Image; both count.
	Target map[string]any
	// Secrets holds the secret fields (the account) by field name; a new
	// version of a secret changes the fingerprint.
	Secrets map[string]SecretRef
	// Image is the configured image reference or identity, "" for a
	// provider default. A parseable reference is normalized first, so
	// "alpine@sha256:..." and "docker.io/library/alpine@sha256:..." are one.
	Image string
	// Template is the identity of the active captured template, "" for none.
	Template string
}

// fingerprintVersion is written into the canonical document; bump it only
// to invalidate every recorded fingerprint on purpose.
const fingerprintVersion = 1

// Fingerprint returns "sha256:<hex>" of the canonical JSON of in (sorted
// keys, numbers by value). It is deterministic: equal inputs always give
// equal fingerprints, across processes and map orders. It does no I/O and
// never fails; values without a JSON form are written by type and %v.
func Fingerprint(in FingerprintInput) string {
	image := in.Image
	if r, err := images.ParseReference(image); err == nil {
		image = r.String()
	}
	secrets := make(map[string]any, len(in.Secrets))
	for k, s := range in.Secrets {
		secrets[k] = map[string]any{"id": s.ID, "version": s.Version}
	}
	doc := map[string]any{
		"v":        fingerprintVersion,
		"driver":   in.Driver,
		"target":   in.Target,
		"secrets":  secrets,
		"image":    image,
		"template": in.Template,
	}
	var b bytes.Buffer
	writeCanonical(&b, reflect.ValueOf(doc), 0)
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SourceFingerprint returns the source fingerprint of in: Fingerprint
// without its template part (in.Template is ignored), over the driver, the
// identity fields, the image and the account (secret references with their
// versions), never knobs, metadata or names. A captured template records
// the source fingerprint it was captured from, and applies only while the
// environment's current one equals it (IMG-6). It does no I/O and never
// fails.
func SourceFingerprint(in FingerprintInput) string {
	in.Template = ""
	return Fingerprint(in)
}

const maxDepth = 64

var textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()

// writeCanonical writes v as canonical JSON: object keys sorted, no
// insignificant whitespace, integral numbers without a fraction. Values
// nested deeper than maxDepth (only cyclic ones in practice) are cut off.
func writeCanonical(b *bytes.Buffer, v reflect.Value, depth int) {
	if depth > maxDepth {
		writeString(b, "...")
		return
	}
	if !v.IsValid() {
		b.WriteString("null")
		return
	}
	if v.Type().Implements(textMarshalerType) && !(v.Kind() == reflect.Pointer && v.IsNil()) {
		if t, err := v.Interface().(encoding.TextMarshaler).MarshalText(); err == nil {
			writeString(b, string(t))
			return
		}
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			b.WriteString("null")
			return
		}
		writeCanonical(b, v.Elem(), depth+1)
	case reflect.Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		writeFloat(b, v.Float())
	case reflect.String:
		writeString(b, v.String())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, v.Index(i), depth+1)
		}
		b.WriteByte(']')
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		vals := make(map[string]reflect.Value, v.Len())
		for it := v.MapRange(); it.Next(); {
			k := fmt.Sprint(it.Key().Interface())
			keys = append(keys, k)
			vals[k] = it.Value()
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			writeCanonical(b, vals[k], depth+1)
		}
		b.WriteByte('}')
	case reflect.Struct:
		// Exported fields by name, like a map; unexported state is ignored.
		t := v.Type()
		m := map[string]any{}
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				m[f.Name] = v.Field(i).Interface()
			}
		}
		writeCanonical(b, reflect.ValueOf(m), depth+1)
	default:
		writeString(b, fmt.Sprintf("%T:%v", v.Interface(), v.Interface()))
	}
}

func writeFloat(b *bytes.Buffer, f float64) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		writeString(b, strconv.FormatFloat(f, 'g', -1, 64))
	case f == math.Trunc(f) && math.Abs(f) < 1e18:
		b.WriteString(strconv.FormatInt(int64(f), 10))
	default:
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	}
}

func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

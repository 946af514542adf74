package environment

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
)

// Limits and rules of request fields (the package doc lists them for
// hosts). The limits and rules are on the free-text fields of an
// environment. A create or update beyond one is refused with a *Error
// naming the field (wrapping errcode.ErrInvalid). Every text (names, descriptions,
// env values, metadata keys and values) must also be valid UTF-8 without
// NUL bytes: the stores would alter invalid UTF-8 and cut C strings at a
// NUL, so berth refuses both rather than store something else than it was
// given. Config fields have the limits of drivers/config: a string at
// most 64 KiB, a list or map at most 1024 entries.
const (
	// maxNameLen is the longest name, in bytes.
	maxNameLen = 128
	// maxDescriptionLen is the longest description, in bytes.
	maxDescriptionLen = 4096
	// maxEnvVars is the most env vars an environment sets.
	maxEnvVars = 256
	// maxEnvNameLen is the longest env var name, in bytes.
	maxEnvNameLen = 256
	// maxEnvValueLen is the longest env var value, in bytes (Linux refuses
	// a single environment string over 128 KiB at exec).
	maxEnvValueLen = 32 << 10
	// maxMetadataEntries is the most metadata entries an environment has.
	maxMetadataEntries = 64
	// maxMetadataKeyLen is the longest metadata key, in bytes. Empty keys
	// are refused.
	maxMetadataKeyLen = 128
	// maxMetadataValueLen is the longest metadata value, in bytes.
	maxMetadataValueLen = 4096
	// reservedMetadataPrefix is the prefix of metadata keys that belong to
	// the server (CFG-5). Metadata keys with this prefix are refused, and
	// so are keys that imitate server-owned qualification or platform
	// state ("qualified", "is_qualified", "platformMeasurement", ...).
	reservedMetadataPrefix = "berth."
)

// AnyRevision as a base revision makes Assignments.Set and Clear act on
// whatever binding is stored (last writer wins) instead of checking a
// revision.
const AnyRevision int64 = -1

// checkText returns why s is not acceptable text of at most max bytes, or
// "" when it is. The reason never quotes s (it may be a credential-bearing
// env value).
func checkText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	return ""
}

// fieldKey returns a map key for a field name in an error: quoted by the
// error itself, and cut when it is too long to be useful.
func fieldKey(k string) string {
	const max = 64
	if len(k) > max {
		return strings.ToValidUTF8(k[:max], "?") + "..."
	}
	return k
}

// ConfigError is a config problem of one environment (CFG-8). Its text
// names the environment (name and id when it is saved, the name when it is
// being created) and every failing field. It wraps Err, the driver schema's
// error (so errors.Is(err, config.ErrInvalid) holds and errors.As
// finds each *config.Error), and errcode.ErrInvalid. It never holds a secret
// value.
type ConfigError struct {
	ID   string // "" while creating
	Name string
	Err  error
}

// Error returns one `environment "NAME" (ID): DRIVER config: field "F": REASON`
// per failing field, joined by "; ".
func (e *ConfigError) Error() string {
	prefix := fmt.Sprintf("environment %q", e.Name)
	if e.ID != "" {
		prefix += " (" + e.ID + ")"
	}
	var parts []string
	for _, err := range flatten(e.Err) {
		parts = append(parts, prefix+": "+err.Error())
	}
	return strings.Join(parts, "; ")
}

// Fields returns the names of the failing config fields, in report order
// ("" entries are left out: errors about the whole config).
func (e *ConfigError) Fields() []string {
	var out []string
	for _, err := range flatten(e.Err) {
		var ce *config.Error
		if errors.As(err, &ce) && ce.Field != "" {
			out = append(out, ce.Field)
		}
	}
	return out
}

// Unwrap returns the schema error and errcode.ErrInvalid, behind an
// *errcode.Error that names the environment and its first failing field
// (config.NAME) for errcode.TargetOf, FieldOf and MessageOf.
func (e *ConfigError) Unwrap() []error {
	person := &errcode.Error{Target: errmsg.Name("environment", strconv.Quote(e.Name))}
	var first error
	for _, err := range flatten(e.Err) {
		var ce *config.Error
		if !errors.As(err, &ce) {
			continue
		}
		if errors.Is(err, config.ErrCredentialsMissing) {
			first = err
			break
		}
		if first == nil && ce.Field != "" {
			first = err
		}
	}
	if first != nil {
		if f := errcode.FieldOf(first); f != "" {
			person.Field = "config." + f
		}
		person.Reason = errcode.ReasonOf(first) // missing_credentials before invalid_config
		m := []rune(strings.TrimSuffix(errcode.MessageOf(first), "."))
		if len(m) > 0 {
			m[0] = unicode.ToLower(m[0])
		}
		person.Message = errmsg.Sentence(fmt.Sprintf("Environment %q: %s", e.Name, string(m)))
	}
	return []error{person, e.Err, errcode.ErrInvalid}
}

// flatten splits an errors.Join tree into its leaves; a *config.Error
// is a leaf.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*config.Error); ok {
		return []error{err}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// validateFields checks the non-config parts of a create or update. label
// names the environment in errors.
func validateFields(label, name, description string, env, metadata map[string]string) error {
	if err := checkName(name); err != nil {
		return &Error{Environment: label, Field: "name", Reason: err.Error(), Err: errcode.ErrInvalid}
	}
	if reason := checkText(description, maxDescriptionLen); reason != "" {
		return &Error{Environment: label, Field: "description", Reason: reason, Err: errcode.ErrInvalid}
	}
	if err := checkEnv(label, env); err != nil {
		return err
	}
	if err := checkMetadata(metadata); err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			fe.Environment = label
		}
		return err
	}
	return nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("required")
	case len(name) > maxNameLen:
		return fmt.Errorf("longer than %d bytes", maxNameLen)
	case !utf8.ValidString(name):
		return errors.New("not valid UTF-8")
	case strings.TrimSpace(name) != name:
		return errors.New("has leading or trailing spaces")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return errors.New("contains control characters")
	}
	return nil
}

// checkEnv validates env var names and values. Values are never quoted in
// errors. Names that look like credentials are refused: berth keeps
// credentials only in secret config fields (Secret fields and SecretMap
// fields such as the docker and daytona drivers' config.env), which are
// moved into the secret store (CFG-3); these env vars are stored inline and
// shown in the full view.
func checkEnv(label string, env map[string]string) error {
	if len(env) > maxEnvVars {
		return &Error{Environment: label, Field: "env", Err: errcode.ErrInvalid,
			Reason: fmt.Sprintf("more than %d variables", maxEnvVars)}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		field := "env." + fieldKey(k)
		if len(k) > maxEnvNameLen {
			return &Error{Environment: label, Field: field, Err: errcode.ErrInvalid,
				Reason: fmt.Sprintf("variable name longer than %d bytes", maxEnvNameLen)}
		}
		if !validEnvName(k) {
			return &Error{Environment: label, Field: field, Err: errcode.ErrInvalid,
				Reason: "invalid variable name (want letters, digits and underscores, not starting with a digit)"}
		}
		if reason := checkText(env[k], maxEnvValueLen); reason != "" {
			return &Error{Environment: label, Field: field, Reason: "value " + reason, Err: errcode.ErrInvalid}
		}
		if looksLikeSecretName(k) {
			return &Error{Environment: label, Field: field, Err: errcode.ErrInvalid,
				Reason: "looks like a credential; env vars are stored and shown inline, so put credentials in the driver's secret config fields, such as its secret env vars (the config field env)"}
		}
	}
	return nil
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// looksLikeSecretName reports whether an env var name looks like it holds a
// credential: a word (split on "_", "-", ".") ending in TOKEN(S), SECRET(S),
// PASSWORD, PASSWD, APIKEY, PRIVATEKEY or CREDENTIAL(S), or KEY(S) after API,
// PRIVATE, SECRET, ACCESS, SIGNING, ENCRYPTION, MASTER or AUTH. Case is
// ignored. Such env vars are refused by the catalog and redacted in views.
func looksLikeSecretName(name string) bool {
	words := strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool { return r == '_' || r == '-' || r == '.' })
	for i, w := range words {
		for _, s := range []string{"TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "APIKEY", "PRIVATEKEY", "CREDENTIAL", "CREDENTIALS"} {
			if strings.HasSuffix(w, s) {
				return true
			}
		}
		if (w == "KEY" || w == "KEYS") && i > 0 {
			switch words[i-1] {
			case "API", "PRIVATE", "SECRET", "ACCESS", "SIGNING", "ENCRYPTION", "MASTER", "AUTH":
				return true
			}
		}
	}
	return false
}

package environment

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
)

// Error is a refusal of this package that names what it is about, never
// a secret value or an env var value. It is one of four kinds: an
// unusable binding sets Binding, and the package marks a refused delete
// and an unusable environment apart from a request problem itself:
//
//   - A request problem about one field (CFG-5, CFG-8): Field (and
//     Environment once known) and Reason; it wraps Err (errcode.ErrInvalid,
//     errcode.ErrConflict, ...). Its text is `environment "NAME" (ID): field "F":
//     REASON`, leaving out the parts that are unknown.
//   - An environment that cannot be a working target now (CAP-3, CAP-4,
//     CFG-9; see the package doc, Availability): Environment and Reason,
//     Missing for capabilities it lacks; it wraps ErrArchived, drivers.ErrUnavailable,
//     drivers.ErrUnsupported, a *ConfigError, or
//     instance.ErrEnvironmentsDisabled or instance.ErrManagedSandboxOnly
//     (with drivers.ErrUnavailable). Its text is `environment "NAME" (ID)
//     cannot be used: REASON`.
//   - A binding that won a resolution and cannot be used (ASG-2, ASG-3):
//     Binding (kind, key and company) and Environment (`"name" (id)`, or
//     the id when the record is gone), Reason and Missing; it wraps
//     errcode.ErrNotFound, ErrArchived, drivers.ErrUnavailable,
//     drivers.ErrUnsupported, errcode.ErrDenied (a binding of another
//     company) or a *ConfigError. Resolve never falls through to a weaker
//     binding or to the host after it.
//   - A delete that the blast radius blocks (CFG-7): Catalog.Delete
//     returns the radius with it; it wraps errcode.ErrConflict.
type Error struct {
	// Environment names the environment: `"name"` or `"name" (id)`; ""
	// when the problem was found before the payload was read (malformed
	// JSON) or the radius names it.
	Environment string
	// Field is the request field at fault; "" when the problem is not
	// one field's.
	Field string
	// Reason says what is wrong, for a person.
	Reason string
	// Binding is the binding that won a resolution and cannot be used; nil
	// for the other kinds.
	Binding *Binding
	// Missing lists the required capabilities the environment lacks.
	Missing []drivers.Capability
	// Err is the cause (see above).
	Err error

	// radius is the blast radius that blocks a delete; nil for the other
	// kinds.
	radius *BlastRadius
	// unusable marks the second kind, the only one its fields do not tell
	// (a request problem may name no field either).
	unusable bool
}

// Error returns the text of e's kind (see Error).
func (e *Error) Error() string {
	switch {
	case e.radius != nil:
		return fmt.Sprintf("environment %q (%s): delete refused: %s", e.radius.EnvironmentName, e.radius.EnvironmentID, strings.Join(e.radius.Blockers, "; "))
	case e.Binding != nil:
		return fmt.Sprintf("environment: %s -> environment %s: %s; not falling back to a weaker binding or the host (ASG-2)",
			e.Binding, e.Environment, e.Reason)
	case e.unusable:
		return fmt.Sprintf("environment %s cannot be used: %s", e.Environment, e.Reason)
	}
	var b strings.Builder
	b.WriteString("environment")
	if e.Environment != "" {
		b.WriteString(" " + e.Environment)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	b.WriteString(": " + e.Reason)
	return b.String()
}

// Unwrap returns the cause (errcode.ErrConflict for a refused delete),
// behind an *errcode.Error that gives errcode.MessageOf, TargetOf and
// FieldOf their parts: the environment by name, the field, and a sentence
// for a person.
func (e *Error) Unwrap() error {
	cause := e.Err
	if e.radius != nil {
		cause = errcode.ErrConflict
	}
	return &errcode.Error{Target: e.target(), Field: e.Field, Message: e.message(), Err: cause}
}

// target names the environment for a person: its name before its id.
func (e *Error) target() string {
	if e.radius != nil {
		return errmsg.Name("environment", strconv.Quote(e.radius.EnvironmentName))
	}
	if e.Environment == "" {
		return ""
	}
	return errmsg.Name("environment", e.Environment)
}

// fieldWords names a field for a person: an env var or a metadata key
// by its name ("Env var DEPLOY_TOKEN", never the path env.DEPLOY_TOKEN,
// which reads like code), any other field by its path.
func fieldWords(f string) string {
	switch {
	case strings.HasPrefix(f, "env."):
		return "Env var " + strings.TrimPrefix(f, "env.")
	case strings.HasPrefix(f, "metadata."):
		return "Metadata key " + strings.TrimPrefix(f, "metadata.")
	}
	return "Field " + f
}

// message is the sentence of e's kind for a person.
func (e *Error) message() string {
	t := e.target()
	switch {
	case e.radius != nil:
		return errmsg.Sentence(fmt.Sprintf("Could not delete %s: %s", t, strings.Join(e.radius.Blockers, "; ")))
	case e.Binding != nil:
		return errmsg.Sentence(fmt.Sprintf("The %s binding %q leads to %s, which cannot be used: %s", e.Binding.Kind, e.Binding.Key, t, e.Reason))
	case e.unusable:
		return errmsg.Sentence(fmt.Sprintf("%s cannot be used now: %s", t, e.Reason))
	case e.Field != "" && t != "":
		return errmsg.Sentence(fmt.Sprintf("%s of %s: %s", fieldWords(e.Field), t, e.Reason))
	case e.Field != "":
		return errmsg.Sentence(fmt.Sprintf("%s: %s", fieldWords(e.Field), e.Reason))
	case t != "":
		return errmsg.Sentence(fmt.Sprintf("%s: %s", t, e.Reason))
	}
	return errmsg.Sentence(e.Reason)
}

package config

import (
	"errors"
	"fmt"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
)

// The sentinels of a config's validation; their reasons are
// invalid_config and missing_credentials.
var (
	// ErrInvalid: a config failed schema validation; see Error.
	// Its reason is "invalid_config".
	ErrInvalid error = &errcode.Error{Code: errcode.Invalid, Reason: "invalid_config", Err: errors.New("invalid config")}
	// ErrCredentialsMissing: the config lacks a credential the driver
	// needs (a required secret field is absent).
	// Its reason is "missing_credentials".
	ErrCredentialsMissing error = &errcode.Error{Code: errcode.Invalid, Reason: "missing_credentials", Err: errors.New("credentials missing")}
)

// Error reports one invalid config field. It wraps ErrInvalid.
// Reason never contains the field's value when the field is a secret.
type Error struct {
	Driver string // driver name
	Field  string // field name; "" for an error about the whole config
	Reason string

	missingSecret bool
}

// Error returns "DRIVER config: field "NAME": REASON" (without the field
// part for an error about the whole config). It never contains a secret.
func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s config: %s", e.Driver, e.Reason)
	}
	return fmt.Sprintf("%s config: field %q: %s", e.Driver, e.Field, e.Reason)
}

// Unwrap returns ErrInvalid, preceded by ErrCredentialsMissing when the
// error is a required Secret field that is absent (so its reason,
// missing_credentials, is the one errcode.ReasonOf finds).
//
// Before them comes an *errcode.Error that gives errcode.MessageOf and
// FieldOf a sentence for a person and the field.
func (e *Error) Unwrap() []error {
	person := &errcode.Error{Field: e.Field, Message: e.message()}
	if e.missingSecret {
		return []error{person, ErrCredentialsMissing, ErrInvalid}
	}
	return []error{person, ErrInvalid}
}

// message is the sentence for a person: the field, the driver and what is
// wrong, with the fix for a missing credential.
func (e *Error) message() string {
	switch {
	case e.missingSecret:
		return errmsg.Sentence(fmt.Sprintf("The %s config needs the credential %s: enter it and save again", e.Driver, e.Field))
	case e.Field == "":
		return errmsg.Sentence(fmt.Sprintf("The %s config is not valid: %s", e.Driver, e.Reason))
	}
	return errmsg.Sentence(fmt.Sprintf("Field %s of the %s config: %s", e.Field, e.Driver, e.Reason))
}

package errcode

import (
	"fmt"
	"strings"
)

// Error is an error for two readers: a program reads its Code and Reason,
// a person its Message, and both can have the technical chain (Error's
// text, the "detail"). Every field is optional; the zero Error is an error
// of code Unknown with the text "unknown".
//
// A package returns an *Error where it knows the cause and can say it to a
// person, wrapping the cause (a sentinel of this package, a driver's
// sentinel, a lower error) in Err:
//
//	return &errcode.Error{
//		Code:    errcode.AuthFailed,
//		Reason:  "host_key_unknown",
//		Target:  "root@10.0.0.5:22",
//		Message: "The host key of root@10.0.0.5:22 is not trusted yet: check its fingerprint SHA256:... and trust it.",
//		Err:     err,
//	}
//
// A sentinel with a reason (the driver contract's, for example) is an
// *Error too, declared once and compared by identity:
//
//	var ErrHostKeyUnknown error = &errcode.Error{Code: errcode.AuthFailed,
//		Reason: "host_key_unknown", Err: errors.New("host key unknown")}
//
// errors.Is(e, s) holds for the sentinel s of e's Code (ErrNotFound for
// NotFound, ...; context.Canceled for Canceled) and for everything Err's chain holds. Code, ReasonOf,
// MessageOf, FieldOf and TargetOf find an *Error's parts through any
// wrapping.
type Error struct {
	// Code is the coarse code; OK (the zero value) means the code of Err.
	Code ErrorCode
	// Reason is the finer cause, a stable snake_case string that a
	// program may switch on ("host_key_unknown", "missing_credentials",
	// "stale_fingerprint"); "" means the reason of Err. The reasons are
	// listed in docs/errors.md and never change their strings.
	Reason string
	// Op is what was being done ("acquire", "save environment"); "" when
	// it adds nothing.
	Op string
	// Target is what it was done to, as a person knows it: a name before
	// an id (`environment "build-box"`, "root@10.0.0.5:22").
	Target string
	// Field is the config or request field at fault ("host",
	// "config.password"); "" when no single field is.
	Field string
	// Message is one sentence for a person: what went wrong with the
	// target and, when there is one, the fix. It names no Go identifier,
	// no requirement ID and no secret. "" lets MessageOf look further down
	// the chain, then fall back to a generic sentence for the code.
	Message string
	// Err is the cause; its text is the rest of the technical chain.
	Err error
}

// Error returns the technical text, the chain a program logs and a person
// reads as the detail: "OP TARGET: field "F": CAUSE", each part left out
// when empty, CAUSE being Err's text (else Message, else Reason, else the
// code's name). It never repeats Message when Err is set.
func (e *Error) Error() string {
	var b strings.Builder
	for _, s := range []string{e.Op, e.Target} {
		if s != "" {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(s)
		}
	}
	if e.Field != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		fmt.Fprintf(&b, "field %q", e.Field)
	}
	cause := ""
	switch {
	case e.Err != nil:
		cause = e.Err.Error()
	case e.Message != "":
		cause = e.Message
	case e.Reason != "":
		cause = e.Reason
	default:
		cause = e.ErrorCode().String()
	}
	if b.Len() == 0 {
		return cause
	}
	b.WriteString(": ")
	b.WriteString(cause)
	return b.String()
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns Code, or when it is OK the code of Err (Unknown when
// Err is nil).
func (e *Error) ErrorCode() ErrorCode {
	if e.Code != OK {
		return e.Code
	}
	if e.Err == nil {
		return Unknown
	}
	return Code(e.Err)
}

// Is reports whether target is the sentinel of e's Code (ErrNotFound for
// NotFound, ...), so that an *Error matches its code's sentinel without
// wrapping it.
func (e *Error) Is(target error) bool {
	s := sentinelOf(e.Code)
	return s != nil && target == s
}

// walk calls f for err and every error in its chain, depth first in the
// order errors.As visits them, until f returns true.
func walk(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// find returns the first non-empty part that get reads from an *Error of
// err's chain.
func find(err error, get func(*Error) string) string {
	var out string
	walk(err, func(e error) bool {
		if x, ok := e.(*Error); ok && x != nil {
			out = get(x)
		}
		return out != ""
	})
	return out
}

// ReasonOf returns the first Reason set on an *Error in err's chain
// (outermost first), or "" when none says one (nil, a plain error, a
// sentinel without a reason).
func ReasonOf(err error) string {
	return find(err, func(e *Error) string { return e.Reason })
}

// FieldOf returns the first Field set on an *Error in err's chain, or "".
func FieldOf(err error) string {
	return find(err, func(e *Error) string { return e.Field })
}

// TargetOf returns the first Target set on an *Error in err's chain, or
// "".
func TargetOf(err error) string {
	return find(err, func(e *Error) string { return e.Target })
}

// MessageOf returns the sentence for a person: the first Message set on
// an *Error in err's chain; else a generic sentence for Code(err), naming
// TargetOf(err) when there is one. It never returns the chain's text (that
// is the detail, err.Error()), so nothing technical or secret reaches a
// person by accident. MessageOf(nil) is "".
func MessageOf(err error) string {
	if err == nil {
		return ""
	}
	if m := find(err, func(e *Error) string { return e.Message }); m != "" {
		return m
	}
	return generic(Code(err), TargetOf(err))
}

// generic is MessageOf's sentence for a code, about target ("" when it is
// not known). The target never starts a sentence: it may be a name, an
// address or a quoted string.
func generic(c ErrorCode, target string) string {
	about := func(with, without string) string {
		if target == "" {
			return without
		}
		return fmt.Sprintf(with, target)
	}
	switch c {
	case NotFound:
		return about("Could not find %s.", "Could not find the record.")
	case AlreadyExists:
		return about("Could not create %s: it exists already.", "Could not create the record: it exists already.")
	case Conflict:
		return about("Could not change %s: it was changed meanwhile or is in use; reload it and try again.",
			"Could not make the change: the record was changed meanwhile or is in use; reload it and try again.")
	case Denied:
		return about("You are not allowed to do this to %s.", "You are not allowed to do this.")
	case Invalid:
		return about("The request for %s is not valid: correct it and try again.", "The request is not valid: correct it and try again.")
	case Unsupported:
		return about("This is not supported by %s.", "This is not supported here.")
	case Unavailable:
		return about("Could not use %s right now: try again later.", "The service is not available right now: try again later.")
	case Unreachable:
		return about("Could not reach %s: check that it is running and reachable.", "Could not reach the target: check that it is running and reachable.")
	case Timeout:
		return about("The operation on %s took too long and was stopped: try again.", "The operation took too long and was stopped: try again.")
	case AuthFailed:
		return about("Authentication with %s failed: check the credentials.", "Authentication failed: check the credentials.")
	case Canceled:
		return "The operation was canceled."
	case Internal:
		return "Something went wrong inside berth: the detail says what; please report it."
	}
	return "The operation failed: the detail says why."
}

var _ interface {
	error
	ErrorCode() ErrorCode
} = (*Error)(nil)

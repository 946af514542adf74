package errcode

import (
	"context"
	"errors"
	"fmt"
)

// ErrorCode is the class of an error: what a caller may do about it, not
// which package said it. The names (String) are stable and part of berth's
// API; the numeric values are not: persist or send String (or
// MarshalText), and compare with the constants.
type ErrorCode int

// The codes. OK is the zero value and the code of a nil error.
const (
	// OK: no error (Code(nil)).
	OK ErrorCode = iota
	// Unknown: the error carries no code: it came from outside berth's
	// vocabulary (a host's hook, the standard library, a third party) and
	// no berth sentinel wraps it.
	Unknown
	// NotFound: the record or object does not exist, or the principal may
	// not read it (a record of another tenant is reported as missing).
	NotFound
	// AlreadyExists: a record with that id or key exists already.
	AlreadyExists
	// Conflict: the request conflicts with the current state: a stale
	// revision or version, a key held by another, a live claim of another
	// manager, a precondition that does not hold (an archived environment,
	// a delete that its blast radius blocks, a project auth check that does
	// not match).
	Conflict
	// Denied: the principal may see the record but may not take the action
	// on it (errcode.ErrDenied), or a credential's scope does not allow it.
	Denied
	// Invalid: the request, config or input is malformed; retrying it
	// unchanged fails the same way.
	Invalid
	// Unsupported: the driver, target or protocol peer does not offer what
	// was asked (a capability, a platform, a protocol version).
	Unsupported
	// Unavailable: a provider, service or record cannot be used now (its
	// control plane is down or refuses service, a transient failure, a
	// driver not registered, an inactive snapshot, a cleanup or stop that
	// is not proven yet and is retried); a later attempt may succeed.
	Unavailable
	// Unreachable: the target host or sandbox could not be reached over
	// the network.
	Unreachable
	// Timeout: an operation ran past its deadline (the caller's context,
	// a stage deadline, a provider's own limit, a startup budget).
	Timeout
	// AuthFailed: authentication failed in either direction: the target
	// refused the credentials, or the target's identity could not be
	// verified (a host key that is unknown or does not match, a TLS
	// certificate that fails verification), or a ticket or token is not
	// valid.
	AuthFailed
	// Canceled: the caller canceled the operation (context.Canceled).
	Canceled
	// Internal: an invariant of berth did not hold or stored data is
	// inconsistent: a bug or a damaged store, not a condition of the
	// target.
	Internal
)

var names = [...]string{
	OK:            "ok",
	Unknown:       "unknown",
	NotFound:      "not_found",
	AlreadyExists: "already_exists",
	Conflict:      "conflict",
	Denied:        "denied",
	Invalid:       "invalid",
	Unsupported:   "unsupported",
	Unavailable:   "unavailable",
	Unreachable:   "unreachable",
	Timeout:       "timeout",
	AuthFailed:    "auth_failed",
	Canceled:      "canceled",
	Internal:      "internal",
}

// String returns the code's stable snake_case name ("not_found",
// "already_exists", ...), or "ErrorCode(N)" for a value that is none of the
// constants.
func (c ErrorCode) String() string {
	if c >= 0 && int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("ErrorCode(%d)", int(c))
}

// MarshalText returns String's name; it fails for a value that is none of
// the constants.
func (c ErrorCode) MarshalText() ([]byte, error) {
	if c < 0 || int(c) >= len(names) {
		return nil, fmt.Errorf("errcode: %d is no error code", int(c))
	}
	return []byte(names[c]), nil
}

// UnmarshalText sets c to the code named text (a String name); an unknown
// name is an error and leaves c unchanged.
func (c *ErrorCode) UnmarshalText(text []byte) error {
	for i, n := range names {
		if n == string(text) {
			*c = ErrorCode(i)
			return nil
		}
	}
	return fmt.Errorf("errcode: %q is no error code", text)
}

// coder is what Code looks for in an error's chain.
type coder interface{ ErrorCode() ErrorCode }

// Code returns the code of err: OK for nil; else the code of the first
// error in err's chain (as errors.As walks it) that has an
// ErrorCode() ErrorCode method (an *Error, a sentinel of this package or
// of New, a package's own error type) and says a code other than Unknown
// (an *Error that only adds a message says none); else Canceled if err wraps
// context.Canceled and Timeout if it wraps context.DeadlineExceeded; else
// Unknown. A code that an error of berth states wins over a context error
// wrapped beside it.
func Code(err error) ErrorCode {
	if err == nil {
		return OK
	}
	code := Unknown
	walk(err, func(e error) bool {
		if c, ok := e.(coder); ok {
			if x := c.ErrorCode(); x != Unknown && x != OK {
				code = x
				return true
			}
		}
		return false
	})
	if code != Unknown {
		return code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Unknown
}

// The sentinels every berth package and store wraps (or an *Error or a
// sentinel of New with the same code, which errors.Is matches to them), so
// errors.Is(err, errcode.ErrNotFound) holds for every not-found of every
// package: the codes a store or a service returns about its records. The
// other codes have no sentinel (errcode.Code(err) says them); Canceled's
// is context.Canceled.
var (
	// ErrNotFound: the record or object does not exist, or the principal
	// may not read it.
	ErrNotFound = &sentinel{code: NotFound, text: "not found"}
	// ErrAlreadyExists: a record with that id or key exists already.
	ErrAlreadyExists = &sentinel{code: AlreadyExists, text: "already exists"}
	// ErrConflict: the request conflicts with the current state (a stale
	// revision, a key held by another, a precondition that does not hold).
	ErrConflict = &sentinel{code: Conflict, text: "conflict"}
	// ErrDenied: the principal may not take the action.
	ErrDenied = &sentinel{code: Denied, text: "permission denied"}
	// ErrInvalid: the request, config or input is malformed.
	ErrInvalid = &sentinel{code: Invalid, text: "invalid"}
)

// sentinelOf returns the sentinel of code c: context.Canceled for
// Canceled, nil for a code without one.
func sentinelOf(c ErrorCode) error {
	switch c {
	case NotFound:
		return ErrNotFound
	case AlreadyExists:
		return ErrAlreadyExists
	case Conflict:
		return ErrConflict
	case Denied:
		return ErrDenied
	case Invalid:
		return ErrInvalid
	case Canceled:
		return context.Canceled
	}
	return nil
}

// New returns a sentinel error with text as its message and code as its
// ErrorCode. Each call returns a distinct value, compared by identity as
// errors.New's are, so errors.Is finds exactly that sentinel, and also the
// code's sentinel when it has one (errors.Is(New(NotFound, "x"),
// ErrNotFound) holds).
// A sentinel that needs a reason is an *Error (see Error).
func New(code ErrorCode, text string) error {
	return &sentinel{code: code, text: text}
}

// sentinel is New's error and the type of the code sentinels.
type sentinel struct {
	code ErrorCode
	text string
}

func (e *sentinel) Error() string        { return e.text }
func (e *sentinel) ErrorCode() ErrorCode { return e.code }

// Is reports whether target is the sentinel of e's code.
func (e *sentinel) Is(target error) bool {
	s := sentinelOf(e.code)
	return s != nil && target == s
}

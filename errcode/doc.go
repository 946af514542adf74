// Package errcode is berth's one error vocabulary: every error of every
// berth package carries an ErrorCode, and Code finds it through any
// wrapping, so a host maps berth's errors to its own statuses
// in one switch:
//
//	switch errcode.Code(err) {
//	case errcode.OK:
//		w.WriteHeader(http.StatusOK)
//	case errcode.NotFound:
//		http.Error(w, err.Error(), http.StatusNotFound)
//	case errcode.Denied:
//		http.Error(w, err.Error(), http.StatusForbidden)
//	case errcode.Invalid:
//		http.Error(w, err.Error(), http.StatusBadRequest)
//	case errcode.Conflict, errcode.AlreadyExists:
//		http.Error(w, err.Error(), http.StatusConflict)
//	default:
//		http.Error(w, err.Error(), http.StatusInternalServerError)
//	}
//
// # The record sentinels
//
// ErrNotFound, ErrAlreadyExists, ErrConflict, ErrDenied and ErrInvalid,
// the codes a service or store says about a record or a request, are what
// every package and store wraps (the other codes have no sentinel:
// errcode.Code says them):
//
//	return fmt.Errorf("lease %s: %w", id, errcode.ErrNotFound)
//
//	errors.Is(err, errcode.ErrNotFound)       // every package's not-found
//	errcode.Code(err) == errcode.NotFound     // the same question, as a code
//
// The few sentinels a package keeps (the driver contract's, such as
// drivers.ErrHostKeyUnknown) are *Error values with a Reason, or New's
// sentinels; errors.Is matches either to its code's sentinel too, when
// the code has one.
//
// # Two readers
//
// An *Error carries a Reason for programs (a stable string finer than the
// code), a Message for a person (one sentence naming the target and the
// fix), the Target and the Field, and the cause as Err; its text is the
// technical chain, the detail. ReasonOf, MessageOf, FieldOf and TargetOf
// find them through any wrapping; MessageOf falls back to a generic
// sentence per code, never to the chain.
//
// # Reasons
//
// A reason is a stable string finer than the code, and the strings are
// the API (there are no Go constants for them): the probe's stable codes
// in probe results and provider health records, which are also the
// reasons of the driver contract's sentinels (host_key_mismatch under
// AuthFailed, provider_unavailable under Unavailable, missing_credentials
// under Invalid, ...); the runner protocol's codes on the wire, unchanged
// for deployed runners; the qualification's codes; and the hand-over's
// refusals (auth_check_missing, auth_check_version, ... under Conflict).
// They never change their strings (stored records, deployed runners and
// the API carry them). docs/errors.md lists them all with the code each
// is finer than.
//
// # Not found, not denied
//
// A record the principal may not read is NotFound, exactly as a missing
// one, so that an answer tells nothing of other tenants; Denied is for an
// action the principal may not take on a record it can see (ErrDenied).
//
// The package is on floor 0 and imports only the standard library.
package errcode

// Package errcode is berth's one error-code vocabulary: every sentinel
// error of every berth package carries an ErrorCode, and Code finds it
// through any wrapping, so a host maps berth's errors to its own statuses
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
// A package declares its sentinels with New, so that they keep their
// identity for errors.Is and their text, and gain a code:
//
//	var ErrNotFound = errcode.New(errcode.NotFound, "lease: not found")
//
//	errors.Is(err, lease.ErrNotFound)         // still the way to ask for one sentinel
//	errcode.Code(err) == errcode.NotFound     // true for every package's not-found
//
// An error type decides its own code with an ErrorCode method, or inherits
// the code of the sentinel it wraps. Context errors map to Canceled and
// Timeout; nil is OK; an error that carries no code (the host's own, the
// standard library's) is Unknown.
//
// # Sub-codes
//
// Where a caller needs more than the set says, a package keeps a finer,
// stable code of its own, and that code's type has an ErrorCode method
// that maps it into this set:
//
//   - drivers.Code: the probe's stable codes (PRB-5) in probe results and
//     provider health records (host_key_mismatch is a sub-code of
//     AuthFailed, provider_unavailable of Unavailable, ...);
//   - prp.Code: the runner protocol's codes on the wire (the exchange's
//     refusals, a command's result code), unchanged for deployed runners;
//   - qualification.Code: why a qualification was or was not recorded;
//   - handover.Code: why a hand-over was refused (AUTH-2's
//     auth_check_missing, auth_check_version, ... are sub-codes of
//     Conflict).
//
// # Not found, not denied
//
// A record the principal may not read is NotFound, exactly as a missing
// one, so that an answer tells nothing of other tenants; Denied is for an
// action the principal may not take on a record it can see (authz.ErrDenied).
//
// The package is on floor 0 and imports only the standard library.
package errcode

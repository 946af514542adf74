package reason_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/reason"
)

// The probe's stable code of a driver error (Of, PRB-5) is finer than the
// error's errcode: for every driver sentinel and for the context errors,
// Code(Of(err)) is errcode.Code(err), wrapped or not; and a sentinel's
// reason (errcode.ReasonOf) is its probe code.
func TestOfIsFinerThanErrcode(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		drivers.ErrUnreachable, drivers.ErrTLSUnverified, drivers.ErrAuth, drivers.ErrHostKeyMismatch,
		drivers.ErrHostKeyUnknown, config.ErrCredentialsMissing, drivers.ErrImageNotFound,
		drivers.ErrImageInactive, errcode.ErrNotFound, drivers.ErrTransient, drivers.ErrUnsupported,
		drivers.ErrUnavailable, drivers.ErrTimeout, config.ErrInvalid,
		&config.Error{Driver: "ssh", Field: "host", Reason: "required"},
		context.Canceled, context.DeadlineExceeded, nil,
	} {
		for _, e := range []error{err, fmt.Errorf("ssh u@h:22: %w", err)} {
			if err == nil {
				e = nil
			}
			sub, code := reason.Of(e), errcode.Code(e)
			if reason.Code(sub) != code {
				t.Errorf("%v: Of = %s, whose code is %v; errcode.Code = %v", e, sub, reason.Code(sub), code)
			}
			if r := errcode.ReasonOf(e); r != "" && r != sub {
				t.Errorf("%v: errcode.ReasonOf = %q, Of = %q", e, r, sub)
			}
		}
	}
	// The probe's own codes.
	for sub, want := range map[string]errcode.ErrorCode{
		reason.CleanupFailed:         errcode.Unavailable,
		reason.PlatformUnknown:       errcode.Unsupported,
		reason.Archived:              errcode.Conflict,
		reason.Internal:              errcode.Unknown,
		reason.Cancelled:             errcode.Canceled,
		reason.ManagedSandboxOnly:    errcode.Unavailable,
		reason.EnvironmentsDisabled:  errcode.Unavailable,
		reason.IsolationMismatch:     errcode.Conflict,
		reason.IsolationBelowMinimum: errcode.Unavailable,
		"no_such_code":               errcode.Unknown,
	} {
		if got := reason.Code(sub); got != want {
			t.Errorf("Code(%s) = %v, want %v", sub, got, want)
		}
	}
}

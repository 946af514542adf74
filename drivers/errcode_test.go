package drivers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// The probe's stable code of a driver error (CodeOf, PRB-5) is a sub-code
// of the error's errcode: for every driver sentinel and for the context
// errors, CodeOf(err).ErrorCode() is errcode.Code(err), wrapped or not.
func TestCodeOfIsASubCodeOfErrcode(t *testing.T) {
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
			sub, code := drivers.CodeOf(e), errcode.Code(e)
			if sub.ErrorCode() != code {
				t.Errorf("%v: CodeOf = %s, whose ErrorCode is %v; errcode.Code = %v", e, sub, sub.ErrorCode(), code)
			}
		}
	}
	// The probe's own codes.
	for sub, want := range map[drivers.Code]errcode.ErrorCode{
		drivers.CodeCleanupFailed:   errcode.Unavailable,
		drivers.CodePlatformUnknown: errcode.Unsupported,
		drivers.CodeArchived:        errcode.Conflict,
		drivers.CodeInternal:        errcode.Unknown,
		drivers.CodeCancelled:       errcode.Canceled,
	} {
		if got := sub.ErrorCode(); got != want {
			t.Errorf("%s.ErrorCode() = %v, want %v", sub, got, want)
		}
	}
}

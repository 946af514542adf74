package main

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// Every code of the one error-code set maps to a status in statusOf, and
// the error shape names the field and the target.
func TestStatusOfEveryCode(t *testing.T) {
	t.Parallel()
	want := map[errcode.ErrorCode]int{
		errcode.Unknown: 500, errcode.NotFound: 404, errcode.AlreadyExists: 409, errcode.Conflict: 409,
		errcode.Denied: 403, errcode.Invalid: 400, errcode.Unsupported: 422, errcode.Unavailable: 503,
		errcode.Unreachable: 502, errcode.Timeout: 504, errcode.AuthFailed: 502, errcode.Canceled: 503,
		errcode.Internal: 500,
	}
	for c := errcode.Unknown; c <= errcode.Internal; c++ {
		w, ok := want[c]
		if !ok {
			t.Errorf("no expected status for code %s", c)
			continue
		}
		if got := statusOf(errcode.New(c, "x")); got != w {
			t.Errorf("statusOf(%s) = %d, want %d", c, got, w)
		}
	}
	for _, tc := range []struct {
		err    error
		status int
		code   string
		reason string
		field  string
		target string
	}{
		{errUnauthenticated, 401, "auth_failed", "", "", ""},
		{&fieldErr{err: errIfMatchMissing, field: "If-Match"}, 428, "invalid", "", "If-Match", ""},
		{&environment.Error{Environment: `"box" (env_1)`, Field: "baseRevision", Err: errcode.ErrConflict}, 412, "conflict", "", "baseRevision", `environment "box"`},
		{&environment.Error{Environment: `"box"`, Field: "name", Err: errcode.ErrConflict}, 409, "conflict", "", "name", `environment "box"`},
		{fmt.Errorf("lease l1: %w", errcode.ErrNotFound), 404, "not_found", "", "", ""},
		{authz.Denied(authz.Principal{ID: "a", Role: authz.RoleAgent}, authz.ActionUpdate, authz.Resource{Kind: "environment", ID: "env_1"}), 403, "denied", "", "", ""},
		{&environment.Error{Environment: `"box" (env_1)`, Err: drivers.ErrUnavailable}, 503, "unavailable", "provider_unavailable", "", `environment "box"`},
		{&http.MaxBytesError{Limit: 1}, 413, "invalid", "", "", ""},
		{errors.New("plain"), 500, "unknown", "", "", ""},
		{fmt.Errorf("settings: %w", &errcode.Error{Code: errcode.Conflict, Reason: "stale_revision", Err: errcode.ErrConflict}), 412, "conflict", "stale_revision", "", ""},
		{invalid("limit", "want 1..200, got %q", "0"), 400, "invalid", "", "limit", ""},
		{fmt.Errorf("acquire: %w", lease.ErrQuota), 429, "unavailable", "quota_exceeded", "", ""},
	} {
		e := errorBody(tc.err)
		if got := statusOf(tc.err); got != tc.status || e.Code != tc.code || e.Reason != tc.reason || e.Field != tc.field || e.Target != tc.target {
			t.Errorf("%v: status %d, %+v; want %d, code %s, reason %q, field %q, target %q", tc.err, got, e, tc.status, tc.code, tc.reason, tc.field, tc.target)
		}
		// Two readers: a sentence for a person, never the chain, and the
		// chain as the detail.
		if e.Message == "" || e.Message == tc.err.Error() || len(e.Message) > 200 || e.Detail != tc.err.Error() {
			t.Errorf("%v: message %q, detail %q", tc.err, e.Message, e.Detail)
		}
	}
}

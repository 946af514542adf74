package errcode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/errcode"
)

// Every code has its stable name; the names are part of the API, so this
// table is the one place that says them and a renamed code fails here.
func TestNamesAreStable(t *testing.T) {
	t.Parallel()
	want := map[errcode.ErrorCode]string{
		errcode.OK:            "ok",
		errcode.Unknown:       "unknown",
		errcode.NotFound:      "not_found",
		errcode.AlreadyExists: "already_exists",
		errcode.Conflict:      "conflict",
		errcode.Denied:        "denied",
		errcode.Invalid:       "invalid",
		errcode.Unsupported:   "unsupported",
		errcode.Unavailable:   "unavailable",
		errcode.Unreachable:   "unreachable",
		errcode.Timeout:       "timeout",
		errcode.AuthFailed:    "auth_failed",
		errcode.Canceled:      "canceled",
		errcode.Internal:      "internal",
	}
	seen := map[string]bool{}
	for c := errcode.OK; c <= errcode.Internal; c++ {
		name, ok := want[c]
		if !ok {
			t.Errorf("code %d has no entry in the table", int(c))
			continue
		}
		if got := c.String(); got != name {
			t.Errorf("%d.String() = %q, want %q", int(c), got, name)
		}
		if seen[name] {
			t.Errorf("name %q is used twice", name)
		}
		seen[name] = true
		b, err := c.MarshalText()
		if err != nil || string(b) != name {
			t.Errorf("%s.MarshalText() = %q, %v", name, b, err)
		}
		var back errcode.ErrorCode = -1
		if err := back.UnmarshalText([]byte(name)); err != nil || back != c {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", name, back, err, c)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("the table has %d codes, OK..Internal has %d", len(want), len(seen))
	}
	if got := errcode.ErrorCode(99).String(); got != "ErrorCode(99)" {
		t.Errorf("String of an unknown value = %q", got)
	}
	if _, err := errcode.ErrorCode(99).MarshalText(); err == nil {
		t.Error("MarshalText of an unknown value succeeded")
	}
	c := errcode.Denied
	if err := c.UnmarshalText([]byte("cancelled")); err == nil || c != errcode.Denied {
		t.Errorf("UnmarshalText of an unknown name: %v, code %v", err, c)
	}
}

// A code travels in JSON by its name.
func TestJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(struct {
		Code errcode.ErrorCode `json:"code"`
	}{errcode.AlreadyExists})
	if err != nil || string(b) != `{"code":"already_exists"}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var v struct {
		Code errcode.ErrorCode `json:"code"`
	}
	if err := json.Unmarshal([]byte(`{"code":"auth_failed"}`), &v); err != nil || v.Code != errcode.AuthFailed {
		t.Fatalf("Unmarshal = %v, %v", v.Code, err)
	}
}

// typed decides its own code and wraps a sentinel of another.
type typed struct{ err error }

func (e *typed) Error() string                { return "typed: " + e.err.Error() }
func (e *typed) Unwrap() error                { return e.err }
func (e *typed) ErrorCode() errcode.ErrorCode { return errcode.Conflict }

// Code finds the code through every kind of wrapping, and the first coded
// error of the chain decides.
func TestCode(t *testing.T) {
	t.Parallel()
	notFound := errcode.New(errcode.NotFound, "pkg: not found")
	invalid := errcode.New(errcode.Invalid, "pkg: invalid request")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		err  error
		want errcode.ErrorCode
	}{
		{"nil is OK", nil, errcode.OK},
		{"a sentinel", notFound, errcode.NotFound},
		{"wrapped by fmt.Errorf", fmt.Errorf("lease %s: %w", "l_1", notFound), errcode.NotFound},
		{"wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", invalid)), errcode.Invalid},
		{"in errors.Join", errors.Join(errors.New("plain"), invalid), errcode.Invalid},
		{"first of two sentinels", fmt.Errorf("%w: %w", invalid, notFound), errcode.Invalid},
		{"a type decides before the sentinel it wraps", fmt.Errorf("x: %w", &typed{notFound}), errcode.Conflict},
		{"context.Canceled", context.Canceled, errcode.Canceled},
		{"a canceled context's error, wrapped", fmt.Errorf("exec: %w", canceled.Err()), errcode.Canceled},
		{"context.DeadlineExceeded", fmt.Errorf("stage: %w", context.DeadlineExceeded), errcode.Timeout},
		{"a sentinel wins over a context error beside it", fmt.Errorf("%w: %w", context.DeadlineExceeded, notFound), errcode.NotFound},
		{"a plain error is Unknown", errors.New("disk full"), errcode.Unknown},
		{"a wrapped plain error is Unknown", fmt.Errorf("write: %w", errors.New("disk full")), errcode.Unknown},
	} {
		if got := errcode.Code(tc.err); got != tc.want {
			t.Errorf("%s: Code(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// New's sentinels are compared by identity, as errors.New's are: two
// sentinels with the same code and text are different errors.
func TestNewIsASentinel(t *testing.T) {
	t.Parallel()
	a := errcode.New(errcode.NotFound, "a: not found")
	b := errcode.New(errcode.NotFound, "a: not found")
	if a == b || errors.Is(a, b) || errors.Is(fmt.Errorf("w: %w", a), b) {
		t.Fatal("two sentinels of the same code and text are the same error")
	}
	if !errors.Is(fmt.Errorf("w: %w", a), a) {
		t.Fatal("errors.Is does not find a wrapped sentinel")
	}
	if a.Error() != "a: not found" {
		t.Fatalf("Error() = %q, want the text unchanged", a.Error())
	}
	m := map[error]bool{a: true}
	if !m[a] || m[b] {
		t.Fatal("a sentinel is not a usable map key by identity")
	}
}

// The record codes have one sentinel each, with that code, and errors.Is
// matches New's sentinels and *Error values of a code to it (and of no
// other code, also of the codes without a sentinel).
func TestOneSentinelPerCode(t *testing.T) {
	t.Parallel()
	sentinels := map[errcode.ErrorCode]error{
		errcode.NotFound:      errcode.ErrNotFound,
		errcode.AlreadyExists: errcode.ErrAlreadyExists,
		errcode.Conflict:      errcode.ErrConflict,
		errcode.Denied:        errcode.ErrDenied,
		errcode.Invalid:       errcode.ErrInvalid,
		errcode.Unsupported:   nil,
		errcode.Unavailable:   nil,
		errcode.Unreachable:   nil,
		errcode.Timeout:       nil,
		errcode.AuthFailed:    nil,
		errcode.Internal:      nil,
	}
	for c, s := range sentinels {
		if got := errcode.Code(s); s != nil && got != c {
			t.Errorf("Code(%v) = %v, want %v", s, got, c)
		}
		pkg := errcode.New(c, "pkg: "+c.String())
		typed := &errcode.Error{Code: c, Target: "x", Err: errors.New("cause")}
		for name, err := range map[string]error{"New": pkg, "*Error": typed, "wrapped *Error": fmt.Errorf("w: %w", typed)} {
			if s != nil && !errors.Is(err, s) {
				t.Errorf("%v: errors.Is(%s, its code's sentinel) = false", c, name)
			}
			for c2, s2 := range sentinels {
				if c2 != c && s2 != nil && errors.Is(err, s2) {
					t.Errorf("%v: errors.Is(%s, sentinel of %v) = true", c, name, c2)
				}
			}
		}
	}
	if !errors.Is(&errcode.Error{Code: errcode.Canceled}, context.Canceled) {
		t.Error("an *Error of code Canceled is not context.Canceled")
	}
}

// The parts of an *Error are found through any wrapping, the outermost
// first, and a plain error's message is a generic sentence, never the
// chain.
func TestParts(t *testing.T) {
	t.Parallel()
	hostKey := &errcode.Error{Code: errcode.AuthFailed, Reason: "host_key_unknown", Err: errors.New("host key unknown")}
	inner := &errcode.Error{
		Op:      "ssh",
		Target:  "root@10.0.0.5:22",
		Message: "The host key of root@10.0.0.5:22 is not trusted yet: check its fingerprint and trust it.",
		Err:     fmt.Errorf("server offered key SHA256:abc: %w", hostKey),
	}
	outer := fmt.Errorf("acquire lease lse_1: %w", &errcode.Error{Target: `environment "build-box"`, Field: "config.host", Err: inner})
	joined := errors.Join(errors.New("first"), outer)
	for name, err := range map[string]error{"wrapped": outer, "joined": joined} {
		if got := errcode.Code(err); got != errcode.AuthFailed {
			t.Errorf("%s: Code = %v", name, got)
		}
		if got := errcode.ReasonOf(err); got != "host_key_unknown" {
			t.Errorf("%s: ReasonOf = %q", name, got)
		}
		if got := errcode.MessageOf(err); got != inner.Message {
			t.Errorf("%s: MessageOf = %q", name, got)
		}
		if got := errcode.FieldOf(err); got != "config.host" {
			t.Errorf("%s: FieldOf = %q", name, got)
		}
		if got := errcode.TargetOf(err); got != `environment "build-box"` {
			t.Errorf("%s: TargetOf = %q", name, got)
		}
		if !errors.Is(err, hostKey) {
			t.Errorf("%s: errors.Is does not find the sentinels", name)
		}
	}
	wantText := `acquire lease lse_1: environment "build-box": field "config.host": ssh root@10.0.0.5:22: server offered key SHA256:abc: host key unknown`
	if got := outer.Error(); got != wantText {
		t.Errorf("Error() = %q\nwant      %q", got, wantText)
	}
	if strings.Contains(outer.Error(), inner.Message) {
		t.Error("the detail repeats the message")
	}

	for _, tc := range []struct {
		name string
		err  error
		code errcode.ErrorCode
		msg  string
	}{
		{"nil", nil, errcode.OK, ""},
		{"plain", errors.New("open /secret/path: permission denied"), errcode.Unknown, "The operation failed: the detail says why."},
		{"sentinel", fmt.Errorf("lease lse_9: %w", errcode.ErrNotFound), errcode.NotFound, "Could not find the record."},
		{"target, no message", &errcode.Error{Code: errcode.Unreachable, Target: "root@h:22", Err: errors.New("dial tcp: refused")}, errcode.Unreachable,
			"Could not reach root@h:22: check that it is running and reachable."},
		{"code from Err", &errcode.Error{Target: `template "go"`, Err: errcode.ErrConflict}, errcode.Conflict,
			`Could not change template "go": it was changed meanwhile or is in use; reload it and try again.`},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), errcode.Canceled, "The operation was canceled."},
	} {
		if got := errcode.Code(tc.err); got != tc.code {
			t.Errorf("%s: Code = %v, want %v", tc.name, got, tc.code)
		}
		got := errcode.MessageOf(tc.err)
		if got != tc.msg {
			t.Errorf("%s: MessageOf = %q, want %q", tc.name, got, tc.msg)
		}
		if tc.err != nil && strings.Contains(got, tc.err.Error()) {
			t.Errorf("%s: the message contains the chain", tc.name)
		}
		if errcode.ReasonOf(tc.err) != "" || errcode.FieldOf(tc.err) != "" {
			t.Errorf("%s: a reason or field without an *Error that says one", tc.name)
		}
	}
	// Every code has a generic sentence, none of them technical.
	for c := errcode.OK + 1; c <= errcode.Internal; c++ {
		m := errcode.MessageOf(&errcode.Error{Code: c})
		if m == "" || !strings.HasSuffix(m, ".") || len(m) > 200 {
			t.Errorf("%v: generic message %q", c, m)
		}
	}
}

// The zero Error and Errors without a cause still say something.
func TestErrorText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  *errcode.Error
		want string
	}{
		{&errcode.Error{}, "unknown"},
		{&errcode.Error{Code: errcode.Invalid, Field: "name"}, `field "name": invalid`},
		{&errcode.Error{Reason: "quota", Op: "acquire", Target: `environment "e"`}, `acquire environment "e": quota`},
		{&errcode.Error{Code: errcode.Denied, Message: "You may not."}, "You may not."},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

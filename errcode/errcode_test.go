package errcode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

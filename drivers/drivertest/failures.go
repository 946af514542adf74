package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/reason"
)

// Failure names one way a config can be broken. The suite asks a
// FailureHarness for a config broken that way and asserts that the driver
// answers with the sentinel of SPEC PRB-5's error table (errors.Is and
// its probe code, the reason errcode.ReasonOf reads), whether the answer
// comes from Normalize or from Acquire.
type Failure int

// The failures the suite checks, with the sentinel each must produce.
const (
	// FailUnreachable: nothing answers where the config points. The
	// harness says which layer (Broken.Layer): a dead provider control
	// plane (Docker engine, Daytona API) is drivers.ErrUnavailable, an
	// unreachable target host or sandbox drivers.ErrUnreachable.
	FailUnreachable Failure = iota + 1
	// FailBadCredentials: the target or the provider API refuses the
	// config's credentials: drivers.ErrAuth.
	FailBadCredentials
	// FailMissingCredentials: the config lacks a credential the driver
	// needs: config.ErrCredentialsMissing.
	FailMissingCredentials
	// FailUnknownImage: the configured image or snapshot does not exist:
	// drivers.ErrImageNotFound.
	FailUnknownImage
	// FailHostKeyMismatch: the host offers a key other than the one the
	// config trusts: drivers.ErrHostKeyMismatch.
	FailHostKeyMismatch
)

// failures returns every Failure, in the order the suite checks them.
func failures() []Failure {
	return []Failure{FailUnreachable, FailBadCredentials, FailMissingCredentials, FailUnknownImage, FailHostKeyMismatch}
}

// String returns the failure's name as used in subtest names ("unreachable",
// "bad credentials", ...).
func (f Failure) String() string {
	switch f {
	case FailUnreachable:
		return "unreachable"
	case FailBadCredentials:
		return "bad credentials"
	case FailMissingCredentials:
		return "missing credentials"
	case FailUnknownImage:
		return "unknown image"
	case FailHostKeyMismatch:
		return "host key mismatch"
	}
	return fmt.Sprintf("failure(%d)", int(f))
}

// Broken is a config broken in one way, as a FailureHarness returns it.
type Broken struct {
	// Driver is the driver to acquire with; nil means the harness's
	// Driver(). A harness sets it when the failure lives in the driver's
	// options rather than in the config (a fake built with an API key); it
	// must have the same Name as the driver under test.
	Driver drivers.Driver
	// Config is the raw config, before normalization; the suite normalizes
	// it with the driver's schema and acquires with the result.
	Config map[string]any
	// Layer, for FailUnreachable only, is the sentinel of the layer that
	// does not answer: drivers.ErrUnavailable (the provider's control
	// plane) or drivers.ErrUnreachable (the target host or sandbox). It is
	// ignored for the other failures.
	Layer error
}

// FailureHarness is an optional interface that may be implemented by a
// Harness whose driver can be given a broken config. If a Harness does not
// implement it, the suite skips its error-table subtests and says so.
type FailureHarness interface {
	// Broken returns a config that reaches the harness's target except
	// for f, and false when f does not apply to the driver (a driver
	// without images has no unknown image, one without host keys no host
	// key mismatch). Nothing is acquired until the suite acquires.
	Broken(f Failure) (Broken, bool)
}

// want returns the sentinel the error table gives f, or an error about the
// harness when its answer is unusable.
func (f Failure) want(b Broken) (error, error) {
	switch f {
	case FailUnreachable:
		if b.Layer != drivers.ErrUnavailable && b.Layer != drivers.ErrUnreachable {
			return nil, fmt.Errorf("harness: Broken(%s).Layer = %v, want drivers.ErrUnavailable or drivers.ErrUnreachable", f, b.Layer)
		}
		return b.Layer, nil
	case FailBadCredentials:
		return drivers.ErrAuth, nil
	case FailMissingCredentials:
		return config.ErrCredentialsMissing, nil
	case FailUnknownImage:
		return drivers.ErrImageNotFound, nil
	case FailHostKeyMismatch:
		return drivers.ErrHostKeyMismatch, nil
	}
	return nil, fmt.Errorf("harness: unknown failure %d", int(f))
}

// checkFailure runs the suite's check of f on h: it asks h for a config
// broken that way, normalizes it with the driver's schema and, when that
// succeeds, acquires with it (destroying a sandbox that is wrongly
// acquired). It reports applies false, and no error, when h is not a
// FailureHarness or says f does not apply. Otherwise it returns nil when
// the driver's error matches the error table's sentinel with errors.Is,
// maps to that sentinel's probe code (its reason), and contains no secret field's
// value; else an error that says what was wrong. It honours ctx.
func checkFailure(ctx context.Context, h Harness, f Failure) (applies bool, err error) {
	fh, ok := h.(FailureHarness)
	if !ok {
		return false, nil
	}
	b, ok := fh.Broken(f)
	if !ok {
		return false, nil
	}
	want, err := f.want(b)
	if err != nil {
		return true, err
	}
	d := b.Driver
	if d == nil {
		d = h.Driver()
	}
	if d.Name() != h.Driver().Name() {
		return true, fmt.Errorf("harness: Broken(%s).Driver is %q, not the driver under test %q", f, d.Name(), h.Driver().Name())
	}
	got := brokenErr(ctx, d, b.Config)
	if got == nil {
		return true, fmt.Errorf("%s: driver %q acquired a sandbox; want an error wrapping %v", f, d.Name(), want)
	}
	if !errors.Is(got, want) {
		return true, fmt.Errorf("%s: driver %q: err = %v; want it to wrap %v (errors.Is)", f, d.Name(), got, want)
	}
	if code, wantCode := reason.Of(got), reason.Of(want); code != wantCode {
		return true, fmt.Errorf("%s: driver %q: err = %v has code %s; want %s (it also wraps a sentinel of higher precedence)", f, d.Name(), got, code, wantCode)
	}
	if leaked := secretIn(d.Schema(), b.Config, got.Error()); leaked != "" {
		return true, fmt.Errorf("%s: driver %q: the error contains the value of secret field %q", f, d.Name(), leaked)
	}
	return true, nil
}

// brokenErr normalizes raw and acquires with it; it returns the first
// error. A sandbox that is acquired is destroyed.
func brokenErr(ctx context.Context, d drivers.Driver, raw map[string]any) error {
	cfg, err := d.Schema().Normalize(raw)
	if err != nil {
		return err
	}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "conformance-broken-" + uniqueSuffix()})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	_, _ = sb.Release(rctx, drivers.Destroy)
	return nil
}

// secretIn returns the name of a secret field of raw whose value (a
// string of 4 bytes or more) occurs in msg, or "".
func secretIn(s *config.Schema, raw map[string]any, msg string) string {
	for _, f := range s.Fields {
		if f.Kind != config.KindSecret {
			continue
		}
		if v, ok := raw[f.Name].(string); ok && len(v) >= 4 && strings.Contains(msg, v) {
			return f.Name
		}
	}
	return ""
}

// testFailure is the subtest body of one error-table row.
func testFailure(f Failure) func(t *testing.T, ctx context.Context, h Harness) {
	return func(t *testing.T, ctx context.Context, h Harness) {
		if _, ok := h.(FailureHarness); !ok {
			t.Skipf("the harness of driver %q does not implement FailureHarness: the error table is not checked", h.Driver().Name())
		}
		var applies bool
		var err error
		within(t, bound, "Acquire with a config broken by "+f.String(), func() {
			applies, err = checkFailure(ctx, h, f)
		})
		if !applies {
			t.Skipf("the harness says %s does not apply to driver %q", f, h.Driver().Name())
		}
		if err != nil {
			t.Error(err)
		}
	}
}

package drivertest_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
)

type minimal struct{ d *fake.Driver }

func (h minimal) Driver() drivers.Driver { return h.d }
func (h minimal) Config() drivers.Config { return drivers.Config{} }
func (h minimal) Close()                 {}

// The suite's gating: a fake that declares only exec passes the core
// contract and skips every optional subtest.
func TestSuiteGatesOnDeclaredCapabilities(t *testing.T) {
	all := drivers.NewSet(drivers.AllCapabilities()...)
	drivertest.RunConformanceTests(t, func(context.Context, *testing.T) (drivertest.Harness, error) {
		return minimal{fake.New(&fake.Options{Name: "fake-minimal", Undeclared: all.Without(drivers.NewSet(drivers.CapExec))})}, nil
	})
}

package drivertest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/fakectl"
)

// imageHarness is the fake's harness with drivertest.ImageHarness, so that
// the suite starts sandboxes from the templates it captures.
type imageHarness struct{ d drivers.Driver }

func (h imageHarness) Driver() drivers.Driver { return h.d }
func (h imageHarness) Config() config.Config {
	return config.Config{"image": fake.DefaultImage}
}
func (h imageHarness) Close() {}

// RunnerSpec is well-formed; the fake runs internal/runner in-process and never
// executes the binary.
func (h imageHarness) RunnerSpec(testing.TB) drivers.RunnerSpec {
	return drivers.RunnerSpec{Binary: "/nonexistent/berth-runner", SHA256: strings.Repeat("0", 64)}
}
func (h imageHarness) ConfigWithImage(id images.Identity) (config.Config, bool) {
	ref := id.String()
	if id.SnapshotID() != "" {
		ref = "snapshot:" + id.SnapshotID()
	}
	return config.Config{"image": ref}, true
}

// inUse is how refusesInUse answers a delete of a template that a live
// sandbox runs.
type inUse int

const (
	inUseHonest       inUse = iota // ErrInUse, unconfirmed, the template kept
	inUseConfirmed                 // wrong: ErrInUse with a confirmed receipt
	inUseRemoved                   // wrong: ErrInUse, yet the template is removed
	inUseForever                   // wrong: ErrInUse even when nothing uses it
	inUseUnclassified              // wrong: a plain error, no ErrInUse
)

// refusesInUse is the fake with a provider that refuses to delete a
// template while one of its sandboxes that is not destroyed runs it, as
// Docker and Daytona do; the wrong modes break that contract one way each.
type refusesInUse struct {
	*fake.Driver
	mode inUse
}

func (d refusesInUse) DeleteTemplate(ctx context.Context, cfg config.Config, id images.Identity) (drivers.Receipt, error) {
	used := d.mode == inUseForever
	for _, b := range fakectl.Of(d.Driver).Sandboxes() {
		if b.Image == id && b.State != drivers.StateDestroyed {
			used = true
		}
	}
	if !used {
		return d.Driver.DeleteTemplate(ctx, cfg, id)
	}
	refusal := fmt.Errorf("fake: delete template %s: a sandbox uses it; to be retried: %w", id, drivers.ErrInUse)
	switch d.mode {
	case inUseConfirmed:
		return drivers.Receipt{State: drivers.StateDestroyed, Confirmed: true, Evidence: "refused", EvidenceKind: drivers.EvidenceProvider}, refusal
	case inUseRemoved:
		if _, err := d.Driver.DeleteTemplate(ctx, cfg, id); err != nil {
			return drivers.Receipt{}, err
		}
	case inUseUnclassified:
		return drivers.Receipt{}, fmt.Errorf("fake: delete template %s: a sandbox uses it", id)
	}
	return drivers.Receipt{}, refusal
}

// IMG-8: a driver whose provider refuses to delete a template in use passes
// the suite, as one that deletes it anyway does (the fake that deletes what is in use,
// as Daytona; drivers/fake's TestConformance runs its refusing default, as
// Docker); both with sandboxes from the template.
func TestSuiteAcceptsAnInUseRefusal(t *testing.T) {
	for name, d := range map[string]drivers.Driver{
		"refuses": refusesInUse{Driver: deletesInUse(&fake.Options{Handlers: suiteScripts})},
		"deletes": deletesInUse(&fake.Options{Handlers: suiteScripts}),
	} {
		t.Run(name, func(t *testing.T) {
			drivertest.RunConformanceTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) {
				return imageHarness{d}, nil
			})
		})
	}
}

// wrongInUse is a wrong driver of wrongDrivers: the fake whose template
// delete breaks the in-use contract as mode says.
func wrongInUse(mode inUse) drivertest.Harness {
	return imageHarness{refusesInUse{Driver: deletesInUse(&fake.Options{Name: "fake-wrong", Handlers: suiteScripts}), mode: mode}}
}

// deletesInUse returns a fake that deletes a template sandboxes use (as
// Daytona).
func deletesInUse(o *fake.Options) *fake.Driver {
	d := fake.New(o)
	fakectl.Of(d).SetDeleteInUse(true)
	return d
}

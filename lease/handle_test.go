package lease_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// TestHandleIsPortable (issue 10 item 3): the handle hands out no raw
// sandbox or driver (only As, the documented escape hatch); its methods
// reach the sandbox's capabilities, and its Release goes through the
// manager, leaving a receipt on the record.
func TestHandleIsPortable(t *testing.T) {
	t.Parallel()
	ht := reflect.TypeFor[*lease.Handle]()
	raw := []reflect.Type{reflect.TypeFor[drivers.Sandbox](), reflect.TypeFor[drivers.Driver]()}
	for i := range ht.NumMethod() {
		m := ht.Method(i)
		for j := range m.Type.NumOut() {
			for _, r := range raw {
				if m.Type.Out(j) == r {
					t.Errorf("Handle.%s returns a raw %s; only As may reach it", m.Name, r)
				}
			}
		}
	}

	w := newWorld(t, worldOpts{fake: &fake.Options{Undeclared: drivers.NewSet(drivers.CapTerminal)}})
	h := w.acquire(lease.Ephemeral, "r")
	res, err := h.Exec(bg, lease.Command{Argv: []string{"echo", "hi"}})
	if err != nil || string(res.Stdout) != "hi\n" {
		t.Fatalf("Exec: %+v, %v", res, err)
	}
	var out bytes.Buffer
	proc, err := lease.Start(h, bg, drivers.Command{Argv: []string{"echo", "streamed"}}, &out, &out)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := proc.Wait(bg); err != nil || out.String() != "streamed\n" {
		t.Errorf("streamed process: %q, %v", out.String(), err)
	}
	if id, err := leasehook.ImageIdentity(h, bg); err != nil || id.IsZero() {
		t.Errorf("ImageIdentity: %v, %v", id, err)
	}
	if _, err := leasehook.OpenTerminal(h, bg, drivers.TerminalRequest{}); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("OpenTerminal on a driver without terminals: %v, want ErrUnsupported", err)
	}
	if h.SandboxID() != w.get(h.ID()).ProviderLeaseID || h.Lease().Provider != "fake" || leasehook.Kind(h) != drivers.KindSandbox {
		t.Errorf("identity: sandbox %s provider %s kind %s", h.SandboxID(), h.Lease().Provider, leasehook.Kind(h))
	}
	var inside string
	errStop := errors.New("stop here")
	if err := h.Raw(func(raw any) error {
		sb, ok := raw.(drivers.Sandbox)
		if !ok {
			return fmt.Errorf("Raw gave a %T, not the drivers.Sandbox", raw)
		}
		if _, ok := raw.(*bytes.Buffer); ok {
			return errors.New("Raw gave a value of another type")
		}
		inside = sb.ID()
		return errStop
	}); !errors.Is(err, errStop) || inside != h.SandboxID() {
		t.Errorf("Raw: %v, sandbox %q; want the callback's error and sandbox %q", err, inside, h.SandboxID())
	}
	if err := h.Raw(nil); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("Raw(nil): %v, want ErrUnsupported", err)
	}

	l, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Fatalf("Release: %+v, %v", l, err)
	}
	if got := w.get(h.ID()); got.Status != lease.StatusReleased || got.CleanupEvidence == "" {
		t.Errorf("record after the handle's release: %s, evidence %q", got.Status, got.CleanupEvidence)
	}
	if _, err := h.Exec(bg, lease.Command{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrReleased) {
		t.Errorf("Exec after release: %v, want ErrReleased", err)
	}
}

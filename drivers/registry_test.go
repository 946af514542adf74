package drivers_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berthdev/berth/drivers"
)

// closingDriver implements io.Closer and counts its closes.
type closingDriver struct {
	countingDriver
	closes atomic.Int64
	err    error
}

func (d *closingDriver) Close() error {
	d.closes.Add(1)
	return d.err
}

// Registry.Close closes each driver that implements io.Closer exactly once,
// leaves the others alone, and names the driver whose Close failed.
func TestRegistryCloseClosesEachCloserOnce(t *testing.T) {
	t.Parallel()
	var io atomic.Int64
	good := &closingDriver{countingDriver: countingDriver{name: "good", ioCalls: &io}}
	bad := &closingDriver{countingDriver: countingDriver{name: "bad", ioCalls: &io}, err: errors.New("engine gone")}
	plain := &countingDriver{name: "plain", ioCalls: &io}
	r := drivers.NewRegistry(good, bad, plain)
	err := r.Close()
	if err == nil || !strings.Contains(err.Error(), `"bad"`) || strings.Contains(err.Error(), `"good"`) {
		t.Errorf("Close = %v, want an error naming only driver \"bad\"", err)
	}
	if err2 := r.Close(); err2 != err {
		t.Errorf("second Close = %v, want the first result %v", err2, err)
	}
	if good.closes.Load() != 1 || bad.closes.Load() != 1 {
		t.Errorf("closes: good %d, bad %d; want 1 each", good.closes.Load(), bad.closes.Load())
	}
	if _, err := r.Lookup("plain"); err != nil {
		t.Errorf("Lookup after Close: %v", err)
	}
	if io.Load() != 0 {
		t.Errorf("Close did %d I/O calls on drivers", io.Load())
	}
}

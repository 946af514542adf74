package drivers_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
)

// The levels are ordered, and their text form round-trips; another name
// is refused as an invalid config, naming the levels.
func TestIsolationLevels(t *testing.T) {
	levels := []drivers.Isolation{drivers.IsolationNone, drivers.IsolationContainer, drivers.IsolationGVisor, drivers.IsolationMicroVM}
	names := []string{"none", "container", "gvisor", "microvm"}
	for i, l := range levels {
		if i > 0 && !(levels[i-1] < l) {
			t.Errorf("%s is not above %s", l, levels[i-1])
		}
		b, err := json.Marshal(l)
		if err != nil || string(b) != `"`+names[i]+`"` {
			t.Errorf("json of %d = %s, %v; want %q", l, b, err, names[i])
		}
		var back drivers.Isolation
		if err := json.Unmarshal(b, &back); err != nil || back != l {
			t.Errorf("unmarshal %s = %v, %v", b, back, err)
		}
	}
	var l drivers.Isolation
	if err := l.UnmarshalText([]byte("kata")); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "gvisor") {
		t.Errorf("UnmarshalText(kata) = %v, want an invalid-config error listing the levels", err)
	}
	if _, err := json.Marshal(drivers.Isolation(9)); err == nil {
		t.Errorf("an unknown level marshalled")
	}
}

// A driver declares its level through IsolationDeclarer, and the drivers
// listing shows it; the fake's is its option.
func TestIsolationInListing(t *testing.T) {
	reg := drivers.NewRegistry(fake.New(&fake.Options{Name: "fake-gvisor", Isolation: drivers.IsolationGVisor}), fake.New(nil))
	got := map[string]drivers.Isolation{}
	for _, info := range reg.List() {
		got[info.Name] = info.Isolation
		b, _ := json.Marshal(info)
		if !strings.Contains(string(b), `"isolation":"`+info.Isolation.String()+`"`) {
			t.Errorf("%s's listing %s does not show its isolation", info.Name, b)
		}
	}
	if got["fake-gvisor"] != drivers.IsolationGVisor || got["fake"] != drivers.IsolationNone {
		t.Errorf("listed isolation = %v, want fake-gvisor gvisor and fake none", got)
	}
}

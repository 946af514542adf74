package driverkit_test

import (
	"errors"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

func TestParseSignal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"TERM", "TERM"}, {"term", "TERM"}, {"SIGQUIT", "QUIT"}, {"sigusr1", "USR1"}, {"KILL", "KILL"},
	} {
		if got, err := driverkit.ParseSignal(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseSignal(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "SIG", "STOP", "BOGUS", "9", "TERM ", "SIGSIGTERM"} {
		if got, err := driverkit.ParseSignal(bad); !errors.Is(err, drivers.ErrUnsupported) {
			t.Errorf("ParseSignal(%q) = %q, %v; want an error wrapping ErrUnsupported", bad, got, err)
		}
	}
}

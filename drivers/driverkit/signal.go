package driverkit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/berthdev/berth/drivers"
)

// Signals returns the names of the signals that Process.Signal accepts on
// every driver, in signal-number order: HUP, INT, QUIT, KILL, USR1, USR2,
// TERM. Each ends a process that has no handler for it, so a driver
// without real signals (the fake) may end the process for every one. The
// result is a fresh slice.
func Signals() []string { return []string{"HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM"} }

// ParseSignal returns the canonical name of sig, one of Signals, accepting
// any case and an optional "SIG" prefix ("sigterm" and "SIGTERM" are
// "TERM"). Any other name is an error wrapping ErrUnsupported that quotes
// sig.
func ParseSignal(sig string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	if !slices.Contains(Signals(), name) {
		return "", fmt.Errorf("drivers: signal %q is not one of %s: %w", sig, strings.Join(Signals(), ", "), drivers.ErrUnsupported)
	}
	return name, nil
}

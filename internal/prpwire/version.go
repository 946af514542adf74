package prpwire

import (
	"fmt"

	"github.com/berthdev/berth/errcode"
)

// ErrVersionUnsupported is returned by Negotiate when the two version
// ranges do not overlap; the controller closes with CloseVersionUnsupported.
var ErrVersionUnsupported = errcode.New(errcode.Unsupported, "prp: no common protocol version")

// Negotiate returns the highest version in both [runnerMin, runnerMax] and
// [ctrlMin, ctrlMax], or ErrVersionUnsupported naming both ranges.
func Negotiate(runnerMin, runnerMax, ctrlMin, ctrlMax int) (int, error) {
	if runnerMin < 1 || runnerMax < runnerMin {
		return 0, fmt.Errorf("%w: runner range [%d,%d] is invalid", ErrVersionUnsupported, runnerMin, runnerMax)
	}
	v := min(runnerMax, ctrlMax)
	if v < max(runnerMin, ctrlMin) {
		return 0, fmt.Errorf("%w: runner speaks [%d,%d], controller [%d,%d]", ErrVersionUnsupported, runnerMin, runnerMax, ctrlMin, ctrlMax)
	}
	return v, nil
}

// GrantCapabilities returns the capabilities in offered that the controller
// supports, in the order offered, without duplicates.
func GrantCapabilities(offered, supported []Capability) []Capability {
	out := []Capability{}
	for _, c := range offered {
		if Has(supported, c) && !Has(out, c) {
			out = append(out, c)
		}
	}
	return out
}

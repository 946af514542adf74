package environment

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// maxPoolSize bounds Pool.Size.
const maxPoolSize = 64

// Pool is an environment's warm pool setting: the lease manager keeps Size
// sandboxes of the environment started ahead of acquisitions (members,
// leases in status pooled of the instance, authz.InstanceCompany), and an
// acquisition adopts one instead of creating a sandbox. It is a knob:
// editing it changes neither the environment's identity nor its
// qualification, and members are made of the config and active template
// the environment has at refill time (their fingerprint says which).
//
// In JSON: {"size": 2, "maxAge": "1h", "runner": false}; maxAge is a Go
// duration string, "" or absent for no age limit.
//
// The zero Pool starts nothing: Catalog.Create refuses it (Size must be
// 1..64), and in an UpdateRequest it removes the pool (a sweep drains its
// members). A pool with a zero MaxAge keeps each member until it is
// adopted or retired (a config, template or size change, an archive):
// on a provider that bills running sandboxes, Size members are billed
// for as long as the pool exists.
type Pool struct {
	// Size is how many members the pool keeps ready, 1..64. A
	// catalog update with Size 0 removes the pool.
	Size int
	// MaxAge, if positive, is how long a member may wait for adoption;
	// older members are destroyed with receipts and replaced.
	MaxAge time.Duration
	// Runner makes a runner pool: members start with berth's runner
	// installed, launched and connected (the driver's runner bind mounts
	// are fixed at create, so only acquisitions for that runner adopt
	// them).
	Runner bool
}

type poolJSON struct {
	Size   int    `json:"size"`
	MaxAge string `json:"maxAge,omitempty"`
	Runner bool   `json:"runner,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (p Pool) MarshalJSON() ([]byte, error) {
	j := poolJSON{Size: p.Size, Runner: p.Runner}
	if p.MaxAge > 0 {
		j.MaxAge = p.MaxAge.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler; unknown members are refused.
func (p *Pool) UnmarshalJSON(b []byte) error {
	// Member names must match exactly (encoding/json alone would take
	// "MAXAGE" for "maxAge"), and no other member is allowed.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return fmt.Errorf("pool is not a JSON object: %w", errcode.ErrInvalid)
	}
	for k := range members {
		if k != "size" && k != "maxAge" && k != "runner" {
			return fmt.Errorf("pool has an unknown member %q (size, maxAge and runner are): %w", k, errcode.ErrInvalid)
		}
	}
	var j poolJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("pool: size is a number, maxAge a duration string, runner a boolean: %w", errcode.ErrInvalid)
	}
	*p = Pool{Size: j.Size, Runner: j.Runner}
	if j.MaxAge != "" {
		d, err := time.ParseDuration(j.MaxAge)
		if err != nil {
			return fmt.Errorf("maxAge is not a duration such as \"1h\": %w", errcode.ErrInvalid)
		}
		p.MaxAge = d
	}
	return nil
}

// clonePool returns a copy of p (nil for nil).
func clonePool(p *Pool) *Pool {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// checkPool validates the pool setting p of an environment of driver d
// (label names it): a size in 1..64, a non-negative max age, and
// a sandbox driver that can resume a member by id (adoption), list by
// label (sweeps find members whose record never landed) and destroy by id
// (drain, refill of aged members); a runner pool also needs runner ingress.
func checkPool(label string, d drivers.Driver, p *Pool) error {
	if p == nil {
		return nil
	}
	bad := func(reason string) error {
		return &Error{Environment: label, Field: "pool", Reason: reason, Err: errcode.ErrInvalid}
	}
	switch {
	case p.Size < 1 || p.Size > maxPoolSize:
		return bad(fmt.Sprintf("size %d is outside 1..%d", p.Size, maxPoolSize))
	case p.MaxAge < 0:
		return bad("maxAge must not be negative")
	}
	caps := d.Capabilities()
	if caps.Kind != drivers.KindSandbox {
		return bad(fmt.Sprintf("driver %q is a host driver; pools need a sandbox driver (%v)", d.Name(), drivers.ErrUnsupported))
	}
	eff := drivers.Effective(d, 0)
	for _, need := range []struct {
		c    drivers.Capability
		what string
	}{
		{drivers.CapReattach, "reopen a sandbox by id (adoption by another process)"},
		{drivers.CapList, "list sandboxes by label (sweeps)"},
		{drivers.CapDestroyByID, "destroy a sandbox by id (drain, refill)"},
	} {
		if !eff.Has(need.c) {
			return bad(fmt.Sprintf("driver %q lacks capability %s (%s), which a pool needs (%v)", d.Name(), need.c, need.what, drivers.ErrUnsupported))
		}
	}
	if p.Runner && !eff.Has(drivers.CapRunnerIngress) {
		return bad(fmt.Sprintf("driver %q lacks capability %s, which a runner pool needs (%v)", d.Name(), drivers.CapRunnerIngress, drivers.ErrUnsupported))
	}
	return nil
}

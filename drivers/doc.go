// Package drivers defines the contract between berth and the kinds of
// execution target it drives: the local host, SSH hosts, Docker, Daytona and
// the in-memory fake.
//
//	reg := drivers.NewRegistry(local.New(nil), docker.New(nil))
//	d, err := reg.Lookup("docker")
//	cfg, err := d.Schema().Normalize(raw) // a *ConfigError names the field
//	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: id})
//	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"uname"}})
//	r, err := sb.Release(ctx, drivers.Destroy)
//	gone := r.Proves(sb.ID(), drivers.Destroy) // confirmed by the provider
//
// Driver and Sandbox are the contract: a driver acquires a sandbox, a
// sandbox runs bounded commands and is released with a provider-confirmed
// Receipt. Everything beyond that is an optional interface, each tied to
// one Capability, implemented either by the Driver or by its live Sandbox
// values. A driver declares its capabilities statically for discovery
// without allocation (CAP-1); Effective intersects the declaration with
// what the driver implements and removes what a caller narrowed (CAP-2;
// ConfigNarrowing gives what a config narrows, for a driver that implements
// ConfigNarrower), and DriverAs and SandboxAs assert on the live value: the driver
// for driver-level interfaces, the sandbox (with the caller's narrowing)
// for sandbox-level ones. The conformance suite proves declared ==
// implemented. The package makes every type assertion on an optional
// interface in one place, behind Effective, DriverAs and SandboxAs.
//
// A driver describes its config with a config.Schema (package
// drivers/config: the config value, its schema, secret references,
// redaction and the config's errors); Driver.Schema returns it.
//
// Helpers for driver implementations (output buffers, stdin copying,
// the signal set, runner launch by Exec, the per-lease cgroup scripts) are
// in package drivers/driverkit; a host composing berth never needs them.
//
// Isolation is the ordered level of isolation a target gives (none,
// container, gvisor, microvm); a driver declares it per config through
// IsolationDeclarer and IsolationOf reads it without I/O; the conformance
// suite measures it.
//
// EvidenceKind names what a receipt or stop proof stands on (PRP-6:
// provider, cgroup, tag_scan, runner_attested).
//
// Errors are sentinels that every driver wraps with context;
// each carries its errcode.ErrorCode (errcode.Code finds it) and a reason,
// the finer stable code that probe results carry (errcode.ReasonOf finds
// it; docs/errors.md lists the reasons).
//
// Registry holds the drivers a host composed; there is no global registry.
// Package drivers/drivertest is the conformance suite every driver passes.
package drivers

// Package qualification holds the values of a qualification: the proof,
// recorded by a probe, that a pinned image runs on a saved environment
// (QUAL-1..8). It does no I/O.
//
// A host reads them through the prober:
//
//	v, err := sys.Prober().Qualification(ctx, p, company, envID)
//	if v.Qualified { fmt.Println("runs on", v.Platform) } else { fmt.Println(v.Code, v.Reason) }
//
// The parts, by concern:
//
//   - View, the public read of an environment's qualification for one
//     company without private metadata (QUAL-7), and Diagnostic, what a
//     probe says about recording one (probe.Result); both carry a stable
//     code, a reason of docs/errors.md ("recorded", "qualified",
//     "stale_fingerprint", "no_record", ...).
//   - Platform, the measured os/arch/libc/kernel, normalized, with a text
//     form (String, ParsePlatform, MarshalText), and the alias table of
//     architecture names (NormalizeArch) that drivers reporting a platform
//     share (Platform.Normalize applies it and the OS names' table).
//   - CanRun, whether a platform meets one of the platforms a runner
//     artifact supports (each a Platform, its LibcVersion the minimum) and
//     why not, as a Verdict (QUAL-8).
//   - Record, what a probe stores (only the library writes one, CFG-5),
//     LastTest, the outcome of the company's last probe of an environment
//     (kept beside the record, read in View.LastTest), and the Store
//     interface with NewMemoryStore; store implementations prove
//     themselves with qualificationtest.RunStoreTests.
//
// The package imports no driver, lease, probe or environment code and does
// no I/O; a dependency test fails if that changes. Its only berth
// dependencies are packages images and errcode.
package qualification

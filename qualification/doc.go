// Package qualification decides, without any I/O, whether a probe's
// evidence proves that a pinned image runs on a saved environment, and
// keeps the resulting records (QUAL-1..8).
//
//	fp := qualification.Fingerprint(qualification.FingerprintInput{
//		Driver: "docker", Target: ids, Secrets: refs, Image: image})
//	s := qualification.Subject{Company: "acme", Environment: env,
//		Saved: true, Fingerprint: fp, Image: pinned}
//	rec, d := qualification.Evaluate(s, ev) // ev: what a probe saw
//	if d.Code != qualification.CodeRecorded { ... } // d names what failed
//	err := store.PutQualification(ctx, rec)
//	ok, d := qualification.Valid(rec, current) // later: does it apply?
//
// The parts, by concern:
//
//   - Subject (the environment as configured now, for one company),
//     Evidence (what a saved sandbox probe observed), and Evaluate, which
//     returns a Record only when every QUAL-1 condition holds, else a
//     Diagnostic naming the first one that failed with a stable Code. Valid
//     says whether a stored Record still applies: same company (QUAL-4),
//     same environment, same config fingerprint (QUAL-3).
//   - Fingerprint over the fields the caller classified with the driver's
//     schema (identity fields, secret references with versions, image,
//     active template); knobs and metadata are not inputs.
//   - Platform, the measured os/arch/libc/kernel, normalized, with a text
//     form (String, ParsePlatform, MarshalText), and the one alias table of
//     OS, architecture and libc names (NormalizeOS, NormalizeArch,
//     NormalizeLibc).
//   - DetectScript, the one-Exec POSIX shell script that measures a
//     platform, and its pure parser ParseDetection (tolerant of missing
//     tools, tested on recorded real outputs and fuzzed), shared by probe
//     and by a runner that reports its platform.
//   - CanRun, whether a platform meets a runner artifact's Requirements and
//     why not (QUAL-8).
//   - View, the public read without private metadata (QUAL-7).
//   - The Store interface and MemoryStore; store implementations prove
//     themselves with qualificationtest.RunStoreTests.
//
// The package imports no driver, lease, probe or environment code and does
// no I/O; a dependency test fails if that changes. Its only berth
// dependency is package images.
package qualification

// Package probe checks that an execution target works and, for sandbox
// drivers with a pinned image, records a platform qualification
// (PRB-1..8, QUAL-1..7).
//
//	p := sys.Prober() // sys is the *berth.System berth.New returned
//	res, err := p.Probe(ctx, admin, envID, probe.Request{Company: "acme"})
//	fmt.Println(res.OK, res.Code, res.Summary, res.Cleanup.Confirmed)
//	res, err = p.ProbeDraft(ctx, admin, "ssh", rawConfig) // nothing saved
//	q, err := p.Qualification(ctx, admin, envID, "acme")
//
// The parts:
//
//   - The Prober, which berth.New builds over the System's own catalog,
//     environments as stored (for the qualification subject),
//     availability gate, drivers, lease manager, qualification store,
//     logger and runner controller (internal/probehook), and hands out as
//     System.Prober; Request.Progress reports each stage.
//     Authorization is the catalog's (environment.Catalog.Authorize), so
//     a host sets its policy once; every exported method of the Prober
//     takes the principal (internal/apicheck checks it), and the Prober
//     reaches no record through a raw store the catalog or the lease
//     manager would hand out (they hand out none): the draft lease's
//     record is read back with lease.Manager.Get for the probing
//     principal.
//   - Prober.Probe, the probe of a saved environment. It authorizes first
//     (ActionProbe, PRB-7), allocates a fresh ephemeral lease through
//     lease.Manager (never a reused one), runs
//     qualify.DetectScript in one Exec and parses it with
//     qualify.ParseDetection, measures the isolation a task inside the
//     sandbox sees (stage isolation: internal/isolation, the conformance
//     suite's measurement, against the kernel release of the machine the
//     sandbox runs on, which the sandbox reports through an unexported
//     EngineKernel method: Docker's engine KernelVersion; a level below
//     the driver's declaration fails with "isolation_mismatch"), reads
//     the live image identity through
//     drivers.SandboxAs[drivers.ImageReporter] on the live sandbox
//     (narrowed by drivers.Narrowing for its driver), releases the lease
//     with Destroy and confirms the cleanup, then evaluates the
//     qualification and stores the record only when qualify.Evaluate
//     says so.
//   - The runner-based probe (Request.Runner, PRP-8): the
//     lease is acquired to host berth's runner, which starts under a
//     short-lived probe identity (the probe scope: it answers hello and
//     refuses every task) through berth's runner controller
//     (internal/controller); its
//     hello's platform (measured in the sandbox with the same ground-floor
//     parser) and version are the evidence (stageRunner in place of
//     stageDetect); the release then proves the cleanup as for any probe.
//     The System's runner controller and runner binaries serve it.
//   - Prober.ProbeDraft, the probe of an unsaved config
//     (the catalog's draft validation; nothing saved: the draft lease's
//     write-ahead record, which keeps no secret, is removed once the
//     cleanup is proven, and stays pending_cleanup only while it is not;
//     never a qualification, PRB-4, LEASE-2).
//   - The qualification subject of a saved environment (its
//     fingerprint from the driver schema's Partition) and
//     Prober.Qualification, the allocation-free public read (QUAL-7).
//   - The detection script (qualify.DetectScript, whose pure parser
//     lives on the ground floor so that a runner reports the same
//     platform), tested in the fake driver and in every real shell.
//   - Result, Stage, Cleanup, and the summary that names the target.
//
// # Host and sandbox targets
//
// Every saved probe goes through the lease manager, also for host drivers:
// a local or ssh lease is a host session, and its release ends the session
// with a confirmed receipt. This keeps one path, one record per probe and
// one cleanup rule for every driver. A local probe (PRB-1) reports the host
// name and the working directory the driver verified at acquire; an ssh
// probe (PRB-2) reports the remote working directory the server resolved
// at acquire (the ssh driver connects with strict host key checking). Both
// measure the platform with the same one-Exec script, and their results
// say plainly (Result.NotValidated, a field of its own) that the probe did
// NOT validate an adapter, a workspace or task execution. A result's
// Message is one sentence for a person; Summary the longer account. Host targets have no image: they are never qualified, and
// their results say so in the qualification diagnostic
// ("host_target").
//
// # Failures
//
// Every stage has a deadline (PRB-5): resolve 30 s, acquire 5 min
// (retries included), detect 2 min, runner 2 min (install, launch, hello),
// image 30 s, qualify 30 s, and the release 1 min, which runs even after
// the caller's context ended. The caller's context bounds every stage but
// the release. A
// stage that runs past it fails with "timeout" naming the stage
// and the target, so a host that accepts a connection and never answers, or
// never finishes the detection command, cannot hang a probe. After the
// first failure the later stages are recorded as skipped (never "ok"), and
// the qualification diagnostic names that failure
// ("probe_failed").
//
// Probe and ProbeDraft return errors only for authorization, not-found and
// malformed requests. Every target failure is a Result with OK false, the
// stable code of the first failed stage (the reason of the driver's error,
// errcode.ReasonOf, plus "cleanup_failed" for an unconfirmed cleanup,
// "platform_unknown" and "archived"; docs/errors.md lists these reasons
// with the errcode code each is finer than) and per-stage timings (PRB-5). A failed acquisition is
// the probe's failure: nothing else, and never the server host, is tried in
// its place (PRB-8). A lease whose cleanup is not confirmed is left pending
// cleanup by the lease manager and reported in Result.Cleanup.
//
// # Secrets
//
// A Result holds no config values. Error texts come from drivers, which
// never put secrets in errors; as a second line of defence the prober
// replaces every secret value it knows (resolved or pasted) in the texts it
// puts into a Result.
package probe

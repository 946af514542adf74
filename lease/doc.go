// Package lease hands out sandboxes (and host sessions) of saved
// environments to runs, and makes sure none is ever lost track of.
//
//	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores(), Leases: &lease.Options{InstanceID: "prod"}})
//	m := sys.Leases()
//	h, err := m.Acquire(ctx, operator, lease.AcquireRequest{
//		Company: "acme", EnvironmentID: envID, Run: "run-1",
//		Policy: lease.ReuseByEnvironment})
//	res, err := h.Exec(ctx, lease.Command{Argv: []string{"make"}}) // or h.Run: a task through the runner
//	l, err := h.Release(ctx, lease.ReleaseOptions{}) // the policy decides: stopped, resumable
//	// l.Status, l.Cleanup
//	report, err := m.Sweep(ctx, operator) // what crashes left behind
//
// Manager is the entry point, which a host gets from berth.New
// (System.Leases, configured by berth.Options.Leases): Acquire returns a
// Handle, a portable value that runs commands on the live sandbox (Exec)
// or tasks through berth's runner (Run) and releases through the manager
// (the raw sandbox only inside Handle.Raw, scoped as database/sql.Conn.Raw
// and unsafe for lifecycle); Release ends it with a disposition (the zero one lets the
// lease's policy decide: ByPolicy); Get and List read lease
// records; Sweep cleans up what crashes and failures left behind. Lease is
// the record; Store persists it, NewMemoryStore returns the in-memory
// implementation, and package leasetest holds the conformance suite every
// Store passes.
//
// # Hooks, principals and handles
//
// Every exported method of the Manager that acts for someone takes the
// acting authz.Principal right after its context and asks the Authorizer
// (internal/apicheck checks it). What the manager and other services call
// in each other at composition is not an exported method: the manager's
// constructor (internal/leasehook.New, which only berth.New calls) takes
// the Assignments (for environments, bindings and the Authorizer), the
// runner controller's task hook (the value internal/controller.New returns),
// the secret store and keeper, the instance settings and the runner
// binaries, and returns, next to the Manager, the usage reporter
// (internal/envhook.UsageReporter) that counts leases for the catalog's
// delete blast radius. So do the calls of a Handle that only the runner
// controller, the prober and the templates service make (hosting the
// runner, a terminal, a capture, the live image): a host reaches them
// through those services. A Handle's methods take no principal: the Handle is the
// authority Acquire granted to the principal who acquired it, as an open
// *os.File is.
//
// # Guarantees
//
// Authorization (AUTH-1, ASG-3, CFG-2): every Acquire, Release, Get, List
// and Sweep takes the acting authz.Principal and asks the Authorizer
// of the manager's Assignments. Acquire names an environment by id
// (instance admins and local operators under DefaultPolicy) or a Scope,
// whose binding the manager resolves from the store through the
// Assignments (as Assignments.Resolve does); the record is fetched by the
// manager, never taken from the caller. A company never leases an
// environment bound to other companies only. Releases and reads need
// ActionLease and ActionRead on the lease's company; records are redacted
// (no config, no metadata) for principals without ActionReadConfig; a
// Sweep needs ActionSweep. A lease the principal may not read reads as a
// missing one (errcode.ErrNotFound, the same text); refusals of actions on what
// it may see wrap errcode.ErrDenied; neither names another tenant's
// company or environment.
//
// Write-ahead (LEASE-2): a lease record with the internal status starting is
// stored, with a claim of the acquiring manager, before the driver is asked
// to create anything; the provider lease id is recorded from
// drivers.AcquireRequest.Allocated as soon as the provider assigns it. Every
// sandbox carries the labels berth.instance, berth.environment and
// berth.lease, so a sandbox whose id never reached the store is still found.
// A crash leaves a starting record whose claim expires; the next Sweep turns
// it into pending_cleanup and destroys the sandbox (by id, else by label).
//
// Budget and retries (LEASE-3): the startup budget is AcquireRequest.Budget,
// else the environment's startup_timeout knob, else the driver's declared
// StartupBudget, else 5 minutes. One deadline bounds every
// attempt (internal/retry); only errors wrapping drivers.ErrTransient are
// retried, with jittered exponential backoff, and no attempt starts that
// cannot finish in time. Before retrying after a failure that already
// allocated a sandbox, that sandbox is destroyed with proof; without proof
// there is no retry and the lease is left pending cleanup.
//
// Reuse (LEASE-4, LEASE-5): ReuseByEnvironment and ReuseByWorkspace need
// drivers.CapReuse. One lease record owns one reusable sandbox across runs
// (its ReuseKey: the company and environment, and for ReuseByWorkspace the
// workspace and the scope's project). An acquisition resumes it when the reuse fingerprint
// (Lease.Fingerprint: driver, identity fields,
// secret references and versions; knobs and metadata left out) matches, including a sandbox that finished starting
// after an earlier acquisition ran out of budget (that lease is kept
// retained). Otherwise a replacement is made and its lease records Replaces
// and ReplaceReason (not_found, expired, identity_mismatch, runner_mismatch,
// template_changed). A resume that fails otherwise keeps the lease and
// returns an error of reason "lease_preserved" (errcode.ReasonOf); nothing replaces it silently.
// The reuse key of ReuseByWorkspace is the company, the environment, the
// project (AcquireRequest.Project) and the workspace: an agent's next turn
// in its workspace gets the lease (and files) of the last one, another
// project's or company's acquisition never does.
//
// Files (issue 52): Manager.Files hands a principal the files of a live
// lease (drivers.Files, paths inside the sandbox's working directory),
// authorized as the lease is: ActionRead lists a directory, ActionLease
// reads and writes content (a board member lists only).
//
// Templates (IMG-8): while an environment's active template applies to its
// config (environment.ActiveTemplate.Drift relinked), a lease
// starts from the template's identity as its image (so the reuse
// fingerprint covers it), is labelled berth.template-id, and its live identity
// is checked (reason "image_mismatch", the sandbox destroyed). Manager.Open hands
// a live sandbox lease's handle to another process (templates'
// capture).
//
// Release (LEASE-6, LEASE-7): Keep leaves the lease retained; Stop leaves
// it released and, for reusable policies, resumable; Destroy releases it.
// Only a drivers.Receipt that Proves the disposition for the lease's
// provider lease id counts; anything else leaves pending_cleanup with the
// reason. RetainOnFailure keeps a failed run's sandbox retained. Before it
// stops or destroys, Release writes ahead that the lease expires when its
// claim does (one minute, the cleanup budget): should its final write fail even
// after the store's retries, the next Sweep after the claim takes the
// lease and destroys the sandbox with proof, rather than the lease staying
// active until its TTL.
//
// Host leases (LEASE-7, LEASE-10): a local or ssh lease is a
// session in the acquiring manager's process. That manager is its Holder and
// renews a claim on it every 10 seconds (the claim lasts
// three beats). Every command a Handle runs carries BERTH_LEASE=<lease id>
// (the lease's process tag) in its environment. Only the holder's handle ends the session
// with the driver's receipt (it kills its process groups and verifies none
// is left). A release or sweep by any other manager while the claim lasts
// records pending_cleanup naming the holder and never confirms; the
// holder's own Release of such a lease ends the session then. After the
// claim expired, the lease ends only by a check: over a fresh session the
// manager kills the processes tagged with the lease id and verifies by a
// /proc scan that none is left; if it cannot check, the lease stays
// pending_cleanup. Manager.Open in another process takes an ssh lease
// over once its holder's claim expired (a holder killed with -9 stops
// renewing): it writes itself as the holder by compare-and-set and opens a
// fresh session of the lease, whose runner directory on the server is
// named after the lease id, so that Handle.Reattach finds the runner the
// first holder launched; that session's release also runs the tag check.
// A local lease is refused (drivers.ErrUnsupported): its runner directory
// is a temporary directory of the acquiring process.
//
// Runner binaries: AcquireRequest.Runner is a drivers.RunnerSet, one
// binary per architecture. Before the write-ahead record, the manager asks
// the driver for the target's architecture (drivers.ArchReporter; a driver
// without it gets the set's only binary) and picks that binary, or refuses
// a target of an architecture the set lacks, naming it; nothing is written
// or created then. The pick is recorded (Lease.Runner) and is what
// Handle.Run installs. A reusable sandbox of a driver that prepares
// for its runner at creation (KindSandbox: Docker's bind mount) is not
// resumed for another binary: it is replaced ("runner_mismatch").
//
// Runner tasks (PRP-6): with the runner protocol's hook (the value
// internal/controller.New returns, which berth.New wires), a release that stops or destroys, and every
// cleanup (a Sweep, a Release of a pending_cleanup lease), first has every
// runner task of the lease stopped and verified. An unproven stop (an
// incomplete proof, a runner that does not answer within the one-minute cleanup budget)
// leaves a release pending_cleanup with the reason and the sandbox as it
// is; the cleanup that retries it asks the runner again and, if it still
// cannot prove the stop, relies on the sandbox's own proof: a confirmed
// stop or destroy of a sandbox, or the tag check of a host lease (the
// runner and its tasks carry BERTH_LEASE). A host lease with runner sessions
// always gets the tag check too, over its live session, since its runner
// runs detached and outlives the session's command groups.
// CleanupEvidence starts with "runner (runner_attested): ..." for the
// runner's part, and CleanupEvidenceKind names what the cleanup stands on:
// provider, cgroup (the host check emptied and removed the lease's runner
// cgroup, driverkit.CgroupKillScript) or tag_scan; never the runner's
// attestation alone. A keep release's receipt says it stopped nothing.
//
// Coalescing (LEASE-8, LEASE-10): acquisitions of one reuse key, or of one
// company, run and environment, are coalesced in-process (one flight per key) and
// across replicas by the store: at most one lease holds a reuse key or run
// key, and claims keep replicas off a lease another one works on, so that
// one reuse key makes one sandbox and one cleanup is processed once.
//
// Records: the record of a draft lease (a draft probe's, Lease.Draft) is removed once its cleanup is proven
// (PRB-4); an unproven one stays pending_cleanup until a release or Sweep
// proves it. Records of ended leases (Lease.Ended) are kept, receipt
// included, for Options.PruneAfter after their release, then pruned by a
// Sweep. Sweeps (Store.ClaimForSweep), the blast radius's lease counts
// and the orphan search (Filter.Live) read the SQL stores through a
// partial index of the live leases, and pruning through one of the ended
// leases by release time, so their cost follows the leases they read, not
// the history; a change between live statuses rewrites the lease's entry
// in the live index in place instead of moving it.
//
// Warm pools (LEASE-1, LEASE-2, LEASE-11, QUAL-4, IMG-3, CFG-7): an
// environment with a pool (environment.Pool) keeps members: sandboxes
// started ahead, each with its own write-ahead record (starting, then
// StatusPooled) of authz.InstanceCompany, labelled berth.pool=member, made from the
// config and active template the environment had at refill time (its
// Lease.Fingerprint says which). An acquisition of a saved, active environment
// with a pool, after its authorization and quota checks,
// adopts the oldest member whose fingerprint and runner match in one
// store transaction (Store.AdoptPooled), so that one member goes to one
// acquisition across replicas; the member's record becomes the lease (its
// id, labels, provider lease id stay; company, run, policy and keys are the
// adopter's) and its sandbox is the handle this manager kept from the
// refill or, in another process, the provider's resumed by id. A member
// that is gone is recorded failed with the provider's answer and the next
// one is tried; without a member the acquisition creates as always. An
// adopted member is an ordinary lease: it is never pooled again. A refill
// acquires a member warm (drivers.AcquireRequest.Warm), except a runner
// pool's: the driver may prepare its first command ahead. Refills
// follow adoptions and sweeps in the background (two at once
// per environment, each start within its budget; Close stops them and
// waits) unless Options.ManualPoolRefill; MaintainPools refills and waits.
// MaintainPools and every Sweep retire members that may no longer be
// adopted (older than the max age, of another fingerprint, beyond the
// size, of an archived or deleted environment or a removed pool, when
// the manager lists every saved environment, as berth.New's does) by a claim, then a
// destroy with its receipt; a member whose destroy is not proven stays
// pending_cleanup for the next sweep. A crash leaves a starting member,
// or an adopted one not yet active, to the sweep like any starting lease.
// The catalog's archive and delete drain the pool through the manager's
// usage hook (envhook.UsageReporter with its archive hook and
// ClearEnvironment),
// and the blast radius lists members as PooledLeases. Close drains
// nothing. A runner pool (environment.Pool.Runner) prepares its members
// for the System's runner binary (System.RunnerSet) at create (recorded as
// Lease.Runner; without it the refill returns an error wrapping
// drivers.ErrUnsupported), and only an acquisition for that binary adopts
// one. Each member's runner is launched and connected while the member
// starts, through the runner protocol's hook (berth.New's: the
// controller's; without it the refill returns an error wrapping
// drivers.ErrUnsupported), on a session of authz.InstanceCompany that runs no
// command; the lease that adopts the member takes that session over when
// it attaches its runner (the runner controller's Attach: the session gets the
// lease's company and run once, and the runner's token is renewed with
// them before any command), so its first task starts on a connected
// runner. A member whose runner does not connect within the startup
// budget is destroyed. A pooled member another process started (a restart
// took its runner's ingress) is claimed by the next pool pass, its sandbox
// resumed by id and its runner reconnected here (the hook's
// ReconnectPoolRunner), so that it is connected ahead again. Qualification records are company-bound (QUAL-4):
// a member writes none and belongs to no company, and its fingerprint,
// which adoption requires to be the environment's current one, is what
// the adopting company's own record is compared with.
//
// Quotas: the live leases (Filter.Live) per company and per company and
// environment are limited by the instance settings (System.Settings:
// quotaPerCompany, quotaPerCompanyEnvironment; 8 and 4 when never set) and
// by Options.Quotas, the stricter of the two per field; an acquisition
// that would add a lease past a limit is refused with ErrQuota before
// anything is written or allocated, and the error names the limit and the
// company's own count. The same run's lease is returned as always. Pool
// members, setup leases and drafts count for no company. The store counts
// and writes in one step serialized per company (Store.InsertLease and
// Store.AdoptPooled with the Quotas), so concurrent acquisitions, in one process or on
// replicas sharing a database, never pass a limit together.
//
// # Status mapping
//
// The SPEC lists active, released, expired, failed, retained,
// pending_cleanup and pooled (a warm-pool member waiting for adoption).
// This package adds starting for the write-ahead record
// while a sandbox is created or resumed (shown to operators as pending). A
// starting lease becomes active, failed (nothing left at the provider),
// retained (a reusable start that outlived its budget) or pending_cleanup
// (a sandbox whose removal is not proven, or an acquirer that vanished).
//
// # Secrets
//
// Lease records keep the environment's normalized config with secret
// references only; a config holding a secret value is refused. Secrets are
// resolved through the host's secret store (berth.Options.Secrets) when
// acquiring and again at cleanup time. With the secret keeper berth.New
// shares with the catalog, the manager records
// the references of each lease record before writing it, and releases them
// once the lease is proven clean (released and not resumable, expired, or
// failed with nothing left); a secret the catalog retired meanwhile (an
// update superseded it, its environment was deleted) is deleted from the
// SecretStore only then, so cleanups by any process keep their credentials
// (CFG-7, LEASE-9).
package lease

// Package environment is berth's catalog of execution environments: saved,
// instance-scoped targets (CFG-1) with authorization (AUTH-1).
//
//	sys, err := berth.New(ctx, opts) // the catalog and the assignments, wired
//	cat, asg := sys.Catalog(), sys.Assignments()
//	req, err := environment.DecodeCreateRequest(body) // strict JSON
//	v, err := cat.Create(ctx, operator, req) // pasted secrets -> refs
//	_, err = asg.Set(ctx, operator, environment.Binding{
//		BindingRef: environment.BindingRef{Kind: environment.BindingProject, Company: "acme", Key: "web"},
//		EnvironmentID: v.ID}, 0) // 0: a new binding
//	res, err := asg.Resolve(ctx, agent, scope, nil) // strongest binding
//
// Catalog is the entry point, which a host gets from berth.New
// (System.Catalog) over its stores and secret store: its methods Create,
// Get, List, Update, Archive, Restore, BlastRadius, Delete, RefreshHealth,
// RefreshAllHealth, Drivers and Authorize. Every method takes an
// authz.Principal and asks the authz.Authorizer first;
// authz.DefaultPolicy is CFG-2 / PRB-7. The probe layer's draft
// validation (an unsaved config with its pasted secret values, validated
// for a draft probe, PRB-4, saving nothing) is no exported method:
// berth's prober reaches it through internal/envhook. The resolved config
// of a saved environment (secret values) is not exported: the lease
// manager resolves secrets itself through the host's SecretStore, and the
// prober gets only a scrubber, a function that redacts those values in
// its texts (internal/envhook).
//
// Hooks: every exported method of Catalog and Assignments that acts for
// someone takes the principal right after its context (internal/apicheck
// checks it); what a service calls in another at composition is no
// exported method. berth.New builds the catalog, the assignments, the
// availability gate they share and the secret keeper through
// internal/envhook: the catalog reaches the assignments' bindings for the
// blast radius, their clearing and the instance default's protection
// through unexported methods; other services' usage counts (the lease
// manager's, the setup sessions') are the usage reporters their
// constructors return, which berth.New wires into the catalog with the
// secret keeper and the host's Protected. The lease layer's way in
// (authorizing a lease of a saved target or of a draft) is an
// internal/envhook function too. The catalog hands out no raw store and
// no gate; Catalog.Drivers shows the gate's verdict on each driver (test
// mode included), and View.Unavailable its verdict on an environment.
//
// Guarantees:
//
//   - Authorization (CFG-2, AUTH-1): with authz.DefaultPolicy, only
//     instance admins and local operators create, update, archive, delete,
//     probe, bind or run setups, and only they see the full view. Board
//     members get the redacted view (no config, no env vars, no metadata).
//     Agents get the redacted view too and may lease only through a
//     binding of a scope of a company they hold a grant for (the lease
//     manager asks);
//     they are denied every mutation, every probe and every sweep, whatever
//     their grants.
//     Refusals wrap errcode.ErrDenied and name role, principal and action. A
//     missing environment is reported as denied to those who may not act.
//   - Secrets (CFG-3): a secret pasted into a config is moved into the
//     SecretStore and the config keeps a config.SecretRef; an
//     update with a new value stores the secret's next version; a reference
//     that is not the one stored for that field of that environment is
//     refused. Each value of a SecretMap config field (a driver's secret env
//     vars, such as docker's and daytona's config.env) is a secret of its
//     own (named FIELD.KEY), moved, versioned and checked key by key the
//     same way; views show its keys with references. No View, error, log
//     line or String holds a secret value. The environment's own Env vars
//     whose names look like credentials are refused, because those are
//     stored and shown inline: a word of the name (split on "_", "-", ".",
//     any case) ending in TOKEN(S), SECRET(S), PASSWORD, PASSWD, APIKEY,
//     PRIVATEKEY or CREDENTIAL(S), or KEY(S) after API, PRIVATE, SECRET,
//     ACCESS, SIGNING, ENCRYPTION, MASTER or AUTH.
//   - Secrets live as long as the leases that use them (CFG-7, LEASE-9):
//     the version an update supersedes and the secrets of a
//     deleted environment are retired through the one place
//     (retireSecrets). With the secret keeper (wired by berth.New, shared
//     with the lease manager) a retired secret that a lease not proven
//     clean uses is kept in the SecretStore, its uses recorded in a
//     SecretUseStore (berth's own store), and deleted once the last such
//     lease is proven clean; so another process's release or sweep always
//     has the credentials it needs.
//   - Exclusivity and test drivers (CFG-4): at most one environment of each
//     exclusive driver (default "local") per instance, checked atomically by
//     the Store; the "fake" driver cannot be saved
//     or resolved unless berth.Options.TestMode.
//   - Reserved fields (CFG-5): payloads naming a server-owned field (in any
//     letter case: id, status, revision, createdAt, updatedAt, createdBy,
//     updatedBy, qualification and its variants, platform and its
//     measurements, fingerprint, configFingerprint, imageIdentity, template,
//     activeTemplate, leases, secrets) at the top level or inside the
//     config (unless the driver's schema declares a config field of that
//     name), or a metadata key that starts with "berth." or
//     imitates qualification or platform state, are refused as reserved
//     with the field named; DecodeCreateRequest and DecodeUpdateRequest
//     decode strictly (one object, no unknown fields, exact member names,
//     types checked).
//   - Limits (CFG-8): a name of at most 128 bytes, a description of at
//     most 4096, at most 256 env vars (names up to 256 bytes, values up to
//     32 KiB), at most 64 metadata entries (keys up to 128 bytes, not
//     empty; values up to 4096); every text valid UTF-8 without NUL. A
//     request beyond one is an *Error naming the field.
//   - Revisions (CFG-6): Update, Archive, Restore and Delete carry the
//     revision they were based on; a stale one is errcode.ErrConflict and nothing
//     changes.
//   - Active template (IMG-6): Environment.ActiveTemplate is server-owned;
//     only the templates package changes it, by a revision-checked update that
//     bumps the revision, and catalog updates keep it. Every view shows
//     it as {id, identity, drift}, the drift (relinked
//     or detached) computed from the config's source fingerprint without
//     I/O.
//   - Warm pool: Environment.Pool ({size, maxAge, runner}, nil for none)
//     is a knob of the record: Create and Update validate it (size
//     1..64, a sandbox driver with the reuse, list and
//     destroy_by_id capabilities; a runner pool also runner_ingress) and
//     an update with size 0 removes it; neither identity nor qualification
//     depends on it. The lease manager keeps the members (lease package);
//     Archive tells reporters that have an EnvironmentArchived method,
//     so that it drains them at once.
//   - Blast radius (CFG-7): Delete first gathers bindings, leases, pool
//     members (PooledLeases, not blocking) and setup sessions from the
//     usage reporters, refuses while a reusable lease is live, a cleanup is
//     pending, or the environment is protected, and has the reporters
//     that own references clear them once the record is gone (bindings;
//     the lease manager drains the pool).
//   - Errors name things (CFG-8): config errors are *ConfigError naming the
//     environment (name, and id once saved) and each field, wrapping
//     config.ErrInvalid and errcode.ErrInvalid; other request errors are
//     *Error. On any error nothing is saved and no secret is left in
//     the SecretStore.
//   - Logging: one slog line per mutation (and per refused one), with ids,
//     names, driver, revision and actor; never config or env var values.
//
// Assignments (with its types and BindingStore) binds environments to a
// workspace, project or agent of a company, or as the instance default
// (ASG-1). A binding is identified by (kind, company, key): two companies
// bind their workspace "ws" independently, and there is one instance
// default. Show and Clear authorize for the ref's company before they read;
// a binding the principal may not read is reported as missing. Resolve
// reads only the scope's company's bindings (and the instance default).
// Resolve takes the
// strongest binding of a Scope (workspace > project > agent > instance
// default) and returns a Resolution naming it; a winning binding whose
// environment is gone, archived, unavailable, a test target outside test
// mode, under-capable or of another company is an *Error naming the
// binding, never a fall-through to a weaker binding or the host (ASG-2,
// ASG-3); nothing bound is ErrNoBinding; a binding of another company is
// refused without naming that company or its environment. Resolve takes
// the principal (ActionRead on the company's bindings). The lease layer
// resolves its own target (lease.Manager.Acquire): it authorizes
// ActionLease (with the Scope, so that the host decides whether the
// principal belongs to it), resolves the binding from the store or reads
// the environment by id, and refuses an environment bound to other
// companies only. Resolution.CheckLease checks a lease against a
// resolution (ASG-4). The catalog shows the Assignments' bindings in a
// delete's blast radius and clears them after it (ASG-5), and the
// instance default cannot be deleted (CFG-7). store.Memory keeps bindings
// in memory, store/sqlite and store/postgres in SQLite and PostgreSQL; a
// value that is both the Store and the BindingStore may read a lease
// target and its bindings in one statement (see BindingStore).
//
// Availability (CAP-1, CAP-3): one
// gate is the check that resolution, probes and lease acquisition pass:
// archived, driver not registered, test driver outside test mode, a driver
// reporting itself unavailable, a provider endpoint last measured
// unavailable, a config that no longer validates, or a missing required
// capability refuse the environment with an *Error, and so do the
// instance settings (CFG-9) while they disable environments or, for a host
// driver, allow managed sandboxes only (wrapping
// instance.ErrEnvironmentsDisabled or instance.ErrManagedSandboxOnly), or
// while the driver declares for the config less isolation
// (drivers.IsolationOf) than the highest of the settings' MinimumIsolation,
// container under managed-sandbox-only, and the environment's
// RequireIsolation (the reason
// isolation_below_minimum, naming the target, its level and the minimum;
// drafts against the settings' minimum).
// Provider health
// (drivers.HealthChecker) is measured by Catalog.RefreshHealth (an
// operator's refresh, and every probe before it gates) and by
// Catalog.RefreshAllHealth (the host's background round, for a principal
// who may probe), kept per driver
// and endpoint in a HealthStore shared by every process, and shown by Get
// and List with its time, never measured by them; a provider never
// measured counts as available and shows "not measured".
//
// Store is the persistence contract; store.Memory keeps it in memory,
// store/sqlite and store/postgres in SQLite and PostgreSQL.
package environment

// Package berth is an embeddable library for execution environments: the
// places where AI coding agents run their work.
//
// A host application (a service that manages agents, a test harness, a CLI)
// composes berth to let operators save execution targets in an
// instance-scoped catalog, see what each driver can do, probe targets and
// qualify pinned images, lease sandboxes, and bind agents, projects and
// workspaces to targets.
//
// Start with New, over the host's stores:
//
//	db, err := sqlite.Open(ctx, "/var/lib/app/berth.db") // store/sqlite, or store/postgres
//	if err != nil { ... }
//	defer db.Close()
//	sys, err := berth.New(ctx, &berth.Options{
//		Stores:  db.Stores(), // or none: memory stores
//		Drivers: []drivers.Driver{local.New(nil), ssh.New(nil)},
//		Secrets: mySecretStore, // required with durable stores
//	})
//	if err != nil { ... }
//	defer sys.Close()
//	view, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{...})
//
// New composes a System (a driver registry, the catalog, the assignments,
// the lease manager, the custom images service, the prober, berth's
// runner controller, the secret hand-over and the instance settings) with
// sensible defaults, reachable through its accessors (Catalog,
// Assignments, Leases, Templates, Prober, Handover, Settings, Drivers,
// Secrets); the runner controller has none: a host runs tasks through the
// lease manager (lease.Handle.Run). System.RunHealthChecks keeps provider
// health measured in the background. A service's own knobs are its
// package's Options (Options.Leases, Options.Templates), which New
// completes with the wiring; the runner controller's are Options' Runner
// fields. Pinning image tags to digests is images/resolve's
// Resolver, which a host makes itself (resolve.New). The root package opens no database:
// Options.Stores (package store) names each package's store, and
// store/sqlite and store/postgres open a database and return them all, so a
// host links the SQL driver it names and no other. The default drivers are
// local only; the fake (drivers/fake) is named by the tests and demos that
// want it. There is no global state: a host may also wire the packages
// itself.
//
// Every exported method of a service (the catalog, the assignments, the
// lease manager, the prober, the hand-over) that
// acts for someone takes the acting authz.Principal right after its
// context, and the library's Authorizer decides. What one service calls in
// another at composition (the controller stopping a lease's tasks, the
// hand-over resolving a task's secret values, the catalog counting a
// delete's bindings and leases) is a hook: a value a constructor returns
// or takes (the lease manager's TaskStopper from the runner controller,
// given it through internal/leasehook, the secret resolver built with the
// hand-over service (internal/handoverhook), the lease manager's usage
// reporter (internal/envhook.UsageReporter), the Assignments the catalog
// is built with through internal/envhook), never an exported method anyone holding the
// service could call for no principal; New wires them (hooks.go). Handles
// (lease.Handle, lease.Task) take no principal: they are the authority
// granted when they were opened.
//
// The packages, from the bottom up (imports only run downwards):
//
//   - images, qualification: pure values (OCI references and identities;
//     qualification views, records and platforms). images/resolve pins
//     tags to digests over the network.
//   - drivers: the driver contract (Driver, Sandbox, optional capability
//     interfaces, sentinel errors, Registry); drivers/config: a driver's
//     config and its schema (validation, secrets, redaction). drivers/local,
//     drivers/ssh, drivers/docker, drivers/daytona and drivers/fake implement
//     it, and drivers/drivertest is the conformance suite they all pass.
//   - environment: the catalog (create, read, update, archive, delete with
//     blast radius), secrets moved into a SecretStore, redaction, the
//     authorization policy, assignment bindings with Resolve, provider
//     health and the one availability gate.
//   - lease: acquisition for a principal (by environment id, or through a
//     scope's binding) with write-ahead records, startup budgets, reuse,
//     termination proofs and sweeps; callers hold a portable Handle,
//     whose Run runs an agent's tasks through berth's runner in the
//     sandbox (lease.Task: Wait, Output, Stream, Stop with the runner's
//     stop proof). The runner (cmd/berth-runner, runnerbin builds it) and
//     the protocol's controller, which New wires as the lease manager's
//     task hook (a release or sweep stops and verifies its runner tasks
//     first), are berth's own (internal/controller). A task's secrets
//     travel as references in the command and as values in a separate
//     frame delivered once, never stored.
//   - probe: local, host, saved-sandbox and draft probes with platform
//     detection (in one command, or from a runner's hello under a probe
//     identity) and qualification recording.
//   - handover: project auth checks of managed accounts (AUTH-2,
//     System.Handover) and the resolver that hands a task's secrets to
//     the runner (secret env keys of its lease's config, managed accounts
//     only while a check matches exactly).
//   - instance: the instance settings (CFG-9, System.Settings):
//     enableEnvironments and enableManagedSandboxOnly, changed only by
//     instance admins with an optimistic revision, read by the one gate
//     through a cache (one second across replicas, at once in-process).
//   - store: Stores, one field per package store, and Memory;
//     store/sqlite and store/postgres open a database, migrate it and
//     return its Stores; store/storetest runs every package's store suite
//     over one Stores. Each package owns its store interfaces, memory
//     stores and conformance suite (environment/environmenttest,
//     lease/leasetest, ...).
//
// See examples/envctl for a complete host.
package berth

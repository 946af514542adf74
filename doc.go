// Package berth is an embeddable library for execution environments: the
// places where AI coding agents run their work.
//
// A host application (a service that manages agents, a test harness, a CLI)
// composes berth to let operators save execution targets in an
// instance-scoped catalog, see what each driver can do, probe targets,
// qualify pinned images, lease sandboxes and bind agents, projects and
// workspaces to targets.
//
// The packages, from the bottom up (imports only run downwards):
//
//   - images, qualification, internal/...: pure values and helpers.
//   - drivers: the driver contract (Driver, Sandbox, optional capability
//     interfaces, ConfigSchema, sentinel errors, Registry); drivers/local,
//     drivers/ssh, drivers/docker, drivers/daytona and drivers/fake implement
//     it, and drivers/drivertest is the conformance suite they all pass.
//   - environment: the catalog (create, read, update, archive, delete with
//     blast radius), secrets moved into a SecretStore, redaction, the
//     authorization policy.
//   - lease: acquisition with write-ahead records, startup budgets, reuse,
//     termination proofs and sweeps.
//
// A host composes berth explicitly; there is no global state:
//
//	reg := drivers.NewRegistry(local.New(nil), ssh.New(nil))
//	store, err := berth.OpenStore(ctx, "sqlite:///var/lib/app/berth.db")
//	cat := environment.NewCatalog(store, reg, secrets, nil)
//
// OpenStore and NewMemoryStore return one store that serves every package's
// Store interface. See examples/envctl for a complete host.
package berth

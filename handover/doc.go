// Package handover decides what berth hands into a sandbox with a runner
// task (PRP "secrets in commands", AUTH-2): the values of a task's secret
// references, resolved at delivery and never stored, and managed accounts,
// handed over only while a project auth check matches exactly.
//
//	svc := sys.Handover() // berth.New wires it; the host's Checker is
//	                      // berth.Options.ProjectAuthChecker
//	rec, err := svc.PrepareManagedAccount(ctx, operator, "acme",
//		accountRef, envID, []string{"web", "api"}) // rec.Status
//	err = svc.Check(ctx, agent, "acme", leaseID, uses) // as Handle.Run will
//
// The parts:
//
//   - AuthCheck, the record of a project auth check keyed by (company,
//     managed-account reference): version (1), status, the
//     prepared environment's config fingerprint (the lease reuse fingerprint,
//     lease.Lease.Fingerprint: the active template counts), the provider
//     (driver name and provider account: the reference in the schema's
//     AccountField, such as Daytona's API key, else the environment id), the
//     sorted project ids, when and by whom it was prepared and answered. At
//     dispatch and delivery it is compared with the lease and the project
//     set, and a refusal wraps ErrMismatch and carries a reason naming the
//     part that differs (auth_check_missing, auth_check_version, ...,
//     finer than errcode.Conflict; errcode.ReasonOf reads it).
//     Store is the record's store interface; handovertest holds its
//     conformance suite, which NewMemoryStore's store, store/sqlite and
//     store/postgres pass.
//   - Service, which berth.New builds (internal/handoverhook) with the
//     secret resolver it gives berth's runner controller, and hands out
//     as System.Handover. PrepareManagedAccount
//     replaces any earlier record of the key with a pending one and runs
//     the host's Checker (the project auth check berth cannot know);
//     RecordResult, Get, List and Clear are for hosts and operators. Each
//     authorizes authz.ActionAuthCheck.
//   - The resolver berth.New gets with the Service, of an unexported type: its
//     Resolve returns plaintext values for no principal, so it is no
//     method of the Service, whose every exported method takes the
//     principal (internal/apicheck checks it). Its check (as
//     Service.Check, when lease.Handle.Run dispatches a task, with the
//     principal: authz.ActionUseAccount for a managed account) and its
//     resolve (at delivery, on any replica) look up
//     the session's lease: a secret env key must be in its config's
//     secret env map (config.KindSecretMap); a managed account needs an
//     exactly matching project auth check, at dispatch and again at
//     delivery. Resolve reads the values from the host's SecretStore.
//
// Floor 4: it reads lease records and fingerprints (lease, floor 3) and
// implements the runner controller's resolver interface
// (internal/controller, floor 4); berth's System wires it.
package handover

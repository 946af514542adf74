// Package custom holds captured templates of environments (custom images,
// IMG-4..8): the Store of templates and of the append-only pointer
// history, and the Service that captures, promotes, rolls back, revokes and
// deletes them for a principal.
//
//	svc := sys.Templates()
//	tpl, err := svc.Capture(ctx, operator, h.ID(), "with tools") // a live lease of the environment
//	tpl, err = svc.Promote(ctx, operator, tpl.ID)                 // leases now start from it
//	tpl, err = svc.Revoke(ctx, operator, tpl.ID, custom.RevokeOptions{Delete: true})
//
// The active pointer lives on the environment record
// (environment.Environment.ActiveTemplate, a server-owned field): it holds
// the template's id, identity and source fingerprint, and changes only by a
// compare-and-swap on the environment's revision that bumps it, so of two
// operators promoting at once one wins and the other gets ErrConflict
// (CFG-6). The lease package reads it without importing this package, and
// starts leases from the template while it applies (drift relinked,
// IMG-6, IMG-8).
//
// What a capture takes: the sandbox's filesystem as it is, with whatever
// ran in it wrote there (files, shell history, a task's output). A
// template is instance-wide: every company's leases of the environment
// start from it once it is promoted. Capture only a lease whose sandbox
// ran nothing you would not run for every company; berth's own runner
// state in the sandbox is not removed before a capture yet (the setup
// sessions of IMG-4 are to do that).
//
// customtest is the store's conformance suite.
package custom

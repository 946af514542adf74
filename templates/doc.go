// Package templates holds custom images prepared in setup sessions and
// kept as templates of environments (IMG-4..8): the Store of templates, of
// the append-only pointer history and of setup sessions, and the Service
// that runs setup sessions and their terminal, and captures, promotes,
// rolls back, revokes and deletes templates for a principal.
//
//	svc := sys.Templates()
//	tpl, err := svc.Capture(ctx, operator, h.ID(), "with tools") // a live lease of the environment
//	tpl, err = svc.Promote(ctx, operator, tpl.ID)                 // leases now start from it
//	tpl, err = svc.Revoke(ctx, operator, tpl.ID, templates.RevokeOptions{Delete: true})
//
// The active pointer lives on the environment record
// (environment.Environment.ActiveTemplate, a server-owned field): it holds
// the template's id, identity and source fingerprint, and changes only by a
// compare-and-swap on the environment's revision that bumps it, so of two
// operators promoting at once one wins and the other gets errcode.ErrConflict
// (CFG-6). The lease package reads it without importing this package, and
// starts leases from the template while it applies (drift relinked,
// IMG-6, IMG-8).
//
// What a capture takes: the sandbox's filesystem as it is, with whatever
// ran in it wrote there (files, shell history, a task's output). A
// template is instance-wide: every company's leases of the environment
// start from it once it is promoted. Capture only a lease whose sandbox
// ran nothing you would not run for every company. A plain Capture takes
// the sandbox as it is; a setup session first removes berth's own runner
// state (under /.berth/state) and refuses a secret env value in the image
// environment.
//
// Setup sessions (IMG-4, IMG-7) prepare a template in a setup sandbox:
//
//	ses, err := svc.Setup(ctx, operator, templates.SetupRequest{Environment: envID, Script: f, Promote: true})
//	ses, err = svc.Setup(ctx, operator, templates.SetupRequest{Environment: envID, Interactive: true})
//	pty, err := svc.OpenTerminal(ctx, operator, ses.ID, 24, 80) // rows, columns
//	ses, err = svc.CaptureSession(ctx, operator, ses.ID, false)
//
// The setup sandbox is a lease of company authz.InstanceCompany (Run: the
// session id, metadata "berth.setup-session") started from the environment's
// current image; capture, cancel, failure and timeout destroy it with
// proof (a template a capture made after a cancel or timeout ended its
// session is revoked, never promoted). One session per environment is active (starting,
// waiting_for_user, capturing), enforced by the store's unique
// constraint, so two processes over one database cannot both start one
// (ErrSessionActive). A TTL (Options.SessionTTL) is pushed back by steps
// and terminal input up to Options.SessionMaxTTL; System.Sweep ends the
// sessions past it, also those whose process died, and destroys the
// sandboxes of ended sessions. Progress events are stored with a cursor
// (Events after N). A script (SetupRequest.Script, at most 16 MiB) is
// JSON:
//
//	{"steps": [{"run": ["sh", "-c", "…"]}, {"write": {"path": "/etc/motd", "mode": "0644", "content": "…"}}]}
//
// Each step is exactly one of run (an argv list, run as it is) and write
// (an absolute path, an octal mode, default "0644", and the content);
// unknown keys are refused naming the step. A step that needs a secret
// reads it from its environment at exec time (the environment's secret
// env map), never from the script. A scripted setup is content-addressed
// (the base image identity and platform, argv lists, file paths, modes
// and content digests) and a finished template with the same hash
// answers it without allocating anything.
// Files written by steps and in the terminal, shell history included, are
// captured as they are. Drivers without template_capture are refused
// before the script is read; without terminal, interactive setup is
// refused and scripted setup works.
//
// The terminal (IMG-5): OpenTerminal returns the PTY in process; for the
// web, MintTerminalToken returns a single-use token (60 s, bound to
// session, principal and URL path: the store keeps only the SHA-256 of the
// token with its principal and path) that TerminalHandler redeems before
// it upgrades with coder/websocket; a token presented by anyone else, or
// on another path, hashes to no record, so nobody else can use one up.
// Binary frames carry output and keystrokes; JSON text frames attached, reset,
// exit and resize. A ring of each PTY's output, indexed by byte offset,
// lets a client reconnect (process, offset) and get exactly the missing
// bytes, or reset and the tail. A PTY lives in the process that opened it.
//
// Operators (instance admins, local operators) start, drive, cancel and
// capture sessions and open terminals; board members read sessions and
// their events; agents nothing.
//
// The Store (store.Stores.Templates) is sealed: store.Memory, store/sqlite
// and store/postgres make one, and templatestest is their conformance
// suite.
package templates

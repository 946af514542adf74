// Package workspace holds the record of an agent's workspace and its store:
// a project put into a lease's sandbox under an owner, with the checkpoint
// it was put in at, and the receipt of its end (issue 52).
//
// # The record
//
// A Workspace is its owner and key (company, project, key), its Source
// (a directory on the host, a Git repository at a ref, or an archive
// stream: what identifies it, never a credential), the lease it lives in,
// its directory under the target's workdir, its Checkpoint (a commit, a
// tree hash, or both), its State and, once ended, its End: the receipt
// that says why (released with its lease, re-prepared on a checkpoint
// mismatch, swept after a crash during prepare, failed) and how (clean,
// failed, indeterminate).
//
// The record is write-ahead: it is inserted in StatePreparing before
// anything is put into the sandbox, so a sweep after a crash finds a
// half-prepared workspace and ends it with a receipt. States only move
// forward: preparing -> ready -> ended, or preparing -> ended; an ended
// record never changes again. Every update is a compare-and-set on
// Revision.
//
// A workspace is its owner's: Manager.Find looks a key up within
// one company and one project only, and at most one record of an owner's
// key is live (not ended) at a time, in every store and across the
// replicas of a SQL store. Another company, or another project's run,
// never finds it by its key.
//
// A workspace's files go in a directory of its own under the target's
// workdir, <workdir>/.berth/ws/<key>-<owner>, where <owner> is the first 16
// hex digits of the SHA-256 of company, NUL, project, NUL, key: on a host
// target (local, SSH), whose workdir outlives leases and is shared by
// every owner, two owners' same key never meet in one directory, and no
// company name, which may hold any character, becomes a path.
//
// # The tree hash
//
// The tree hash is a workspace's checkpoint identity when it is not a Git
// commit: one value for a tree of files that the host (over an os.Root)
// and a small script in a sandbox compute alike. It is "sha256:" and the
// lowercase hex SHA-256 of the entries under the root (the root itself
// excluded), sorted by their relative slash-separated paths as bytes
// (LC_ALL=C sort order), each entry six fields each followed by a NUL:
//
//	path NUL type NUL perm NUL size NUL digest NUL target NUL
//
// where:
//
//   - path: the path relative to the root, slash-separated, no "./"
//   - type: find(1)'s -printf %y letter: f regular file, d directory,
//     l symbolic link, p fifo, s socket, c and b devices
//   - perm: the permission bits (mode & 07777, setuid, setgid and sticky
//     included) in octal without leading zeros, as find's %m prints
//     them; 0 for a symbolic link (whose bits differ between systems)
//   - size: a regular file's length in decimal bytes; 0 for every other type
//   - digest: a regular file's content SHA-256 in lowercase hex; empty
//     for every other type
//   - target: a symbolic link's target as stored, never followed; empty
//     for every other type
//
// Modification times, owners, groups and extended attributes are not in
// it: a tree unpacked again, by another user, hashes the same. A fifo or
// device is hashed by its type and bits, never opened.
//
// The tree hash is computed in the sandbox by the script of
// internal/wsscript (Facts: find, stat -c '%f %s %n', sha256sum and
// readlink, one run through Exec; busybox will do): the sandbox hashes
// each file's content and prints the facts, and the host sorts them,
// builds the stream above and hashes it, so that the one definition lives
// in this package. The stream itself is kept beside the workspace's
// directory (<dir>.base) as the base Collect compares with, checked
// against the checkpoint before it is read. A name holding a newline is
// refused there (the facts are lines). A Git workspace's tree hash leaves
// out its .git directory, which git rewrites as it works.
//
// # The Manager
//
// Manager (System.Workspaces) acts for a principal on a lease's handle:
// Prepare puts a Source in (a host directory through tarsafe.Create, an
// archive stream, or a Git repository fetched by the host's git at a
// ref, shallow by default, its repository going in with it where the
// target has git) through the driver's files capability, under the
// write-ahead record; Collect returns the entries changed since the
// checkpoint as a tar stream, the deletions, and for Git the agent's
// commits as a bundle and the uncommitted diff, with a Receipt naming
// base and head; Show lists a lease's records, Find an owner's live
// workspace by its key; Files reaches a live workspace's files
// (drivers.Files), inside its directory only (a board member lists, the
// holder reads and writes). A workspace is refused to
// another owner (reason workspace_owner), and a reuse checks the
// directory against the checkpoint and prepares again on a mismatch.
// docs/leases.md describes the flow.
//
// # Where it lives
//
// This is a package of its own at the floor above the lease manager,
// beside templates: preparing and collecting a workspace take a lease's
// sandbox (lease and drivers, below it), and the lease package, already
// the largest, stays free of it; berth.New wires the one place where a
// lease's release ends its workspace records. store.Stores names the
// Store (Workspaces), which is sealed: store.Memory, store/sqlite and
// store/postgres make one, and workspace/workspacetest is their
// conformance suite.
package workspace

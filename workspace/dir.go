package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
)

// dirFor returns the directory of an owner's workspace key under a
// target's workdir: <workdir>/.berth/ws/<key>-<owner>, where <owner> is the
// first 16 hex digits of the SHA-256 of company, NUL, project, NUL, key.
// The key alone would let two owners of one host target's workdir (local,
// SSH: shared across leases) meet in one directory; the hash keeps them
// apart without putting a company's name, which may hold any character,
// into a path. key must be valid (Workspace.Validate); workdir absolute.
func dirFor(workdir, company, project, key string) string {
	sum := sha256.Sum256([]byte(company + "\x00" + project + "\x00" + key))
	return path.Join(workdir, ".berth", "ws", key+"-"+hex.EncodeToString(sum[:8]))
}

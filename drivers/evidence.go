package drivers

// EvidenceKind names what a stop proof or a receipt stands on (PRP-6,
// LEASE-7), so that a caller can tell a check made from outside the sandbox
// from a claim made inside it without parsing the evidence text.
type EvidenceKind string

// The evidence kinds, strongest first.
const (
	// EvidenceNone: nothing was stopped and nothing is proven (a keep
	// release, which leaves the sandbox and its tasks running).
	EvidenceNone EvidenceKind = ""
	// EvidenceProvider: the sandbox was destroyed or stopped, confirmed by
	// the provider for that provider lease id (read back after the change).
	EvidenceProvider EvidenceKind = "provider"
	// EvidenceCgroup: the lease's processes ran in a cgroup berth created
	// (root-owned: a task of another account cannot leave it), and berth's
	// check from a fresh session killed it (cgroup.kill), saw it empty and
	// removed it.
	EvidenceCgroup EvidenceKind = "cgroup"
	// EvidenceTagScan: berth's own check from a fresh session: the
	// process groups are gone and a /proc scan finds no process carrying
	// the lease's tag. A task that re-execs with a cleared environment
	// drops the tag, so on a shared account without a cgroup it evades
	// this check.
	EvidenceTagScan EvidenceKind = "tag_scan"
	// EvidenceRunnerAttested: what the runner inside the sandbox reported
	// (its process-group and tag checks). The sandbox is hostile: never
	// enough alone to end a lease.
	EvidenceRunnerAttested EvidenceKind = "runner_attested"
)

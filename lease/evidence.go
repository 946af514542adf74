package lease

import "github.com/berthdev/berth/drivers"

// evidenceEnds reports whether evidence of kind k is enough to end a
// lease (PRP-6): the provider's confirmation, an emptied cgroup or
// berth's own tag scan. A runner's attestation and no evidence are not.
func evidenceEnds(k drivers.EvidenceKind) bool {
	return k == drivers.EvidenceProvider || k == drivers.EvidenceCgroup || k == drivers.EvidenceTagScan
}

// strongerEvidence returns the stronger of k and o in the order provider,
// cgroup, tag_scan, runner_attested, none.
func strongerEvidence(k, o drivers.EvidenceKind) drivers.EvidenceKind {
	if evidenceRank(o) > evidenceRank(k) {
		return o
	}
	return k
}

func evidenceRank(k drivers.EvidenceKind) int {
	switch k {
	case drivers.EvidenceProvider:
		return 4
	case drivers.EvidenceCgroup:
		return 3
	case drivers.EvidenceTagScan:
		return 2
	case drivers.EvidenceRunnerAttested:
		return 1
	}
	return 0
}

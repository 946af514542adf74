package lease

import (
	"testing"

	"github.com/berthdev/berth/drivers"
)

// PRP-6: which evidence ends a lease, and which is stronger.
func TestEvidenceKinds(t *testing.T) {
	t.Parallel()
	for k, want := range map[drivers.EvidenceKind]bool{
		drivers.EvidenceProvider: true, drivers.EvidenceCgroup: true, drivers.EvidenceTagScan: true,
		drivers.EvidenceRunnerAttested: false, drivers.EvidenceNone: false, "made-up": false,
	} {
		if got := evidenceEnds(k); got != want {
			t.Errorf("evidenceEnds(%q) = %t, want %t", k, got, want)
		}
	}
	order := []drivers.EvidenceKind{drivers.EvidenceNone, drivers.EvidenceRunnerAttested, drivers.EvidenceTagScan, drivers.EvidenceCgroup, drivers.EvidenceProvider}
	for i, weak := range order {
		for _, strong := range order[i:] {
			if got := strongerEvidence(weak, strong); got != strong {
				t.Errorf("strongerEvidence(%q, %q) = %q", weak, strong, got)
			}
			if got := strongerEvidence(strong, weak); got != strong {
				t.Errorf("strongerEvidence(%q, %q) = %q", strong, weak, got)
			}
		}
	}
}

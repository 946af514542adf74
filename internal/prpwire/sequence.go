package prpwire

// SeqVerdict is what a receiver does with a sequenced message.
type SeqVerdict int

// The verdicts of CheckSeq.
const (
	// SeqNext: seq is the next expected; process it.
	SeqNext SeqVerdict = iota
	// SeqDuplicate: seq was already received; answer it idempotently (a
	// command's stored result) or drop it (an event), never process twice.
	SeqDuplicate
	// SeqGap: seq is past the next expected; close with CloseSequenceGap
	// and let the session resume.
	SeqGap
)

// CheckSeq returns the verdict for seq when last is the highest seq
// received so far on a contiguous sequence starting at 1.
func CheckSeq(last, seq uint64) SeqVerdict {
	switch {
	case seq == last+1:
		return SeqNext
	case seq <= last:
		return SeqDuplicate
	}
	return SeqGap
}

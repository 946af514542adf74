package runner

// OutboxRecordSize is the size the outbox counts for an output event of
// task with n bytes of data (a binary record); other events count as their
// JSON.
func OutboxRecordSize(task string, n int) int { return outHeader + len(task) + n }

// testKey is the state key of the internal tests' journals and outboxes.
var testKey = []byte("0123456789abcdef0123456789abcdef")

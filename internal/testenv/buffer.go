package testenv

import "github.com/berthdev/berth/internal/syncbuf"

// Buffer is syncbuf.Buffer, the one concurrency-safe buffer of the tests: a
// sink for the logs and streamed output that tests search (for secrets,
// among others). The zero value is ready to use.
type Buffer = syncbuf.Buffer

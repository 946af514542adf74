package controller

// SecretFrames returns how many secrets frames c sent.
func SecretFrames(c *Controller) int64 { return c.secretFrames.Load() }

// PrintableLog is printableLog, for tests.
func PrintableLog(b []byte, max int) string { return printableLog(b, max) }

// JournalReadBatch is journalReadBatch, for tests.
const JournalReadBatch = journalReadBatch

package prp

// JournalState is the state of a command in a journal (PRP-4). A command
// moves received -> executing -> done, and is synced to disk in each state
// before the next step; one found executing after a restart becomes
// indeterminate and never runs again.
type JournalState string

// The journal states.
const (
	JournalReceived      JournalState = "received"
	JournalExecuting     JournalState = "executing"
	JournalDone          JournalState = "done"
	JournalIndeterminate JournalState = "indeterminate"
)

// Terminal reports whether s is final (done or indeterminate).
func (s JournalState) Terminal() bool { return s == JournalDone || s == JournalIndeterminate }

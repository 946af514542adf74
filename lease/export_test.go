package lease

// SetJoinHook makes m call f each time a caller has joined a coalesced
// acquisition of key.
func SetJoinHook(m *Manager, f func(key string)) { m.joined = f }

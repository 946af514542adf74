package lease

// SetJoinHook makes m call f each time a caller has joined a coalesced
// acquisition of key.
func SetJoinHook(m *Manager, f func(key string)) { m.joined = f }

// WaitPoolRefills waits until m's background pool refills are done.
func WaitPoolRefills(m *Manager) { m.pools.wg.Wait() }

// Package storetest is the store conformance suite: the executable spec of
// every package's Store interface. Each implementation (the memory stores,
// internal/sqlstore on SQLite and on PostgreSQL) runs it from a short test
// file with a constructor that returns a fresh, empty store:
//
//	storetest.RunEnvironmentStoreTests(t, func(t *testing.T) environment.Store { ... })
//
// Start with environment.go. There is one Run<Component>StoreTests function
// per component, each in its own file (environment.go; lease and
// qualification add lease.go, qualification.go), so that components are
// added without editing each other's files. Every subtest gets its own store
// and runs in parallel; errors are asserted with errors.Is against the
// owning package's sentinels, never by message text.
package storetest

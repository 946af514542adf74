// Package environmenttest holds the conformance suites of the environment
// package's four store interfaces, the executable spec of each. Every
// implementation (the memory stores of package environment, store/sqlite and
// store/postgres) runs them from a short test with a constructor that
// returns a fresh, empty store:
//
//	environmenttest.RunStoreTests(t, func(t *testing.T) environment.Store { ... })
//
// RunStoreTests checks environment.Store, RunBindingStoreTests
// environment.BindingStore, RunHealthStoreTests environment.HealthStore and
// RunSecretUseStoreTests environment.SecretUseStore. Every subtest gets its
// own store and runs in parallel; errors are asserted with errors.Is against
// the environment package's sentinels, never by message text.
package environmenttest

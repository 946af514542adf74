// Package drivertest is the driver conformance suite: the executable form of
// the drivers contract. Every driver's test file builds a Harness and calls
// RunConformanceTests (conformance.go for the core contract, optional.go for
// the capability-gated tests); RunBenchmarks (bench.go) measures
// acquire+exec+release against an exec anchor of the same run.
//
// Start with Harness and HarnessMaker (harness.go). A Harness that can point
// its config at a captured image implements ImageHarness so that capture
// and template deletion are checked end to end.
package drivertest

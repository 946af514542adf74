package drivertest

// What the external tests (package drivertest_test) call; unexported in
// the package.
var (
	CheckFailure = checkFailure
	Failures     = failures
)

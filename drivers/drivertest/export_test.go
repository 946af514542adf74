package drivertest

// What the external tests (package drivertest_test) call; unexported in
// the package.
var (
	CheckFailure = checkFailure
	Failures     = failures
)

// The suite's own tests run it on the fake about a dozen times, each a
// subprocess or a subtest; the large file's size is not what they test
// (drivers/fake's TestConformance moves the 64 MiB), and under -race each
// 64 MiB round trip costs about 4 s of CPU.
func init() { largeFile = 1 << 20 }

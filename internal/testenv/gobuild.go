package testenv

import (
	"os"
	"os/exec"
)

// GoBuild builds the main package pkg into bin with the go command, as a
// test's helper binary (a plugin, a simulator). A test binary built with
// -race builds it with -race too: the packages it shares with the test
// (a driver, gRPC, the Docker client) then come from the build cache the
// test's own compile filled, and only the link is new, where a plain
// build compiled the whole tree a second time (make test, cold: the
// plugin tests' builds were most of their package's two minutes).
func GoBuild(bin, pkg string) ([]byte, error) {
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = os.Environ()
	return cmd.CombinedOutput()
}

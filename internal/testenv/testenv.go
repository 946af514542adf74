// Package testenv gives tests the real components they need: an OpenSSH
// server, the Docker engine, an OCI registry on loopback, a PostgreSQL
// cluster. A test that cannot find a component skips with a message saying
// how to get it; when BERTH_REQUIRE_REAL=1 (set by make test and CI) it
// fails instead, so that CI proves the real thing.
package testenv

import (
	"os"
	"testing"
)

// RequireReal reports whether BERTH_REQUIRE_REAL=1 is set.
func RequireReal() bool { return os.Getenv("BERTH_REQUIRE_REAL") == "1" }

// Missing ends the test because component is not available: a skip that
// says how to get it, or a failure under BERTH_REQUIRE_REAL=1.
func Missing(t testing.TB, component, how string, reason error) {
	t.Helper()
	msg := component + " is not available"
	if reason != nil {
		msg += ": " + reason.Error()
	}
	msg += " (" + how + ")"
	if RequireReal() {
		t.Fatalf("%s; BERTH_REQUIRE_REAL=1 forbids skipping", msg)
	}
	t.Skip(msg)
}

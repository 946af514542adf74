package kubernetes_test

import (
	"testing"

	"github.com/berthdev/berth/internal/testenv/kubecluster"
)

// TestCluster checks the package's shared cluster itself: pods pull by
// digest from the loopback registry and run imported images, and the host
// check sees a running pod; TestMain's stop then puts the host back (the
// test binary fails when it could not). The suite's only cluster runs
// here, so the check costs no second start.
func TestCluster(t *testing.T) {
	t.Parallel()
	kubecluster.SelfTest(t, kubecluster.Shared(t))
}

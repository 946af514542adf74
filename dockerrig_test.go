package berth_test

import (
	"testing"

	"github.com/docker/docker/client"

	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// dockerRig is what the root package's tests on the real Docker engine
// start with: the engine's client, the busybox test image pushed to a
// registry of the test's own and pinned by digest, and a run label value
// that marks the test's containers. At cleanup the test's containers and
// the registry's images are removed from the engine.
func dockerRig(t testing.TB) (*client.Client, testimage.Image, string) {
	t.Helper()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	run := randomHex(t)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	return cli, img, run
}

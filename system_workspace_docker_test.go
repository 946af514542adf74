package berth_test

import (
	"testing"

	"github.com/berthdev/berth/drivers/docker"
)

// The workspace's life in a Docker sandbox of the busybox test image on
// network none: busybox's find, stat and sha256sum compute the tree
// hash, equal to the host's.
func TestWorkspaceLifeDocker(t *testing.T) {
	_, img, run := dockerRig(t)
	testWorkspaceLife(t, docker.New(nil), map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}})
}

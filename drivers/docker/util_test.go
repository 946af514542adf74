package docker_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berthdev/berth/internal/testenv"
)

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func remoteHas(ref string) error {
	d, err := name.NewDigest(ref, name.Insecure)
	if err != nil {
		return err
	}
	_, err = remote.Head(d)
	return err
}

func removeImageAtCleanup(t *testing.T, e *env, ref string) {
	testenv.RemoveImageAtCleanup(t, e.cli, ref)
}

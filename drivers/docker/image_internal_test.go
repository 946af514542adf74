package docker

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

// IMG-3: the reported identity is the repo digest of what the container
// runs, preferring the configured repository and digest.
func TestPickRepoDigest(t *testing.T) {
	t.Parallel()
	const (
		a = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		b = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	)
	for _, tc := range []struct {
		name        string
		repoDigests []string
		want        string // configured reference
		got         string // "" = error
	}{
		{"pinned match among others", []string{"other.example/x@" + a, "reg.example/app@" + b, "reg.example/app@" + a}, "reg.example/app@" + a, "reg.example/app@" + a},
		{"pinned digest not run: report what runs", []string{"reg.example/app@" + b}, "reg.example/app@" + a, "reg.example/app@" + b},
		{"tag: the configured repository", []string{"other.example/x@" + a, "reg.example/app@" + b}, "reg.example/app:latest", "reg.example/app@" + b},
		{"only another repository", []string{"other.example/x@" + a}, "reg.example/app:latest", "other.example/x@" + a},
		{"docker hub familiar names normalize", []string{"busybox@" + a}, "docker.io/library/busybox:1", "index.docker.io/library/busybox@" + a},
		{"no repo digest", nil, "reg.example/app:latest", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ref, err := name.ParseReference(tc.want, name.WeakValidation)
			if err != nil {
				t.Fatal(err)
			}
			id, err := pickRepoDigest(tc.repoDigests, ref, "sha256:cccc")
			if tc.got == "" {
				if err == nil {
					t.Errorf("got %s, want an error", id)
				}
				return
			}
			if err != nil || id.String() != tc.got {
				t.Errorf("got %s, %v; want %s", id, err, tc.got)
			}
		})
	}
}

package qualify_test

import (
	"fmt"
	"time"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/qualification"
)

// A probe of a saved environment with a pinned image records a
// qualification; the same probe of a mutable tag says why it did not.
func ExampleEvaluate() {
	fp := qualify.Fingerprint(qualify.FingerprintInput{
		Driver:  "docker",
		Target:  map[string]any{"host": "unix:///var/run/docker.sock"},
		Secrets: map[string]qualify.SecretRef{},
		Image:   "127.0.0.1:5000/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	})
	pinned := images.MustParseReference("127.0.0.1:5000/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	live, _ := pinned.Identity()
	subject := qualify.Subject{Company: "acme", Environment: "env-1", Saved: true, Fingerprint: fp, Image: pinned}
	evidence := qualify.Evidence{
		LiveImage:        live,
		Platform:         qualification.Platform{OS: "Linux", Arch: "x86_64", Libc: "glibc", LibcVersion: "2.36"},
		CleanupConfirmed: true,
		LeaseID:          "lease-1",
		At:               time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
	}
	rec, d := qualify.Evaluate(subject, evidence)
	fmt.Println(d.Code, rec.Platform)

	subject.Image = images.MustParseReference("127.0.0.1:5000/app:v1")
	_, d = qualify.Evaluate(subject, evidence)
	fmt.Println(d)
	// Output:
	// recorded linux/amd64 libc=glibc:2.36
	// image_not_pinned: image "127.0.0.1:5000/app:v1" is a mutable tag: pin it by digest (repo@sha256:...) to qualify
}

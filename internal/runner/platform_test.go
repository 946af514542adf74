package runner_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/runner"
)

// The runner's hello reports the platform the probe would measure: the
// same detection script and parser (issue 12 item 9, PRP-3).
func TestDefaultPlatformIsTheProbes(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("sh", "-c", qualify.DetectScript).Output()
	if err != nil {
		t.Fatalf("detection script: %v", err)
	}
	det, err := qualify.ParseDetection(string(out))
	if err != nil {
		t.Fatal(err)
	}
	got, err := runner.DefaultPlatform(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != det.Platform {
		t.Errorf("DefaultPlatform = %s, the probe's parser says %s", got, det.Platform)
	}
	if got.Libc == "" {
		t.Errorf("DefaultPlatform = %s: no libc measured on this glibc host", got)
	}
}

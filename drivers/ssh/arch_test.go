package ssh

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
)

// issue 25: the ssh driver reports the host's architecture before
// anything is allocated (uname -m, normalized), so that a lease picks the
// runner binary of a set for it; the workspace directory is not made.
func TestRunnerArchReportsTheHostsArchitecture(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := e.config(t, nil)
	wd := cfg.String(fieldWorkdir) + "/not-made"
	cfg[fieldWorkdir] = wd
	ar, err := drivers.DriverAs[drivers.ArchReporter](e.d)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := ar.RunnerArch(ctx, cfg)
	if err != nil || arch != runtime.GOARCH {
		t.Errorf("RunnerArch = %q, %v; want %s (the test sshd is this host)", arch, err, runtime.GOARCH)
	}
	if _, err := os.Stat(wd); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RunnerArch made the workspace %s (%v)", wd, err)
	}
}

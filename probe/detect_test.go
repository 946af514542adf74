package probe

import (
	"context"
	"os/exec"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/qualify"
)

// The one script runs in the fake driver's sh subset and reports each
// preset platform; the fake's output parses like the real one.
func TestDetectScriptOnFake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		plat string
		want string
	}{
		{"debian", "debian-12", "linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12"},
		{"alpine", "alpine", "linux/amd64 libc=musl:1.2.4 kernel=6.1.0-18-amd64 release=alpine:3.19.1"},
		{"busybox", "busybox", "linux/amd64 libc=none kernel=6.1.0-18-amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := fake.New(&fake.Options{Platform: tt.plat})
			sb, err := d.Acquire(ctx, config.Config{}, drivers.AcquireRequest{LeaseID: "l1"})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Release(ctx, drivers.Destroy)
			res, err := sb.Exec(ctx, drivers.Command{Argv: qualify.DetectArgv()})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 {
				t.Fatalf("exit %d, stderr %q", res.ExitCode, res.Stderr)
			}
			det, err := qualify.ParseDetection(string(res.Stdout))
			if err != nil {
				t.Fatalf("ParseDetection: %v\n%s", err, res.Stdout)
			}
			if det.Platform.String() != tt.want {
				t.Errorf("platform = %q, want %q", det.Platform, tt.want)
			}
			if det.Hostname != sb.ID() || det.Cwd != "/root" {
				t.Errorf("hostname %q, cwd %q; want %q, %q", det.Hostname, det.Cwd, sb.ID(), "/root")
			}
			if fakectl.Of(d).Calls("exec") != 1 {
				t.Errorf("exec calls = %d, want exactly one", fakectl.Of(d).Calls("exec"))
			}
		})
	}
}

// The script runs unchanged in every real shell on this machine and
// measures it; the outputs agree.
func TestDetectScriptRealShells(t *testing.T) {
	t.Parallel()
	var outs []string
	for _, sh := range [][]string{{"dash"}, {"bash", "--posix"}, {"busybox", "sh"}, {"sh"}} {
		path, err := exec.LookPath(sh[0])
		if err != nil {
			t.Logf("%s not installed; skipped", sh[0])
			continue
		}
		args := append(sh[1:], "-c", qualify.DetectScript)
		out, err := exec.Command(path, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", sh, err)
		}
		d, err := qualify.ParseDetection(string(out))
		if err != nil {
			t.Fatalf("%v: %v\n%s", sh, err, out)
		}
		if d.Platform.OS == "" || d.Platform.Arch == "" || d.Hostname == "" || d.Cwd == "" {
			t.Errorf("%v: incomplete detection %+v", sh, d)
		}
		outs = append(outs, d.Platform.String())
	}
	if len(outs) == 0 {
		t.Skip("no shell found")
	}
	for _, o := range outs[1:] {
		if o != outs[0] {
			t.Errorf("shells disagree: %q", outs)
		}
	}
}

package docker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
)

// Issue 11 item 8: the user knob sets the container's user, read back from
// the engine and seen from inside by every command.
func TestUserKnobRunsCommandsAsThatUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	for _, tc := range []struct{ user, uid, gid string }{
		{"1234:2345", "1234", "2345"},
		{"4321", "4321", "0"}, // no GID: the engine uses the primary group of the image, root's here
	} {
		sb := e.acquire(ctx, e.config(e.img.Ref, map[string]any{docker.FieldUser: tc.user}), drivers.AcquireRequest{})
		ins, err := e.cli.ContainerInspect(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if ins.Config.User != tc.user {
			t.Errorf("user %q: the engine reports user %q", tc.user, ins.Config.User)
		}
		got := run(t, ctx, sb, "sh", "-c", "id -u; id -g")
		if want := tc.uid + "\n" + tc.gid + "\n"; got != want {
			t.Errorf("user %q: id -u; id -g inside = %q, want %q", tc.user, got, want)
		}
	}
	// Without the knob: the image's user (root in busybox).
	sb := e.acquire(ctx, e.config(e.img.Ref, nil), drivers.AcquireRequest{})
	if got := run(t, ctx, sb, "id", "-u"); got != "0\n" {
		t.Errorf("default user: id -u = %q, want the image's root", got)
	}
}

// Issue 11 item 8: with readonly_rootfs the workdir is a writable tmpfs
// owned by the configured user; writes elsewhere in the root fail. The
// same under gVisor (issue 56: runtime runsc).
func TestReadonlyRootfsHasAWritableWorkdir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	forRuntimes(t, e, func(t *testing.T, overrides map[string]any) {
		readonlyRootfsHasAWritableWorkdir(t, e, overrides)
	})
}

func readonlyRootfsHasAWritableWorkdir(t *testing.T, e *env, overrides map[string]any) {
	ctx := testCtx(t)
	overrides[docker.FieldReadonlyRootfs] = true
	overrides[docker.FieldWorkdir] = "/workspace"
	overrides[docker.FieldUser] = "1234:2345"
	overrides[docker.FieldMemory] = "256m"
	cfg := e.config(e.img.Ref, overrides)
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{})
	ins, err := e.cli.ContainerInspect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if !ins.HostConfig.ReadonlyRootfs {
		t.Error("the engine reports a writable root filesystem")
	}
	wantTmpfs := map[string]string{
		"/tmp":       "rw,exec,nosuid,nodev,size=256m,mode=1777",
		"/workspace": "rw,exec,nosuid,nodev,mode=0755,size=268435456,uid=1234,gid=2345",
	}
	if diff := cmp.Diff(wantTmpfs, ins.HostConfig.Tmpfs); diff != "" {
		t.Errorf("tmpfs mounts (-want +got):\n%s", diff)
	}
	// Relative to the default directory (the workdir), then elsewhere.
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c",
		"pwd; echo hi > note && cat note; stat -c '%u:%g' .; touch /etc/berth-probe 2>/dev/null && echo root-writable || echo root-readonly; touch /tmp/x && echo tmp-ok"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "/workspace\nhi\n1234:2345\nroot-readonly\ntmp-ok\n"
	if got := string(res.Stdout); got != want {
		t.Errorf("inside: stdout %q (stderr %q), want %q", got, res.Stderr, want)
	}
}

// Issue 23 item 3: on a read-only root, a binary put in /tmp or in the
// workdir runs (the tmpfs mounts are exec; nosuid and nodev stay): agents
// build code there and run it. busybox has no compiler, so the executable
// is a copy of busybox itself.
func TestReadonlyRootfsRunsBinariesBuiltInTmpAndWorkdir(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, map[string]any{docker.FieldReadonlyRootfs: true, docker.FieldWorkdir: "/workspace",
		docker.FieldUser: "1234:2345"})
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{})
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c",
		"b=$(readlink -f /bin/sh); cp \"$b\" /tmp/busybox && /tmp/busybox echo tmp-ran; cp \"$b\" ./busybox && ./busybox echo workdir-ran; " +
			"grep -E ' /(tmp|workspace) ' /proc/mounts | grep -c nosuid,nodev"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "tmp-ran\nworkdir-ran\n2\n"; string(res.Stdout) != want || res.ExitCode != 0 {
		t.Errorf("exit %d, stdout %q (stderr %q), want %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

// readonly_rootfs with the workdir "/" is refused: "/" cannot be a tmpfs,
// and commands would have nowhere to write but /tmp.
func TestReadonlyRootfsNeedsAWorkdir(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(nil)
	_, err := d.Schema().Normalize(map[string]any{"image": pinned, "readonly_rootfs": true})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != docker.FieldWorkdir || !errors.Is(err, config.ErrInvalid) {
		t.Errorf("Normalize: err = %v, want a ConfigError on workdir", err)
	}
	if _, err := d.Schema().Normalize(map[string]any{"image": pinned, "readonly_rootfs": true, "workdir": "/workspace"}); err != nil {
		t.Errorf("readonly_rootfs with workdir /workspace: %v", err)
	}
}

func TestUserKnobRefusesNames(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(nil)
	for _, u := range []string{"root", "1000:", ":1000", "1:2:3", "-1", "+5", "2147483648", "1000:staff", ""} {
		_, err := d.Schema().Normalize(map[string]any{"image": pinned, "user": u})
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != docker.FieldUser {
			t.Errorf("user %q: err = %v, want a ConfigError on user", u, err)
		} else if u != "" && !strings.Contains(ce.Reason, "numeric") {
			t.Errorf("user %q: reason %q does not say what is wanted", u, ce.Reason)
		}
	}
	for _, u := range []string{"0", "1000", "1000:1000", "2147483647:0"} {
		if _, err := d.Schema().Normalize(map[string]any{"image": pinned, "user": u}); err != nil {
			t.Errorf("user %q: %v", u, err)
		}
	}
}

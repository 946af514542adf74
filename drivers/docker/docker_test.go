package docker_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-connections/nat"
	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

const testTimeout = 3 * time.Minute

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// acquire acquires a sandbox and destroys it at cleanup.
func (e *env) acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) drivers.Sandbox {
	e.tb.Helper()
	sb, err := e.drv.Acquire(ctx, cfg, req)
	if err != nil {
		e.tb.Fatalf("Acquire: %v", err)
	}
	e.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = sb.Release(ctx, drivers.Destroy)
	})
	return sb
}

func run(t *testing.T, ctx context.Context, sb drivers.Sandbox, argv ...string) string {
	t.Helper()
	res, err := sb.Exec(ctx, drivers.Command{Argv: argv})
	if err != nil {
		t.Fatalf("Exec %q: %v", argv, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("Exec %q: exit %d, stderr %q", argv, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// The hardening is what the engine reports for the container, not what the
// driver meant to ask for.
func TestHardenedByDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		overrides map[string]any
		network   string
		ports     nat.PortMap
		pids      int64
		memory    int64
		nanoCPUs  int64
		readonly  bool
	}{
		{name: "defaults", network: "none", pids: docker.DefaultPidsLimit, memory: 1 << 30},
		{
			name: "limits and a read-only root filesystem from the knobs",
			overrides: map[string]any{docker.FieldCPUs: "1.5", docker.FieldMemory: "256m", docker.FieldPidsLimit: 64,
				docker.FieldReadonlyRootfs: true, docker.FieldWorkdir: "/workspace"},
			network: "none", pids: 64, memory: 256 << 20, nanoCPUs: 1_500_000_000, readonly: true,
		},
		{
			name:      "published port only on loopback",
			overrides: map[string]any{"network": "bridge", docker.FieldPorts: []any{"8080"}},
			network:   "bridge",
			ports:     nat.PortMap{"8080/tcp": {{HostIP: "127.0.0.1", HostPort: ""}}},
			pids:      docker.DefaultPidsLimit,
			memory:    1 << 30,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := testCtx(t)
			sb := e.acquire(ctx, e.config(e.img.Ref, tc.overrides), drivers.AcquireRequest{LeaseID: "lease-hardening"})
			ins, err := e.cli.ContainerInspect(ctx, sb.ID())
			if err != nil {
				t.Fatal(err)
			}
			hc := ins.HostConfig
			type hardening struct {
				CapDrop, CapAdd, SecurityOpt []string
				Privileged                   bool
				Network                      string
				PidsLimit, Memory, Swap, CPU int64
				Init, Readonly               bool
				Ports                        nat.PortMap
				Managed, Lease               string
			}
			got := hardening{
				CapDrop: hc.CapDrop, CapAdd: hc.CapAdd, SecurityOpt: hc.SecurityOpt, Privileged: hc.Privileged,
				Network: string(hc.NetworkMode), Memory: hc.Memory, Swap: hc.MemorySwap,
				Init: hc.Init != nil && *hc.Init, Ports: hc.PortBindings, CPU: hc.NanoCPUs, Readonly: hc.ReadonlyRootfs,
				Managed: ins.Config.Labels[docker.LabelManaged], Lease: ins.Config.Labels[docker.LabelLease],
			}
			if hc.PidsLimit != nil {
				got.PidsLimit = *hc.PidsLimit
			}
			want := hardening{
				CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges:true"}, Network: tc.network,
				PidsLimit: tc.pids, Memory: tc.memory, Swap: tc.memory, CPU: tc.nanoCPUs, Readonly: tc.readonly,
				Init: true, Ports: tc.ports,
				Managed: "true", Lease: "lease-hardening",
			}
			if len(want.Ports) == 0 {
				want.Ports = got.Ports // nil and empty are both "none published"
				if len(got.Ports) != 0 {
					t.Errorf("ports published without being asked: %v", got.Ports)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("container hardening (-want +got):\n%s", diff)
			}
			for port, bindings := range ins.NetworkSettings.Ports {
				for _, b := range bindings {
					if b.HostIP != "127.0.0.1" {
						t.Errorf("port %s bound on %q, want only 127.0.0.1", port, b.HostIP)
					}
				}
			}
			// Seen from inside: no effective capabilities, no new privileges.
			status := run(t, ctx, sb, "grep", "-E", "^(CapEff|NoNewPrivs):", "/proc/self/status")
			if diff := cmp.Diff("CapEff:\t0000000000000000\nNoNewPrivs:\t1\n", status); diff != "" {
				t.Errorf("/proc/self/status inside (-want +got):\n%s", diff)
			}
			// A read-only root keeps a writable /tmp; commands still run.
			res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "touch /berth-probe; echo $?; touch /tmp/berth-probe && echo tmp-ok"}})
			if err != nil {
				t.Fatal(err)
			}
			wantOut := "0\ntmp-ok\n"
			if tc.readonly {
				wantOut = "1\ntmp-ok\n"
			}
			if got := string(res.Stdout); got != wantOut {
				t.Errorf("writes to / and /tmp: stdout %q (stderr %q), want %q", got, res.Stderr, wantOut)
			}
		})
	}
}

// IMG-3: a pinned digest is pulled from the registry once, and the live
// identity read back from the engine is that digest.
func TestPinnedDigestIsPulledAndVerified(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(e.img.Ref, nil)
	before := e.reg.ManifestGets()
	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{})
	pulled := e.reg.ManifestGets()
	if pulled == before {
		t.Errorf("acquire of %s fetched no manifest from the registry; want a pull", e.img.Ref)
	}
	want, err := images.DigestIdentity(e.img.Repo, e.img.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sb.(drivers.ImageReporter).ImageIdentity(ctx)
	if err != nil {
		t.Fatalf("ImageIdentity: %v", err)
	}
	if got != want {
		t.Errorf("ImageIdentity = %s, want %s", got, want)
	}
	// Present now: a second acquire of the pinned digest does not pull.
	sb2 := e.acquire(ctx, cfg, drivers.AcquireRequest{})
	if n := e.reg.ManifestGets(); n != pulled {
		t.Errorf("second acquire of a present pinned image fetched %d manifests; want none", n-pulled)
	}
	if got2, err := sb2.(drivers.ImageReporter).ImageIdentity(ctx); err != nil || got2 != want {
		t.Errorf("second sandbox ImageIdentity = %s, %v; want %s", got2, err, want)
	}
}

// IMG-3: after the tag is moved to another image, a container started from
// the old one still reports the old digest, and one started from the moved
// tag reports the new digest, which does not match the pinned one.
func TestRetaggedImageDoesNotPassAsPinned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	pinned, _ := images.DigestIdentity(e.img.Repo, e.img.Digest)
	byTag := e.config(e.img.TagRef, map[string]any{docker.FieldPullPolicy: docker.PullAlways})
	old := e.acquire(ctx, byTag, drivers.AcquireRequest{})
	identity := func(sb drivers.Sandbox) images.Identity {
		t.Helper()
		id, err := sb.(drivers.ImageReporter).ImageIdentity(ctx)
		if err != nil {
			t.Fatalf("ImageIdentity: %v", err)
		}
		return id
	}
	if got := identity(old); got != pinned {
		t.Fatalf("before the retag: ImageIdentity = %s, want %s", got, pinned)
	}

	moved := testimage.Busybox(t, e.reg, nil) // same repo, same tag, other image
	if moved.TagRef != e.img.TagRef || moved.Digest == e.img.Digest {
		t.Fatalf("retag did not move %s", e.img.TagRef)
	}
	movedID, _ := images.DigestIdentity(moved.Repo, moved.Digest)

	if got := identity(old); got != pinned {
		t.Errorf("after the retag the old container reports %s, want the digest it runs %s", got, pinned)
	}
	fresh := e.acquire(ctx, byTag, drivers.AcquireRequest{})
	got := identity(fresh)
	if got == pinned {
		t.Errorf("a container of the moved tag passes as the pinned image %s", pinned)
	}
	if got != movedID {
		t.Errorf("a container of the moved tag reports %s, want %s", got, movedID)
	}
	// The pinned reference still runs the pinned image.
	still := e.acquire(ctx, e.config(e.img.Ref, nil), drivers.AcquireRequest{})
	if got := identity(still); got != pinned {
		t.Errorf("pinned acquire after the retag reports %s, want %s", got, pinned)
	}
}

// A missing image is ErrImageNotFound naming the reference, and nothing is
// left behind.
func TestMissingImageIsImageNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	zeros := "sha256:" + strings.Repeat("0", 64)
	notPulled := testimage.Busybox(t, e.reg, &testimage.Options{Repo: "berth/never-pulled"})
	for _, tc := range []struct {
		name      string
		ref       string
		overrides map[string]any
	}{
		{"pinned digest absent from the registry", e.img.Repo + "@" + zeros, nil},
		{"tag absent from the registry", e.img.Repo + ":no-such-tag", nil},
		{"repository absent from the registry", e.reg.Host + "/berth/no-such-repo:latest", nil},
		{"local template absent from the engine", docker.LocalRegistry + "/templates/none@" + zeros, nil},
		{"pull_policy never and not in the engine", notPulled.TagRef, map[string]any{docker.FieldPullPolicy: docker.PullNever}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := e.drv.Acquire(ctx, e.config(tc.ref, tc.overrides), drivers.AcquireRequest{})
			if err == nil {
				_, _ = sb.Release(ctx, drivers.Destroy)
				t.Fatalf("Acquire of %s succeeded", tc.ref)
			}
			if !errors.Is(err, drivers.ErrImageNotFound) || reason.Of(err) != reason.ImageNotFound {
				t.Errorf("Acquire of %s: err = %v, want ErrImageNotFound", tc.ref, err)
			}
			if !strings.Contains(err.Error(), tc.ref) {
				t.Errorf("error %q does not name the reference %s", err, tc.ref)
			}
		})
	}
	left, err := e.drv.List(ctx, e.config(e.img.Ref, nil), map[string]string{runLabel: e.run})
	if err != nil || len(left) != 0 {
		t.Errorf("containers left after failed acquires: %v, %v", left, err)
	}
}

// A glibc image made from the host's files reports the host's glibc inside
// the sandbox, so that libc detection has a real glibc target.
func TestGlibcImageRunsTheHostsLibc(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	hostOut, err := exec.Command("getconf", "GNU_LIBC_VERSION").Output()
	if err != nil {
		testenv.Missing(t, "getconf", "install libc-bin", err)
	}
	img := testimage.Busybox(t, e.reg, &testimage.Options{Repo: "berth/glibc", Glibc: true})
	sb := e.acquire(ctx, e.config(img.Ref, nil), drivers.AcquireRequest{})
	if got := run(t, ctx, sb, "getconf", "GNU_LIBC_VERSION"); got != string(hostOut) {
		t.Errorf("getconf GNU_LIBC_VERSION inside = %q, want the host's %q", got, hostOut)
	}
	if got := run(t, ctx, sb, "ldd", "--version"); !strings.Contains(strings.ToUpper(got), "GLIBC") {
		t.Errorf("ldd --version inside = %q, want a GLIBC banner", got)
	}
}
